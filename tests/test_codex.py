"""Codex through the proxy: where its tools are, its headers, its WebSocket try, its outputs.

Direct HTTP tests, one per point of issue #27 (Codex 0.171's request shapes, taken from
the real CLI), against the fake Responses upstream; then the real Codex CLI, offline,
when it is cached or npm can install it (skipped, saying why, otherwise).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tokenpilot_openclaw.proxy import ProxySettings
from tokenpilot_openclaw.responses_api import to_core, upstream_body
from tokenpilot_openclaw.server import RunningProxy
from tokenpilot_openclaw.testing import FakeUpstream, Reply, ToolCall

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
        async with s.get(proxy.url + "/v1/responses") as r:
            assert r.status == 426
            assert (await r.json())["error"]["code"] == "websocket_not_supported"


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
