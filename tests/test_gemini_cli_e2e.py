"""End to end with the real Gemini CLI, headless (`gemini -p`), offline, against a scripted model.

`tokenpilot enable gemini-cli` writes `GOOGLE_GEMINI_BASE_URL` to `~/.gemini/.env` (and the
API-key sign-in to its settings); Gemini CLI then talks to `tokenpilot serve`, whose
upstream is `FakeGemini`, which refuses a call turn answered by another number of
responses, as Gemini does. The model has Gemini CLI run a build that prints a long log
(TokenPilot folds it and keeps the original), then recalls the original: through
`recall_artifact`, which the proxy answers itself (`--no-mcp`), or through TokenPilot's MCP
server, which Gemini CLI lists as `mcp_tokenpilot_recall_artifact` and runs itself.
`disable` then puts the user's files back and keeps what they changed since.

Gemini CLI comes from the npm registry into the e2e cache ($TOKENPILOT_E2E_CACHE, default
~/.cache/tokenpilot-e2e); the test skips, saying why, only when it is not cached and the
registry cannot be reached.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from npm_cache import ensure_cli, node_path
from npm_cache import run as _run
from test_claude_code_e2e import _recording  # every history the proxy prepares, as sent

from tokenpilot.measure import traces
from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.demo import FakeGemini, LoopThread, Reply, ToolCall
from tokenpilot_proxy.demo.gemini_upstream import call_count_errors
from tokenpilot_proxy.server import RunningProxy

GEMINI_CLI_VERSION = "0.61.0"
MODEL = "gemini-2.5-flash"
MCP_RECALL = "mcp_tokenpilot_recall_artifact"
BUILD = (
    "for i in range(900):\n    print(f'line {i:05d}: compiling module_{i % 37}.c with flags -O2 -Wall ok')\n"
)
RANGE = (100, 160)  # the lines an MCP recall asks for
USER_ENV = "# my Gemini settings\nGEMINI_MODEL=gemini-2.5-pro\n"

pytestmark = pytest.mark.slow


def _ensure_gemini() -> Path:
    """The cached `gemini` executable, installed from npm when missing (skip when it cannot be)."""
    return ensure_cli("gemini-cli", "@google/gemini-cli", GEMINI_CLI_VERSION, "gemini")


def _scripted(recall_tool: str) -> Any:
    """Run the build; recall what TokenPilot cut with `recall_tool`; say how much came back.
    Gemini CLI's side requests (its model router asks for JSON) get what they ask for."""

    def model(body: dict[str, Any]) -> Reply:
        if (body.get("generationConfig") or {}).get("responseMimeType") == "application/json":
            return Reply(json.dumps({"reasoning": "a simple task", "complexity_score": 10}))
        names = [d["name"] for t in body.get("tools") or [] for d in t.get("functionDeclarations", [])]
        answers = [p["functionResponse"] for p in body["contents"][-1]["parts"] if "functionResponse" in p]
        if not answers:
            if "run_shell_command" in names:
                return Reply("", (ToolCall("run_shell_command", {"command": "python3 build.py"}),))
            return Reply("ok")
        text = answers[-1]["response"].get("output") or json.dumps(answers[-1]["response"])
        if answers[-1]["name"] == "run_shell_command":
            handle = re.search(r'artifact_id="(art_[0-9a-f]+)"', text)
            if handle is None:
                return Reply(f"no recall handle in a {len(text)}-char output")
            args = {"artifact_id": handle.group(1)}
            if recall_tool == MCP_RECALL:  # Gemini CLI cuts an MCP answer of 40k chars itself: a range
                args |= {"start_line": RANGE[0], "end_line": RANGE[1]}
            return Reply("Reading the original.", (ToolCall(recall_tool, args),))
        return Reply(f"recalled {len(text.split(chr(10), 1)[1])} chars")

    return model


def _home(tmp_path: Path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    (home / ".gemini" / ".env").write_text(USER_ENV)  # the user's own: restored byte for byte
    (work / "build.py").write_text(BUILD)
    return home, work


def _env(home: Path) -> dict[str, str]:
    return {"PATH": node_path(), "HOME": str(home), "GEMINI_API_KEY": "gm-test",
            "GEMINI_CLI_TRUST_WORKSPACE": "true"}  # fmt: skip  # headless: this folder is trusted


def _main(fake: FakeGemini) -> list[Any]:
    """The agent's own requests (not Gemini CLI's side requests to its router)."""
    return [r for r in fake.requests if r.path.endswith(f"/{MODEL}:streamGenerateContent")]


def _tool_results(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p["functionResponse"] for c in contents for p in c["parts"] if "functionResponse" in p]


@pytest.mark.parametrize("mcp", [False, True], ids=["proxy-recall", "mcp-recall"])
def test_gemini_cli_through_the_proxy_enabled_and_disabled(tmp_path, mcp):
    gemini = _ensure_gemini()
    home, work = _home(tmp_path)
    loop = LoopThread()
    fake = FakeGemini(responder=_scripted(MCP_RECALL if mcp else "recall_artifact"))
    loop.run(fake.start())
    cache = home / ".cache" / "tokenpilot"  # where `serve` and `mcp` look by default, under this HOME
    settings = ProxySettings(upstream=fake.url, port=0, store_dir=cache / "artifacts",
                             state_dir=cache / "sessions", flush_interval_s=0)  # fmt: skip
    rp = loop.run(RunningProxy(settings, shutdown_timeout_s=1).start())
    histories = _recording(rp)
    env = _env(home)
    tp = [sys.executable, "-m", "tokenpilot_proxy"]
    port = rp.url.rsplit(":", 1)[1]
    flags = ["--start", "none", "--port", port] + ([] if mcp else ["--no-mcp"])
    try:
        enabled = _run([*tp, "enable", "gemini-cli", *flags], env=env, timeout=60)
        assert enabled.returncode == 0, enabled.stderr
        res = _run([str(gemini), "-p", "build it", "-o", "json", "--yolo", "-m", MODEL],
                   env=env, cwd=work, timeout=240)  # fmt: skip
    finally:
        loop.run(rp.stop())
        loop.run(fake.close())
        loop.close()
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    out = json.loads(res.stdout)
    sent = next(m["content"] for h in histories for m in h if m.get("role") == "tool")
    if not mcp:  # the MCP server's answer is Gemini CLI's to wrap: checked below, by content
        assert out["response"].endswith(f"recalled {len(sent)} chars"), out["response"]
    assert "line 00899: compiling" in sent, "Gemini CLI sent the whole build log"

    main = _main(fake)
    assert len(main) == 3, [r.body["contents"][-1] for r in main]
    for r in fake.requests:
        assert call_count_errors(r.body["contents"]) == []
    for r, prev, cur in zip(main[1:], main, main[1:]):
        assert cur.prompt.startswith(prev.prompt), "each request extends the previous one"
        assert r.cached_tokens == len(prev.prompt) // 4, "the whole previous prompt is read from cache"
    reduced = _tool_results(main[1].body["contents"])[-1]["response"]["output"]
    assert len(reduced) < len(sent) / 2 and "art_" in reduced, "the build log was folded"
    recalled = _tool_results(main[2].body["contents"])[-1]
    text = (
        recalled["response"]["output"]
        if "output" in recalled["response"]
        else json.dumps(recalled["response"])
    )
    names = [d["name"] for t in main[0].body["tools"] for d in t["functionDeclarations"]]
    if mcp:
        assert MCP_RECALL in names and "recall_artifact" not in names, names
        assert recalled["name"] == MCP_RECALL
        # Gemini CLI wraps an MCP tool's answer as untrusted, escaping that tag inside it
        text = text.replace("&lt;/untrusted_context&gt;", "</untrusted_context>")
        text = text.replace("&lt;untrusted_context&gt;", "<untrusted_context>")
        lines = "\n".join(sent.split("\n")[RANGE[0] - 1 : RANGE[1]])
        assert lines in text, "the MCP server gave back the original lines, byte for byte"
        assert len(fake.requests) == len(histories), "the proxy sent no request of its own"
    else:
        assert "recall_artifact" in names
        assert recalled["name"] == "recall_artifact" and text.split("\n", 1)[1] == sent, "byte for byte"
    (sid,) = {s for s, st in rp.proxy.stats.items() if st.calls == 2 + mcp}
    stats = rp.proxy.stats[sid]
    assert stats.prefix_breaks == 0 and stats.cached_tokens > 0
    # the chat Gemini CLI saved (0.61: JSON lines) is what `tokenpilot bench ~/.gemini/tmp` reads
    (saved,) = traces.load(home / ".gemini" / "tmp")
    assert saved.fmt == "gemini_cli" and sent in [m["content"] for m in saved.messages if m["role"] == "tool"]
    # the usage each answer carried back: with the proxy's recall, its second answer is the last turn's
    answers = main if mcp else [main[0], main[2]]
    assert [c.usage.cached_tokens for c in saved.usage_calls] == [r.cached_tokens for r in answers]

    # disable: the user's .env back byte for byte; a setting they added since is kept
    settings_file = home / ".gemini" / "settings.json"
    data = json.loads(settings_file.read_text())
    assert data["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert ("tokenpilot" in data.get("mcpServers", {})) == mcp
    data["ui"] = {"theme": "GitHub"}
    settings_file.write_text(json.dumps(data, indent=2))
    disabled = _run([*tp, "disable", "gemini-cli"], env=env, timeout=60)
    assert disabled.returncode == 0, disabled.stderr
    assert (home / ".gemini" / ".env").read_text() == USER_ENV
    assert json.loads(settings_file.read_text()) == {"ui": {"theme": "GitHub"}}


def test_gemini_cli_starts_the_proxy_from_its_session_start_hook(tmp_path):
    """Without systemd, `enable` adds a SessionStart hook that starts the proxy; Gemini CLI
    runs it before its first request."""
    gemini = _ensure_gemini()
    home, work = _home(tmp_path)
    loop = LoopThread()
    fake = FakeGemini(responder=lambda body: Reply("hello from the fake"))
    upstream = loop.run(fake.start())
    env = _env(home)
    tp = [sys.executable, "-m", "tokenpilot_proxy"]
    port = _free_port()
    pid = home / ".local" / "state" / "tokenpilot" / "serve-gemini-cli.pid"
    try:
        enabled = _run([*tp, "enable", "gemini-cli", "--start", "launcher", "--port", str(port),
                        "--upstream", upstream, "--no-mcp"], env=env, timeout=60)  # fmt: skip
        assert enabled.returncode == 0, enabled.stderr
        res = _run(
            [str(gemini), "-p", "say hello", "-o", "json", "-m", MODEL], env=env, cwd=work, timeout=240
        )
        assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
        assert json.loads(res.stdout)["response"] == "hello from the fake"
        assert pid.exists(), "the SessionStart hook did not run the launcher"
        assert _main(fake), "Gemini CLI did not reach the upstream through the proxy"
    finally:
        _stop(pid)
        loop.run(fake.close())
        loop.close()
    assert _run([*tp, "disable", "gemini-cli"], env=env, timeout=60).returncode == 0
    assert (home / ".gemini" / ".env").read_text() == USER_ENV
    assert not (home / ".gemini" / "settings.json").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(pid_file: Path) -> None:
    import signal

    try:
        os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
    except (OSError, ValueError):
        pass
