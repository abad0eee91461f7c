"""Codex through the proxy: where its tools are, its headers, its WebSocket try, its outputs.

Direct HTTP tests, one per point of issue #27 (Codex 0.171's request shapes, taken from
the real CLI), against the fake Responses upstream; then the real Codex CLI, offline,
when it is cached or npm can install it (skipped, saying why, otherwise).
"""

from __future__ import annotations

import json
import logging
import platform
import re
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from npm_cache import ensure_cli, node_path
from npm_cache import run as _run

from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.demo import FakeUpstream, LoopThread, Reply, ToolCall
from tokenpilot_proxy.responses import to_core, upstream_body
from tokenpilot_proxy.server import RunningProxy

MODEL = "gpt-fake"
RULES = "\n".join(f"- rule {i}: prefer small diffs and run the tests in tests/{i}" for i in range(150))
EXEC = {
    "type": "custom",
    "name": "exec",
    "description": "Run JavaScript code. " * 30,
    "format": {"type": "text"},
}
TOOLS_ITEM = {
    "type": "additional_tools",
    "id": "at_1",
    "role": "developer",
    "tools": [{"type": "namespace", "name": "functions", "description": "", "tools": [EXEC]}],
}
BIG = "".join(f"line {i:05d}: " + "output of a long build " * 4 + "\n" for i in range(1500))  # ~150 KB
CODEX_HEADERS = {
    "session-id": "0190-session",
    "thread-id": "0190-thread",
    "originator": "codex_exec",
    "x-codex-turn-metadata": '{"turn_id":"t1"}',
    "x-codex-window-id": "0190-session:0",
    "x-openai-internal-codex-responses-lite": "true",
}


def developer(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def body(*items: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    """Codex 0.171's shape: no instructions, no top-level tools; tools in the first item."""
    return {
        "model": MODEL,
        "input": [TOOLS_ITEM, developer(f"You are Codex.\n{RULES}"), *items],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "store": False,
        "stream": stream,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0190-session",
    }


CALL = {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": '{"cmd":"make"}'}
OUTPUT = {
    "type": "function_call_output",
    "call_id": "call_1",
    "output": [{"type": "input_text", "text": BIG}],
}


@pytest.fixture
async def fake():
    async with FakeUpstream() as f:
        yield f


@pytest.fixture
async def proxy(tmp_path, fake):
    settings = ProxySettings(
        upstream=fake.url, port=0, store_dir=tmp_path / "store", state_dir=None, flush_interval_s=0
    )
    rp = await RunningProxy(settings, shutdown_timeout_s=1).start()
    yield rp
    await rp.stop()


async def post(rp: RunningProxy, payload: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    async with aiohttp.ClientSession() as s:
        async with s.post(
            rp.url + "/v1/responses",
            json=payload,
            headers={"Authorization": "Bearer sk-test", **(headers or {})},
        ) as r:
            assert r.status == 200, await r.text()
            return await r.json() if not payload.get("stream") else await r.text()


def item_tool_names(recorded_body: dict[str, Any]) -> list[str]:
    return [t["name"] for t in recorded_body["input"][0]["tools"]]


def test_codex_item_tools_reach_the_core_and_recall_joins_the_item():
    """Translation: the core sees the item's tools (a namespace's by qualified name); the
    upstream body keeps them in the item, with recall_artifact appended there only."""
    b = body(user("hi"))
    _, tools = to_core(b)
    assert [t.get("name") or t["function"]["name"] for t in tools or []] == ["functions", "functions.exec"]
    assert "tools" not in upstream_body(b, None, "s")


async def test_recall_is_in_codex_item_from_the_first_call_and_turn_2_keeps_its_cache(proxy, fake, caplog):
    caplog.set_level(logging.INFO)
    fake.responder = lambda b: Reply("done")
    await post(proxy, body(user("build it")))
    await post(proxy, body(user("build it"), CALL, OUTPUT))
    first, second = (r.body for r in fake.responses_requests())
    for sent in (first, second):
        assert "tools" not in sent  # never a top-level list the client did not send
        assert item_tool_names(sent) == ["functions", "recall_artifact"]
    assert json.dumps(first["input"][:3]) == json.dumps(second["input"][:3])  # same bytes up front
    assert fake.responses_requests()[1].cached_tokens > 0
    assert "cached prefix broken" not in caplog.text
    cut = second["input"][-1]["output"]
    text = "".join(p["text"] for p in cut)
    assert 'artifact_id="art_' in text and len(text) < len(BIG) / 2


async def test_recall_by_line_range_in_a_multi_part_output(proxy, fake):
    """A function_call_output with a list of parts: lines 100-101 of its text come back."""
    asked: list[str] = []

    def model(b: dict[str, Any]) -> Reply:
        last = b["input"][-1]
        text = json.dumps(last.get("output")) if last.get("type") == "function_call_output" else ""
        if last.get("call_id") == "call_1" and (m := re.search(r'artifact_id=\\"(art_[0-9a-f]+)', text)):
            args = {"artifact_id": m.group(1), "start_line": 100, "end_line": 101}
            return Reply("", (ToolCall("recall_artifact", args, id="call_recall"),))
        if last.get("call_id") == "call_recall":
            asked.append(last["output"] if isinstance(last["output"], str) else json.dumps(last["output"]))
        return Reply("done")

    fake.responder = model
    answer = await post(proxy, body(user("build it"), CALL, OUTPUT))
    assert answer["output"][-1]["content"][0]["text"] == "done"
    assert len(asked) == 1, asked
    assert "past the end" not in asked[0]
    assert "line 00099: " in asked[0] and "line 00100: " in asked[0] and "line 00101: " not in asked[0]


async def test_codex_headers_reach_the_upstream_and_hop_by_hop_and_credentials_do_not(proxy, fake):
    fake.responder = lambda b: Reply("ok")
    extra = {"Proxy-Authorization": "Basic eDp5", "Cookie": "a=b", "X-Api-Key": "sk-other", "TE": "trailers"}
    await post(proxy, body(user("hi")), {**CODEX_HEADERS, **extra})
    got = {k.lower(): v for k, v in fake.responses_requests()[0].headers.items()}
    for name, value in CODEX_HEADERS.items():
        assert got.get(name) == value, name
    for name in extra:
        assert name.lower() not in got, name
    assert got["authorization"] == "Bearer sk-test"  # the client's key, as before


async def test_a_websocket_upgrade_is_refused_with_426(proxy):
    """Codex falls back to HTTP at once on 426 (405 made it retry for ~6.5 s)."""
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await s.ws_connect(proxy.url.replace("http://", "ws://") + "/v1/responses")
        assert err.value.status == 426
        upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"}
        async with s.get(proxy.url + "/v1/responses", headers=upgrade) as r:
            assert r.status == 426
            assert (await r.json())["error"]["code"] == "websocket_not_supported"
        async with s.get(proxy.url + "/v1/responses") as r:
            assert r.status == 405  # a plain GET is the wrong method, as before


async def test_a_client_gone_after_response_completed_is_not_an_error(proxy, fake, caplog, monkeypatch):
    """write_eof on a closed transport (Codex closes right after response.completed)."""
    caplog.set_level(logging.INFO)
    fake.responder = lambda b: Reply("ok")
    port = int(proxy.url.rsplit(":", 1)[1])
    real = web.StreamResponse.write_eof
    closed: list[int] = []

    async def write_eof(self: web.StreamResponse, data: bytes = b"") -> None:
        req = self._req  # noqa: SLF001 - only the proxy's own responses
        if req is not None and req.url.port == port and req.path == "/v1/responses":
            closed.append(1)
            raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")
        await real(self, data)

    monkeypatch.setattr(web.StreamResponse, "write_eof", write_eof)
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/v1/responses", json=body(user("hi"), stream=True)) as r:
            seen = b""
            async for chunk in r.content.iter_any():
                seen += chunk
                if b"response.completed" in seen:
                    break
    assert closed and b"response.completed" in seen
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR], caplog.text


# ---------------------------------------------------------------------------
# The real Codex CLI, offline
# ---------------------------------------------------------------------------
CODEX_VERSION = "0.171.0"
USER_TOML = '# my Codex settings\nmodel_reasoning_effort = "low"  # keep me\n\n[tui]\nanimations = false\n'


def ensure_codex() -> Path:
    """The cached `codex` executable, installed from npm when missing (skip when it cannot be)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"the e2e runs Codex's linux-x64 build; this is {platform.system()} {platform.machine()}")
    return ensure_cli("codex", "@openai/codex", CODEX_VERSION, "codex")


def _codex_env(home: Path) -> dict[str, str]:
    return {
        "PATH": node_path(),
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "OPENAI_API_KEY": "sk-test",
    }


def _unknown_tool_then_done(b: dict[str, Any]) -> Reply:
    """Call a tool Codex does not have (it answers with an error output and asks again),
    then finish: two requests in one Codex turn, the second extending the first."""
    if b["input"][-1].get("type") == "function_call_output":
        return Reply("done")
    return Reply("", (ToolCall("shell_probe", {"cmd": "ls"}, id="call_probe"),))


@pytest.mark.slow
def test_real_codex_enabled_by_tokenpilot_keeps_its_cache_and_headers(tmp_path, caplog):
    codex = ensure_codex()
    caplog.set_level(logging.INFO)
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    config = home / ".codex" / "config.toml"
    config.write_text(USER_TOML)
    loop = LoopThread()
    fake = FakeUpstream(responder=_unknown_tool_then_done)
    loop.run(fake.start())
    settings = ProxySettings(upstream=fake.url, port=0, store_dir=tmp_path / "store", state_dir=None)
    rp = loop.run(RunningProxy(settings, shutdown_timeout_s=1).start())
    port = rp.url.rsplit(":", 1)[1]
    env = _codex_env(home)
    try:
        tp = [sys.executable, "-m", "tokenpilot_proxy"]
        # --no-mcp: the proxy's own recall_artifact (with the MCP server: the test further down)
        enabled = _run(
            [*tp, "enable", "codex", "--port", port, "--start", "none", "--no-mcp"], env=env, timeout=60
        )
        assert enabled.returncode == 0, enabled.stderr
        assert "mcp_servers" not in config.read_text()
        assert f'base_url = "http://127.0.0.1:{port}/v1"' in config.read_text()
        res = _run(
            [str(codex), "exec", "--skip-git-repo-check", "look around"], env=env, cwd=work, timeout=180
        )
        assert res.returncode == 0, res.stderr[-3000:]
        assert "done" in res.stdout
    finally:
        loop.run(rp.stop())
        loop.run(fake.close())
        loop.close()
    sent = fake.responses_requests()
    assert len(sent) >= 2, [r.body for r in sent]
    first, second = sent[0], sent[1]
    for r in (first, second):
        assert "tools" not in r.body
        assert r.body["input"][0]["type"] == "additional_tools"
        assert r.body["input"][0]["tools"][-1]["name"] == "recall_artifact"
        assert r.headers.get("originator") == "codex_exec" and r.headers.get("session-id")
        assert r.headers.get("x-codex-turn-metadata") and r.headers.get(
            "x-openai-internal-codex-responses-lite"
        )
    assert second.body["input"][: len(first.body["input"])] == first.body["input"]
    assert second.cached_tokens > 0
    assert "cached prefix broken" not in caplog.text

    disabled = _run([*tp, "disable", "codex"], env=env, timeout=60)
    assert disabled.returncode == 0, disabled.stderr
    assert config.read_bytes() == USER_TOML.encode()


@pytest.mark.slow
def test_real_codex_falls_back_from_websocket_on_the_first_426(tmp_path, monkeypatch):
    """`openai_base_url` at the top level: Codex tries ws:// first; one 426 and it uses HTTP."""
    from tokenpilot_proxy import codex_wire

    codex = ensure_codex()
    refused: list[str] = []
    real = codex_wire.refuse_websocket

    async def counting(request: web.Request) -> web.Response:
        refused.append(request.headers.get("Upgrade", ""))
        return await real(request)

    monkeypatch.setattr(codex_wire, "refuse_websocket", counting)
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    loop = LoopThread()
    fake = FakeUpstream(responder=lambda b: Reply("hello"))
    loop.run(fake.start())
    settings = ProxySettings(upstream=fake.url, port=0, store_dir=tmp_path / "store", state_dir=None)
    rp = loop.run(RunningProxy(settings, shutdown_timeout_s=1).start())
    (home / ".codex" / "config.toml").write_text(f'openai_base_url = "{rp.url}/v1"\n')
    try:
        res = _run(
            [str(codex), "exec", "--skip-git-repo-check", "hi"], env=_codex_env(home), cwd=work, timeout=180
        )
    finally:
        loop.run(rp.stop())
        loop.run(fake.close())
        loop.close()
    assert res.returncode == 0, res.stderr[-3000:]
    assert "hello" in res.stdout
    assert refused and all(u.lower() == "websocket" for u in refused)
    assert len(refused) == 1, refused  # a 405 was retried seven times
    assert fake.responses_requests()


PRINT_DATA = "python3 -c \"import sys; sys.stdout.write(open('data.json').read())\""


def _print_then_recall_over_mcp(b: dict[str, Any]) -> Reply:
    """Codex's code mode: `exec` JavaScript runs the shell, then our MCP server's tool
    (deferred by Codex, callable on `tools`), then the model is done."""
    last = b["input"][-1]
    if last.get("type") != "custom_tool_call_output":
        js = f"const r = await tools.exec_command({{cmd: {json.dumps(PRINT_DATA)}}}); text(r.output);"
        return Reply("", (ToolCall("exec", js, id="call_cat", custom=True),))
    if last["call_id"] == "call_cat":
        handle = re.search(r"art_[0-9a-f]+", json.dumps(last["output"]))
        if handle is None:
            return Reply("no recall handle")
        js = f'text(await tools.mcp__tokenpilot__recall_artifact({{artifact_id: "{handle.group(0)}"}}));'
        return Reply("", (ToolCall("exec", js, id="call_recall", custom=True),))
    return Reply("done")


@pytest.mark.slow
def test_real_codex_with_tokenpilots_mcp_server(tmp_path):
    """`enable codex` registers the MCP server; Codex defers its tools behind a namespace
    and the model calls recall_artifact from `exec` code: the proxy adds no tool of its own,
    does not reduce the recalled original again, and the tool list never changes."""
    codex = ensure_codex()
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    data = json.dumps(
        {"records": [{"id": i, "value": i * 7, "status": "ok", "tags": ["a", "b"]} for i in range(1, 160)]},
        indent=4,
    )
    (work / "data.json").write_text(data)
    config = home / ".codex" / "config.toml"
    config.write_text(USER_TOML)
    loop = LoopThread()
    fake = FakeUpstream(responder=_print_then_recall_over_mcp)
    loop.run(fake.start())
    cache = home / ".cache" / "tokenpilot"  # where `serve` and `mcp` look by default, under this HOME
    settings = ProxySettings(
        upstream=fake.url, port=0, store_dir=cache / "artifacts", state_dir=cache / "sessions"
    )
    rp = loop.run(RunningProxy(settings, shutdown_timeout_s=1).start())
    port = rp.url.rsplit(":", 1)[1]
    env = _codex_env(home)
    tp = [sys.executable, "-m", "tokenpilot_proxy"]
    try:
        enabled = _run([*tp, "enable", "codex", "--port", port, "--start", "none"], env=env, timeout=60)
        assert enabled.returncode == 0, enabled.stderr
        assert "[mcp_servers.tokenpilot]" in config.read_text()
        res = _run(
            [str(codex), "exec", "--skip-git-repo-check", "show the data"], env=env, cwd=work, timeout=180
        )
        disabled = _run([*tp, "disable", "codex"], env=env, timeout=60)
    finally:
        loop.run(rp.stop())
        loop.run(fake.close())
        loop.close()
    assert res.returncode == 0, res.stderr[-3000:]
    assert "done" in res.stdout
    sent = fake.responses_requests()
    assert len(sent) == 3, [r.body["input"][-1] for r in sent]
    tools = [json.dumps(r.body["input"][0]) for r in sent]
    assert sent[0].body["input"][0]["type"] == "additional_tools"
    assert all(t == tools[0] for t in tools), "the tool list is the same from the first call to the last"
    assert '"name": "recall_artifact"' not in tools[0], "the proxy added no recall tool of its own"
    assert "mcp__tokenpilot" in json.dumps(sent[0].body["input"]), "Codex lists our MCP server's namespace"
    cut = json.dumps(sent[1].body["input"][-1]["output"])
    assert "art_" in cut and len(cut) < len(data) / 2, "the printed JSON reached the model reduced"
    # the recall ran in Codex, through the MCP server, and reached the model whole
    out = sent[2].body["input"][-1]
    assert out["call_id"] == "call_recall"
    answer = json.loads(out["output"][-1]["text"])
    assert answer["isError"] is False
    note, original = answer["content"][0]["text"].split("\n", 1)
    assert note.startswith("[tokenpilot: all ") and data in json.loads(original)[-1]["text"]
    stats = next(iter(rp.proxy.stats.values()))
    assert stats.recalls == 1 and stats.prefix_breaks == 0
    assert disabled.returncode == 0, disabled.stderr
    assert config.read_bytes() == USER_TOML.encode()
