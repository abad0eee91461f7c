"""End to end with the real Claude Code CLI, headless (`claude -p`), offline, against a scripted model.

Claude Code talks to `tokenpilot serve` through `ANTHROPIC_BASE_URL`; the proxy's upstream
is `FakeAnthropic`, which refuses more than 4 cache breakpoints or broken tool pairing,
as Anthropic does. The model has Claude Code run a program that prints a pretty-printed JSON
document (TokenPilot reduces it and keeps the original; a file's own text, `cat data.json`,
would stay exact: tests/test_passes_small_json.py), then recalls the original through
`recall_artifact`, which the proxy answers itself: Claude Code never sees that tool.
A second `claude -p --resume` process then continues the conversation, and its request
extends what the provider cached of the first one's.

Claude Code comes from the npm registry into the e2e cache ($TOKENPILOT_E2E_CACHE,
default ~/.cache/tokenpilot-e2e); the test skips, saying why, only when it is not
cached and the registry cannot be reached.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from npm_cache import ensure_cli
from npm_cache import run as _run

from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.anthropic_render import breakpoints, pairing_errors
from tokenpilot_proxy.demo import FakeAnthropic, LoopThread, Reply, ToolCall, anthropic_blocks
from tokenpilot_proxy.server import RunningProxy

CLAUDE_CODE_VERSION = "2.1.332"

pytestmark = pytest.mark.slow


def _ensure_claude() -> Path:
    """The cached `claude` executable, installed from npm when missing (skip when it cannot be)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(
            f"the e2e runs Claude Code's linux-x64 build; this is {platform.system()} {platform.machine()}"
        )

    def native_binary(prefix: Path, env: dict[str, str]) -> None:
        """npm may not run the postinstall that puts the native binary in place."""
        pkg = prefix / "node_modules" / "@anthropic-ai" / "claude-code"
        res = _run([shutil.which("node", path=env["PATH"]) or "node", "install.cjs"], env=env, cwd=pkg)
        assert res.returncode == 0, res.stderr

    return ensure_cli(
        "claude-code", "@anthropic-ai/claude-code", CLAUDE_CODE_VERSION, "claude", after=native_binary
    )


def _last_result(body: dict[str, Any]) -> dict[str, Any] | None:
    content = body["messages"][-1]["content"]
    return (
        next((b for b in content if b.get("type") == "tool_result"), None)
        if isinstance(content, list)
        else None
    )


def _scripted(recall_tool: str) -> Any:
    """print the JSON; recall what TokenPilot cut with `recall_tool`; say how many lines came back."""

    def model(body: dict[str, Any]) -> Reply:
        result = _last_result(body)
        if result is None:
            if len(body["messages"]) == 1 and any(t.get("name") == "Bash" for t in body.get("tools") or []):
                command = "python3 -c \"import sys; sys.stdout.write(open('data.json').read())\""
                call = ToolCall("Bash", {"command": command, "description": "Show the data"}, id="toolu_cat")
                return Reply("", (call,))
            return Reply("ok")  # a later question, or Claude Code's side requests (titles, probes)
        text = _text(result)
        if result["tool_use_id"] == "toolu_cat":
            # the handle may sit inside a JSON string (the JSON-arrays pass), its quotes escaped
            handle = re.search(r'artifact_id=\\?"(art_[0-9a-f]+)', text)
            if handle is None:
                return Reply(f"no recall handle in a {len(text)}-char output")
            call = ToolCall(recall_tool, {"artifact_id": handle.group(1)}, id="toolu_recall")
            return Reply("Reading the original.", (call,))
        return Reply(f"recalled {len(text.split(chr(10), 1)[1].splitlines())} lines")

    return model


def _text(result: dict[str, Any]) -> str:
    """A tool_result's text: a string, or (an MCP tool's answer) a list of text blocks."""
    content = result["content"]
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


def _workspace(tmp_path: Path) -> tuple[Path, Path, str]:
    """(home, work, data): a pretty-printed JSON document in the work folder."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    data = json.dumps(
        {"records": [{"id": i, "value": i * 7, "status": "ok", "tags": ["a", "b"]} for i in range(1, 160)]},
        indent=4,
    )
    (work / "data.json").write_text(data)
    return home, work, data


def _claude_env(home: Path, **more: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        **more,
    }


def _recording(rp: RunningProxy) -> list[list[dict[str, Any]]]:
    """Every history the proxy's pilot prepares, as the client sent it."""
    histories: list[list[dict[str, Any]]] = []
    prepare = rp.proxy.pilot.prepare

    def recording(history: Any, *a: Any, **kw: Any) -> Any:
        histories.append(history)
        return prepare(history, *a, **kw)

    rp.proxy.pilot.prepare = recording  # type: ignore[method-assign]
    return histories


def test_claude_code_through_the_proxy(tmp_path):
    claude = _ensure_claude()
    home, work, data = _workspace(tmp_path)
    loop = LoopThread()
    fake = FakeAnthropic(responder=_scripted("recall_artifact"))
    loop.run(fake.start())
    settings = ProxySettings(
        upstream=fake.url, port=0, store_dir=tmp_path / "store", state_dir=None, flush_interval_s=0
    )
    rp = loop.run(RunningProxy(settings, shutdown_timeout_s=1).start())
    histories = _recording(rp)
    env = _claude_env(home, ANTHROPIC_BASE_URL=rp.url)
    cmd = [str(claude), "--output-format", "json", "--allowedTools", "Bash", "-p"]
    try:
        res = _run([*cmd, "show me the data"], env=env, cwd=work, timeout=180)
        out = json.loads(res.stdout) if res.returncode == 0 else {}
        # a second process resumes the conversation: its prefix is the first one's
        again = _run(
            [*cmd, "and now?", "--resume", out.get("session_id", "")], env=env, cwd=work, timeout=180
        )
    finally:
        loop.run(rp.stop())
        loop.run(fake.close())
        loop.close()
    assert res.returncode == 0, res.stderr[-2000:] + res.stdout[-2000:]
    assert again.returncode == 0, again.stderr[-2000:] + again.stdout[-2000:]
    sent = next(m["content"] for h in histories for m in h if m.get("role") == "tool")
    assert out["result"] == f"recalled {len(sent.splitlines())} lines", out["result"]
    assert sent.strip() == data.strip(), "Claude Code sent the whole output"

    main = [
        r for r in fake.messages_requests() if any(t.get("name") == "Bash" for t in r.body.get("tools") or [])
    ]
    assert len(main) == 4, [r.body["messages"][-1] for r in main]
    for r in fake.requests:
        assert breakpoints(r.body) <= 4 and pairing_errors(r.body["messages"]) == []
    blocks = [anthropic_blocks(r.body)[0] for r in main]
    for r, prev, cur in zip(main[1:3], blocks, blocks[1:3]):
        assert cur[: len(prev)] == prev, "each request extends the previous one"
        assert r.cached_tokens == sum(len(b) for b in prev) // 4, (
            "the whole previous prompt is read from cache"
        )
    reduced = _last_result(main[1].body)["content"]
    assert len(reduced) < len(sent) / 2 and "art_" in reduced
    recalled = _last_result(main[2].body)
    assert recalled["tool_use_id"] == "toolu_recall" and recalled["content"].split("\n", 1)[1] == sent
    # the resumed call: the recall exchange stayed in the proxy, so its prefix is the
    # second request's, read from cache up to the previous turn's breakpoint
    assert json.loads(again.stdout)["session_id"] == out["session_id"]
    assert blocks[3][: len(blocks[1])] == blocks[1]
    assert main[3].cached_tokens == sum(len(b) for b in blocks[1]) // 4
    stats = rp.proxy.stats[out["session_id"]]
    assert stats.calls == 3 and stats.prefix_breaks == 0 and stats.cached_tokens > 0


MCP_RECALL = "mcp__tokenpilot__recall_artifact"


def test_claude_code_with_tokenpilots_mcp_server(tmp_path):
    """`tokenpilot enable claude-code` registers the MCP server: Claude Code lists
    recall_artifact itself and runs it, the proxy adds no tool and runs no recall, and the
    tool list is byte for byte the same in every request of both processes."""
    claude = _ensure_claude()
    home, work, data = _workspace(tmp_path)
    loop = LoopThread()
    fake = FakeAnthropic(responder=_scripted(MCP_RECALL))
    loop.run(fake.start())
    cache = home / ".cache" / "tokenpilot"  # where `serve` and `mcp` look by default, under this HOME
    settings = ProxySettings(
        upstream=fake.url,
        port=0,
        store_dir=cache / "artifacts",
        state_dir=cache / "sessions",
        flush_interval_s=0,
    )
    rp = loop.run(RunningProxy(settings, shutdown_timeout_s=1).start())
    histories = _recording(rp)
    env = _claude_env(home)
    tp = [sys.executable, "-m", "tokenpilot_proxy"]
    port = rp.url.rsplit(":", 1)[1]
    cmd = [str(claude), "--output-format", "json", "--allowedTools", f"Bash,{MCP_RECALL}", "-p"]
    try:
        enabled = _run([*tp, "enable", "claude-code", "--port", port, "--start", "none"], env=env, timeout=60)
        assert enabled.returncode == 0, enabled.stderr
        assert "tokenpilot" in json.loads((home / ".claude.json").read_text())["mcpServers"]
        res = _run([*cmd, "show me the data"], env=env, cwd=work, timeout=180)
        out = json.loads(res.stdout) if res.returncode == 0 else {}
        again = _run(
            [*cmd, "and now?", "--resume", out.get("session_id", "")], env=env, cwd=work, timeout=180
        )
        disabled = _run([*tp, "disable", "claude-code"], env=env, timeout=60)
    finally:
        loop.run(rp.stop())
        loop.run(fake.close())
        loop.close()
    assert res.returncode == 0, res.stderr[-2000:] + res.stdout[-2000:]
    assert again.returncode == 0, again.stderr[-2000:] + again.stdout[-2000:]
    sent = next(m["content"] for h in histories for m in h if m.get("role") == "tool")
    assert out["result"] == f"recalled {len(sent.splitlines())} lines", out["result"]

    main = [
        r for r in fake.messages_requests() if any(t.get("name") == "Bash" for t in r.body.get("tools") or [])
    ]
    assert len(main) == 4, [r.body["messages"][-1] for r in main]
    names = [t["name"] for t in main[0].body["tools"]]
    assert MCP_RECALL in names and "recall_artifact" not in names, names
    tools = [json.dumps(r.body["tools"]) for r in main]
    assert all(t == tools[0] for t in tools), "the tool list is the same from the first call to the last"
    # the recall ran in Claude Code (through the MCP server): it is in the client's own history
    recalled = _last_result(main[2].body)
    assert recalled["tool_use_id"] == "toolu_recall" and _text(recalled).split("\n", 1)[1] == sent
    assert any(
        m.get("role") == "tool" and m.get("tool_call_id") == "toolu_recall" for h in histories for m in h
    ), "the recall's answer came from Claude Code, not from the proxy"
    assert len(fake.messages_requests()) == len(histories), "the proxy sent no request of its own"
    blocks = [anthropic_blocks(r.body)[0] for r in main]
    for prev, cur in zip(blocks[:2], blocks[1:3]):
        assert cur[: len(prev)] == prev, "each request extends the previous one"
    # Answered, the recalled copy leaves at the tail (`TailRules.recalled`): the last request
    # is the one before up to the recall's result, now a marker that names its recall.
    at = next(i for i, b in enumerate(blocks[2]) if "toolu_recall" in b and "tool_result" in b)
    assert blocks[3][:at] == blocks[2][:at] and blocks[3][at] != blocks[2][at]
    assert "recalled and read; cut at the tail" in blocks[3][at]
    stats = rp.proxy.stats[out["session_id"]]
    assert stats.recalls == 1 and stats.prefix_breaks == 1
    assert disabled.returncode == 0, disabled.stderr
    assert "tokenpilot" not in json.loads((home / ".claude.json").read_text()).get("mcpServers", {})
