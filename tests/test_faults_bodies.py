"""Hostile bodies on `/v1/messages`, `/v1/messages/count_tokens` and `/v1/responses`,
deep JSON from the upstream, the hard limit behind a failed ingestion, and malformed
HTTP: each case gets a clean JSON answer over real HTTP, then a good request is answered.

`Scripted` stands in for the provider on 127.0.0.1: it answers every API with a normal
reply, or with the raw body or events a test queues for the next request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpilot import ArtifactStore, TokenPilot
from tokenpilot.config import Config
from tokenpilot_proxy import ProxySettings, anthropic_wire
from tokenpilot_proxy.demo import LoopThread
from tokenpilot_proxy.server import RunningProxy
from tokenpilot_proxy.sse import SSESplitter, event_data
from tokenpilot_proxy.wire import MAX_UPSTREAM_JSON_DEPTH

DEEP = 100_000
HARD_LIMIT = Config().hard_limit_chars


def nested(depth: int, inner: str = "") -> str:
    return "[" * depth + inner + "]" * depth


# ---------------------------------------------------------------------------
# The scripted upstream
# ---------------------------------------------------------------------------
@dataclass
class Canned:
    """One queued answer: a raw body (with its content type), or SSE events as raw bytes."""

    body: bytes = b""
    content_type: str = "application/json"
    status: int = 200
    events: list[bytes] | None = None


def _ok_message() -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip


def _ok_response() -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": "completed", "model": "m",
            "output": [{"type": "message", "id": "m1", "role": "assistant",
                        "content": [{"type": "output_text", "text": "ok"}]}],
            "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip


def _ok_chat() -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}  # fmt: skip


def sse(obj: dict[str, Any] | str, event: str | None = None) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return (f"event: {event}\n" if event else "").encode() + b"data: " + data.encode() + b"\n\n"


def anthropic_events(message: dict[str, Any]) -> list[bytes]:
    start = {**message, "content": [], "stop_reason": None}
    out = [sse({"type": "message_start", "message": start}, "message_start")]
    for i, b in enumerate(message["content"]):
        out.append(
            sse({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
        )
        out.append(
            sse(
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "text_delta", "text": b["text"]},
                }
            )
        )
        out.append(sse({"type": "content_block_stop", "index": i}))
    out.append(
        sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}})
    )
    out.append(sse({"type": "message_stop"}))
    return out


@dataclass
class Scripted:
    """Every API on one fake upstream; `queue` holds the next answers (else a normal one)."""

    queue: deque[Canned] = field(default_factory=deque)
    received: list[tuple[str, bytes]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    def bodies(self, suffix: str) -> list[Any]:
        return [json.loads(raw) for path, raw in self.received if path.endswith(suffix)]

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.received.append((request.path, raw))
        canned = self.queue.popleft() if self.queue else None
        if canned is None:
            canned = self._normal(request.path, json.loads(raw).get("stream") is True)
        if canned.events is None:
            return web.Response(status=canned.status, body=canned.body, content_type=canned.content_type)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for e in canned.events:
            await resp.write(e)
        await resp.write_eof()
        return resp

    def _normal(self, path: str, stream: bool) -> Canned:
        if path.endswith("/count_tokens"):
            return Canned(json.dumps({"input_tokens": 3}).encode())
        if path.endswith("/messages"):
            msg = _ok_message()
            return Canned(events=anthropic_events(msg)) if stream else Canned(json.dumps(msg).encode())
        if path.endswith("/responses"):
            resp = _ok_response()
            if stream:
                done = {"type": "response.completed", "response": resp}
                return Canned(events=[sse({"type": "response.created", "response": {**resp, "output": []}}),
                                      sse(done)])  # fmt: skip
            return Canned(json.dumps(resp).encode())
        if stream:
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                     "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}  # fmt: skip
            return Canned(events=[sse(chunk), sse("[DONE]")])
        return Canned(json.dumps(_ok_chat()).encode())

    async def start(self) -> str:
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_post("/v1/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/v1"
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


# ---------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------
@pytest.fixture
async def upstream():
    up = Scripted()
    await up.start()
    yield up
    await up.close()


@pytest.fixture
async def proxy(upstream, tmp_path):
    rp = await RunningProxy(
        ProxySettings(upstream=upstream.url, port=0, store_dir=tmp_path / "store", state_dir=None,
                      flush_interval_s=0),
        shutdown_timeout_s=1,
    ).start()  # fmt: skip
    yield rp
    await rp.stop()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as s:
        yield s


async def post(http: aiohttp.ClientSession, url: str, path: str, body: Any) -> tuple[int, str, bytes]:
    """POST a body (bytes as is, else as JSON); (status, content type, raw body)."""
    data = body if isinstance(body, bytes) else json.dumps(body)
    async with http.post(url + path, data=data, headers={"Content-Type": "application/json"}) as r:
        return r.status, r.headers.get("Content-Type", ""), await r.read()


def error_of(status: int, ctype: str, raw: bytes, want: int) -> dict[str, Any]:
    assert status == want, raw[:500]
    assert ctype.startswith("application/json"), ctype
    err = json.loads(raw)["error"]
    assert isinstance(err["message"], str) and err["message"] and "type" in err and "code" in err
    return err


def messages_body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": messages, **extra}


GOOD = {
    "/v1/messages": messages_body([{"role": "user", "content": "still there?"}]),
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "still there?"}]},
    "/v1/responses": {"model": "m", "input": "still there?"},
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "still there?"}]},
}


async def assert_still_serving(http: aiohttp.ClientSession, url: str, path: str) -> None:
    """One good request to the same endpoint, right after the fault: answered as usual."""
    status, ctype, raw = await post(http, url, path, GOOD[path])
    assert status == 200 and ctype.startswith("application/json"), raw[:500]
    got = json.loads(raw)
    if path.endswith("count_tokens"):
        assert got["input_tokens"] == 3
    elif path == "/v1/messages":
        assert got["content"][0]["text"] == "ok"
    elif path == "/v1/responses":
        assert got["output"][0]["content"][0]["text"] == "ok"
    else:
        assert got["choices"][0]["message"]["content"] == "ok"


def stream_events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for e in SSESplitter().feed(raw):
        data = event_data(e)
        if data is not None and data != "[DONE]":
            out.append(json.loads(data))
    return out


TOOL_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]}


def with_result(content: Any) -> list[dict[str, Any]]:
    """A conversation whose last user turn answers a tool_use with `content`."""
    return [
        {"role": "user", "content": "run it"},
        TOOL_USE,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": content}]},
    ]


# (name, messages, extra body keys, the param and a phrase the error names)
ANTHROPIC_JUNK = [
    ("tool_result_object", with_result({"a": 1}), {}, "messages", "messages[2].content[0].content"),
    ("tool_result_number", with_result(5), {}, "messages", "messages[2].content[0].content"),
    ("tool_result_list_of_number", with_result([1]), {}, "messages", "messages[2].content[0].content[0]"),
    ("image_source_string",
     [{"role": "user", "content": [{"type": "image", "source": "bogus"}]}], {}, "messages",
     "messages[0].content[0].source"),
    ("system_text_number", [{"role": "user", "content": "hi"}],
     {"system": [{"type": "text", "text": 5}]}, "system", "system[0].text"),
    ("tool_use_input_string",
     [{"role": "user", "content": "x"}, {"role": "assistant", "content": [
         {"type": "tool_use", "id": "t1", "name": "Bash", "input": "ls"}]}], {}, "messages",
     "messages[1].content[0].input"),
    ("role_number", [{"role": 5, "content": "x"}], {}, "messages", "messages[0].role"),
    ("tool_result_holding_a_tool_result",
     with_result([{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]), {}, "messages",
     "cannot hold another tool_result"),
]  # fmt: skip


# ---------------------------------------------------------------------------
# 1. Hostile bodies on the new endpoints
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize(
    ("name", "messages", "extra", "param", "names"), ANTHROPIC_JUNK, ids=[c[0] for c in ANTHROPIC_JUNK]
)
async def test_junk_anthropic_bodies_get_a_400_naming_the_field(
    upstream, proxy, http, path, name, messages, extra, param, names
):  # fmt: skip
    body = {"model": "m", "messages": messages, **extra}
    err = error_of(*await post(http, proxy.url, path, body), 400)
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert names in err["message"], err["message"]
    assert not upstream.received  # refused before anything went upstream
    await assert_still_serving(http, proxy.url, path)


async def test_a_system_message_inside_the_conversation_is_forwarded(upstream, proxy, http):
    """Claude Code sends `role: system` messages mid-conversation; Anthropic takes them."""
    body = messages_body(
        [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "a note from the client"},
            {"role": "user", "content": "still there?"},
        ]
    )
    status, ctype, raw = await post(http, proxy.url, "/v1/messages", body)
    assert status == 200 and ctype.startswith("application/json"), raw[:500]
    assert upstream.received  # forwarded, not refused


@pytest.mark.parametrize(
    ("extra", "param", "names"),
    [
        ({"tools": [5]}, "tools", "tools[0]"),
        ({"tools": ["x"]}, "tools", "tools[0]"),
        ({"tools": [{"type": "function"}]}, "tools", "tools[0].name"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}]},
         "input", "input[0].arguments"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]}, "input", "input[0].output"),
        ({"input": [{"role": "user", "content": [5]}]}, "input", "input[0].content[0]"),
        ({"input": [{"type": 7}]}, "input", "input[0].type"),
    ],
)  # fmt: skip
async def test_junk_responses_bodies_get_a_400_naming_the_field(upstream, proxy, http, extra, param, names):
    body = {"model": "m", "input": "hi", **extra}
    err = error_of(*await post(http, proxy.url, "/v1/responses", body), 400)
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert names in err["message"], err["message"]
    assert not upstream.received
    await assert_still_serving(http, proxy.url, "/v1/responses")


@pytest.mark.parametrize(
    "path", ["/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/chat/completions"]
)
async def test_a_client_body_nested_100k_deep_is_a_400(upstream, proxy, http, path):
    body = b'{"model": "m", "messages": ' + nested(DEEP).encode() + b"}"
    err = error_of(*await post(http, proxy.url, path, body), 400)
    assert err["code"] == "json_too_deep"
    await assert_still_serving(http, proxy.url, path)


async def test_a_deeply_nested_session_string_in_metadata_is_no_session_and_no_crash(upstream, proxy, http):
    body = messages_body([{"role": "user", "content": "hi"}], metadata={"user_id": "{" + nested(DEEP)})
    status, _, raw = await post(http, proxy.url, "/v1/messages", body)
    assert status == 200 and json.loads(raw)["content"][0]["text"] == "ok"
    await assert_still_serving(http, proxy.url, "/v1/messages")


async def test_a_translation_bug_is_a_json_500_logged_once_with_its_traceback(
    upstream, proxy, http, monkeypatch, caplog
):
    def broken(body: Any) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(anthropic_wire, "to_core", broken)
    with caplog.at_level(logging.ERROR, logger="tokenpilot.openclaw"):
        err = error_of(*await post(http, proxy.url, "/v1/messages", GOOD["/v1/messages"]), 500)
    assert err["code"] == "internal_error" and "KeyError" in err["message"]
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(logged) == 1 and logged[0].exc_info is not None
    monkeypatch.undo()
    await assert_still_serving(http, proxy.url, "/v1/messages")


async def test_a_bug_mid_stream_ends_the_stream_with_an_error_event(
    upstream, proxy, http, monkeypatch, caplog
):
    from tokenpilot_proxy.anthropic import AnthropicRelay

    def broken(self: Any, event: bytes) -> list[bytes]:
        raise TypeError("a bug")

    monkeypatch.setattr(AnthropicRelay, "feed", broken)
    with caplog.at_level(logging.ERROR, logger="tokenpilot.openclaw"):
        status, ctype, raw = await post(
            http, proxy.url, "/v1/messages", {**GOOD["/v1/messages"], "stream": True}
        )
    assert status == 200 and ctype.startswith("text/event-stream")
    last = stream_events(raw)[-1]
    assert last["type"] == "error" and last["error"]["code"] == "internal_error"
    assert "TypeError" in last["error"]["message"]
    assert sum(1 for r in caplog.records if r.levelno >= logging.ERROR) == 1
    monkeypatch.undo()
    await assert_still_serving(http, proxy.url, "/v1/messages")


# -- fuzzing: random JSON, and bodies shaped like each API's with random values ----------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
PLAUSIBLE = st.sampled_from(
    ["x", "recall_artifact", "t1", "user", "assistant", {}, [], {"type": "ephemeral"},
     {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}, {"type": "url", "url": "http://x/y.png"},
     {"type": "object", "properties": {}}, '{"artifact_id": "art_0"}', True, [{"type": "text", "text": "x"}]]
)  # fmt: skip
VALUE = PLAUSIBLE | JSON


def mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` 15 times in 16, else a random JSON value (or a plausible one of another kind)."""
    return st.integers(0, 15).flatmap(lambda n: JSON | PLAUSIBLE if n == 5 else good)


# Values of the right kind for each key a block, item or tool may hold.
RIGHT_KIND = {
    "text": st.text(max_size=8), "id": st.sampled_from(["t1", "t2"]), "tool_use_id": st.sampled_from(["t1", "t2"]),
    "name": st.sampled_from(["Bash", "recall_artifact"]), "input": st.dictionaries(st.text(max_size=4), JSON, max_size=2),
    "source": PLAUSIBLE, "cache_control": st.just({"type": "ephemeral"}), "is_error": st.booleans(),
    "thinking": st.text(max_size=8), "signature": st.text(max_size=8), "citations": st.just([]),
    "title": st.text(max_size=4), "call_id": st.sampled_from(["c1", "c2"]), "arguments": st.sampled_from(['{"a": 1}', "[[[", ""]),
    "status": st.just("completed"), "summary": st.just([]), "encrypted_content": st.text(max_size=4),
    "image_url": st.just("data:image/png;base64,iVBORw0KGgo="), "annotations": st.just([]),
    "description": st.text(max_size=8), "input_schema": st.just({"type": "object"}), "parameters": st.just({"type": "object"}),
    "strict": st.booleans(),
}  # fmt: skip


def obj(
    kind: Any, keys: list[str], required: tuple[str, ...] = (), **special: st.SearchStrategy[Any]
) -> st.SearchStrategy[dict[str, Any]]:
    """An object of type `kind` (a value or a strategy) with its `required` keys and some of
    `keys`, each mostly of the right kind; `special` keys get their own strategy."""
    kinds = kind if isinstance(kind, st.SearchStrategy) else st.just(kind)
    values = {k: mostly(RIGHT_KIND.get(k, PLAUSIBLE)) for k in (*keys, *required)} | {
        k: mostly(v) for k, v in special.items()
    }
    fixed = {"type": mostly(kinds)} | {k: values[k] for k in required}
    return st.fixed_dictionaries(fixed, optional={k: v for k, v in values.items() if k not in required})


LEAF_BLOCK = st.one_of(
    obj("text", ["cache_control", "citations"], ("text",)),
    obj("image", ["cache_control"], ("source",)),
    obj("tool_use", ["input", "cache_control"], ("id", "name")),
    obj("thinking", ["signature"], ("thinking",)),
    obj("document", ["source", "title"]),
)
BLOCK = LEAF_BLOCK | obj(
    "tool_result", ["is_error", "cache_control"], ("tool_use_id",), content=st.lists(LEAF_BLOCK, max_size=3) | st.text(max_size=5)
)  # fmt: skip
MESSAGE = mostly(st.fixed_dictionaries(
    {"role": mostly(st.sampled_from(["user", "assistant"])), "content": mostly(st.lists(BLOCK, min_size=1, max_size=4))}
))  # fmt: skip
TOOL = mostly(st.fixed_dictionaries({"name": mostly(st.just("Bash"))}, optional={k: mostly(RIGHT_KIND[k]) for k in ("description", "input_schema", "cache_control")}))  # fmt: skip
ANTHROPIC_BODY = mostly(st.fixed_dictionaries(
    {"model": mostly(st.just("m")), "messages": mostly(st.lists(MESSAGE, min_size=1, max_size=4))},
    optional={"system": mostly(st.lists(BLOCK, max_size=3)), "tools": mostly(st.lists(TOOL, max_size=3)),
              "metadata": mostly(st.just({"user_id": "{"})), "stream": mostly(st.booleans()), "max_tokens": VALUE},
))  # fmt: skip
PART = obj(
    st.sampled_from(["input_text", "output_text", "input_image"]), ["text", "image_url", "annotations"]
)
PARTS = mostly(st.lists(PART, max_size=3) | st.text(max_size=5))
ITEM = st.one_of(
    obj(st.just("message"), ["id", "status"], ("role",), role=st.sampled_from(["user", "assistant", "system", "developer"]), content=PARTS),
    st.fixed_dictionaries({"role": mostly(st.sampled_from(["user", "assistant"])), "content": PARTS}),
    obj("function_call", ["id", "status", "arguments"], ("call_id", "name")),
    obj("custom_tool_call", ["input"], ("call_id", "name")),
    obj(st.sampled_from(["function_call_output", "custom_tool_call_output"]), [], ("call_id",), output=PARTS),
    obj(st.sampled_from(["reasoning", "item_reference"]), ["id", "summary", "encrypted_content"]),
)  # fmt: skip
RESPONSES_TOOL = obj(
    st.sampled_from(["function", "custom", "web_search"]), ["parameters", "description", "strict"], ("name",)
)
RESPONSES_BODY = mostly(st.fixed_dictionaries(
    {"model": mostly(st.just("m")), "input": mostly(st.lists(mostly(ITEM), min_size=1, max_size=5))},
    optional={"instructions": mostly(st.text(max_size=10)), "tools": mostly(st.lists(mostly(RESPONSES_TOOL), max_size=3)),
              "stream": mostly(st.booleans()), "previous_response_id": st.none() | st.just("resp_1")},
))  # fmt: skip


@dataclass
class FuzzRig:
    loop: LoopThread
    upstream: Scripted
    proxy: RunningProxy
    http: aiohttp.ClientSession


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    loop = LoopThread()
    store = Path(tmp_path_factory.mktemp("fuzz"))

    async def up() -> FuzzRig:
        scripted = Scripted()
        await scripted.start()
        rp = await RunningProxy(
            ProxySettings(upstream=scripted.url, port=0, store_dir=store, state_dir=None, flush_interval_s=0),
            shutdown_timeout_s=1,
        ).start()
        return FuzzRig(loop, scripted, rp, aiohttp.ClientSession())

    r = loop.run(up())
    yield r

    async def down() -> None:
        await r.http.close()
        await r.proxy.stop()
        await r.upstream.close()

    loop.run(down())
    loop.close()


def fuzz_one(rig: FuzzRig, path: str, body: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The proxy answers with JSON: its own 400, or the upstream's answer; no bug is logged."""
    caplog.clear()
    status, ctype, raw = rig.loop.run(post(rig.http, rig.proxy.url, path, body), timeout=30)
    assert status in (200, 400), (status, raw[:300], body)
    streamed = status == 200 and ctype.startswith("text/event-stream")
    assert ctype.startswith("application/json") or streamed, (ctype, body)
    if status == 400:
        assert json.loads(raw)["error"]["type"] == "invalid_request_error"
    bugs = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not bugs, (bugs, body)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(body=ANTHROPIC_BODY, count=st.booleans())
def test_fuzzed_anthropic_bodies_get_json_answers(rig, caplog, body, count):
    with caplog.at_level(logging.ERROR):
        fuzz_one(rig, "/v1/messages/count_tokens" if count else "/v1/messages", body, caplog)


@FUZZ
@given(body=RESPONSES_BODY)
def test_fuzzed_responses_bodies_get_json_answers(rig, caplog, body):
    with caplog.at_level(logging.ERROR):
        fuzz_one(rig, "/v1/responses", body, caplog)


# ---------------------------------------------------------------------------
# 2. Deep JSON from the upstream
# ---------------------------------------------------------------------------
def recall_message(input_json: str) -> bytes:
    """An Anthropic answer calling recall_artifact with `input_json` as its raw input."""
    head = ('{"id": "msg_r", "type": "message", "role": "assistant", "model": "m", "content": ['
            '{"type": "text", "text": "let me look"}, '
            '{"type": "tool_use", "id": "toolu_1", "name": "recall_artifact", "input": ')  # fmt: skip
    tail = '}], "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 1}}'
    return (head + input_json + tail).encode()


async def test_an_upstream_recall_with_input_100k_deep_is_a_502(upstream, proxy, http):
    upstream.queue.append(Canned(recall_message('{"artifact_id": ' + nested(DEEP) + "}")))
    err = error_of(*await post(http, proxy.url, "/v1/messages", GOOD["/v1/messages"]), 502)
    assert err["code"] == "upstream_bad_response" and f"{MAX_UPSTREAM_JSON_DEPTH} levels" in err["message"]
    await assert_still_serving(http, proxy.url, "/v1/messages")


async def test_an_upstream_recall_nested_within_the_limit_is_answered_and_continued(upstream, proxy, http):
    upstream.queue.append(
        Canned(recall_message('{"artifact_id": ' + nested(MAX_UPSTREAM_JSON_DEPTH - 8) + "}"))
    )
    status, _, raw = await post(http, proxy.url, "/v1/messages", GOOD["/v1/messages"])
    assert status == 200, raw[:300]
    assert [b["text"] for b in json.loads(raw)["content"]] == ["let me look", "ok"]
    second = upstream.bodies("/messages")[-1]["messages"][-1]["content"][0]
    assert second["type"] == "tool_result" and "invalid recall_artifact arguments" in second["content"]
    await assert_still_serving(http, proxy.url, "/v1/messages")


async def test_a_responses_recall_with_arguments_100k_deep_is_answered_and_continued(upstream, proxy, http):
    call = {"type": "function_call", "id": "fc1", "call_id": "call_1", "name": "recall_artifact",
            "arguments": '{"artifact_id": ' + nested(DEEP) + "}", "status": "completed"}  # fmt: skip
    upstream.queue.append(Canned(json.dumps({**_ok_response(), "output": [call]}).encode()))
    status, _, raw = await post(http, proxy.url, "/v1/responses", GOOD["/v1/responses"])
    assert status == 200, raw[:300]
    assert json.loads(raw)["output"][-1]["content"][0]["text"] == "ok"
    answered = upstream.bodies("/responses")[-1]["input"][-1]
    assert answered["type"] == "function_call_output" and "nested too deeply" in answered["output"]
    await assert_still_serving(http, proxy.url, "/v1/responses")


def streamed_recall(partial_json: str) -> list[bytes]:
    """A streamed Anthropic turn calling recall_artifact with `partial_json` as its input."""
    start = {"id": "msg_r", "type": "message", "role": "assistant", "model": "m", "content": [],
             "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip
    block = {"type": "tool_use", "id": "toolu_1", "name": "recall_artifact", "input": {}}
    return [
        sse({"type": "message_start", "message": start}, "message_start"),
        sse({"type": "content_block_start", "index": 0, "content_block": block}),
        sse({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": partial_json}}),
        sse({"type": "content_block_stop", "index": 0}),
        sse({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 1}}),
        sse({"type": "message_stop"}),
    ]  # fmt: skip


async def test_a_streamed_recall_with_input_100k_deep_is_answered_and_the_stream_completes(
    upstream, proxy, http
):
    upstream.queue.append(Canned(events=streamed_recall('{"artifact_id": ' + nested(DEEP) + "}")))
    status, ctype, raw = await post(http, proxy.url, "/v1/messages", {**GOOD["/v1/messages"], "stream": True})
    assert status == 200 and ctype.startswith("text/event-stream")
    events = stream_events(raw)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "error" not in kinds
    assert [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"] == ["ok"]
    answered = upstream.bodies("/messages")[-1]["messages"][-1]["content"][0]
    assert "invalid recall_artifact arguments" in answered["content"]
    await assert_still_serving(http, proxy.url, "/v1/messages")


async def test_a_stream_whose_next_turn_is_unreadable_ends_with_an_error_event(upstream, proxy, http):
    upstream.queue.append(Canned(events=streamed_recall('{"artifact_id": "art_0"}')))
    upstream.queue.append(Canned(b'{"content": ' + nested(DEEP).encode() + b"}"))  # the turn after the recall
    status, _, raw = await post(http, proxy.url, "/v1/messages", {**GOOD["/v1/messages"], "stream": True})
    events = stream_events(raw)
    assert status == 200 and events[0]["type"] == "message_start"
    assert events[-1]["type"] == "error" and "502" in events[-1]["error"]["message"]
    await assert_still_serving(http, proxy.url, "/v1/messages")


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses", "/v1/chat/completions"])
async def test_an_upstream_200_nested_100k_deep_is_a_502(upstream, proxy, http, path):
    upstream.queue.append(Canned(nested(DEEP).encode()))
    err = error_of(*await post(http, proxy.url, path, GOOD[path]), 502)
    assert err["code"] == "upstream_bad_response"
    await assert_still_serving(http, proxy.url, path)


@pytest.mark.parametrize(
    ("path", "last"),
    [("/v1/messages", "error"), ("/v1/responses", "error"), ("/v1/chat/completions", "[DONE]")],
)
async def test_a_stream_event_nested_100k_deep_is_relayed_and_the_stream_ends_cleanly(
    upstream, proxy, http, path, last
):
    """An event the proxy cannot read passes as it came; the stream still ends as it should:
    with the upstream's end, or (an API whose end the proxy must see) an error event."""
    deep = '{"type": "ping", "usage": ' + nested(DEEP) + "}"
    ending = [sse("[DONE]")] if path.endswith("completions") else []
    upstream.queue.append(Canned(events=[sse(deep), *ending]))
    status, ctype, raw = await post(http, proxy.url, path, {**GOOD[path], "stream": True})
    assert status == 200 and ctype.startswith("text/event-stream")
    final = event_data(SSESplitter().feed(raw)[-1])
    if last == "[DONE]":
        assert final == "[DONE]"
    else:
        obj = json.loads(final)
        assert obj["type"] == "error" and "before it finished" in json.dumps(obj)
    await assert_still_serving(http, proxy.url, path)


# ---------------------------------------------------------------------------
# 3. The hard limit behind unreadable arguments and failed ingestions
# ---------------------------------------------------------------------------
OUTPUT = "".join(f"{i:06d} " + "build output " * 5 + "\n" for i in range(6_700))  # ~447,000 chars


def deep_call_history() -> list[dict[str, Any]]:
    args = '{"cmd": ' + nested(DEEP) + "}"
    return [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": args}}]},
        {"role": "tool", "tool_call_id": "c1", "content": OUTPUT},
    ]  # fmt: skip


async def test_an_output_answering_arguments_100k_deep_keeps_the_hard_limit(upstream, proxy, http, caplog):
    assert len(OUTPUT) > 440_000
    msgs = deep_call_history()
    with caplog.at_level(logging.WARNING):
        for turn in range(3):
            body = {"model": "m", "messages": msgs, "prompt_cache_key": "deep-args"}
            status, _, raw = await post(http, proxy.url, "/v1/chat/completions", body)
            assert status == 200, raw[:300]
            msgs = [
                *msgs,
                {"role": "assistant", "content": f"step {turn}"},
                {"role": "user", "content": "go on"},
            ]
    tools = [
        next(m for m in b["messages"] if m["role"] == "tool")["content"]
        for b in upstream.bodies("/chat/completions")
    ]
    assert len(tools) == 3 and all(t == tools[0] for t in tools)  # the same frozen form each call
    assert len(tools[0]) <= HARD_LIMIT
    aid = re.search(r"art_[0-9a-f]{24}", tools[0]).group(0)
    async with http.get(f"{proxy.url}/tokenpilot/artifacts/{aid}", params={"session": "deep-args"}) as r:
        assert r.status == 200 and (await r.json())["text"] == OUTPUT  # nothing lost
    assert not [r for r in caplog.records if "ingestion failed" in r.getMessage()]
    await assert_still_serving(http, proxy.url, "/v1/chat/completions")


def _failing_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenpilot.ingest.gate import Pipeline

    def broken(self: Any, text: str, ctx: Any) -> Any:
        raise RuntimeError("a bug in a pass")

    monkeypatch.setattr(Pipeline, "reduce_text", broken)


def tool_output_history(output: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "make"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]  # fmt: skip


def test_a_failed_ingestion_still_cuts_to_the_hard_limit_and_keeps_the_original(
    tmp_path, monkeypatch, caplog
):
    _failing_pass(monkeypatch)
    tp = TokenPilot(store=ArtifactStore(tmp_path / "store"))
    with caplog.at_level(logging.WARNING):
        prepared = tp.prepare(tool_output_history(OUTPUT), None, session_id="s")
    tool = next(m for m in prepared.messages if m["role"] == "tool")["content"]
    assert len(tool) <= HARD_LIMIT
    aid = re.search(r"art_[0-9a-f]{24}", tool).group(0)
    assert tp.recall(aid, session_id="s").text == OUTPUT
    assert any(
        "ingestion failed for a tool message, kept unreduced" in r.getMessage() for r in caplog.records
    )
    small = "short output\n" * 10  # under the limit: passes as it came
    prepared = tp.prepare(tool_output_history(small), None, session_id="t")
    assert next(m for m in prepared.messages if m["role"] == "tool")["content"] == small


async def test_a_failed_ingestion_over_http_still_sends_at_most_the_hard_limit(
    upstream, proxy, http, monkeypatch
):
    _failing_pass(monkeypatch)
    body = {"model": "m", "messages": tool_output_history(OUTPUT), "prompt_cache_key": "failing-pass"}
    status, _, raw = await post(http, proxy.url, "/v1/chat/completions", body)
    assert status == 200, raw[:300]
    tool = next(m for m in upstream.bodies("/chat/completions")[-1]["messages"] if m["role"] == "tool")[
        "content"
    ]
    assert len(tool) <= HARD_LIMIT
    aid = re.search(r"art_[0-9a-f]{24}", tool).group(0)
    async with http.get(f"{proxy.url}/tokenpilot/artifacts/{aid}", params={"session": "failing-pass"}) as r:
        assert r.status == 200 and (await r.json())["text"] == OUTPUT
    await assert_still_serving(http, proxy.url, "/v1/chat/completions")


class _NoSpace(ArtifactStore):
    def put(self, session_id: str, data: Any) -> str:
        raise OSError(28, "No space left on device")


def test_a_failed_ingestion_with_a_full_store_still_cuts_without_a_handle(tmp_path, monkeypatch):
    _failing_pass(monkeypatch)
    tp = TokenPilot(store=_NoSpace(tmp_path / "store"))
    prepared = tp.prepare(tool_output_history(OUTPUT), None, session_id="s")
    tool = next(m for m in prepared.messages if m["role"] == "tool")["content"]
    assert len(tool) <= HARD_LIMIT and "could not be stored" in tool and "art_" not in tool


# ---------------------------------------------------------------------------
# 8c. Malformed HTTP
# ---------------------------------------------------------------------------
async def raw_exchange(url: str, data: bytes) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("request_bytes", "phrase"),
    [
        (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9_000 + b"\r\n\r\n", "8190 bytes"),
        (b"GARBAGE\r\n\r\n", "Invalid method"),
        (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "chunk size",
        ),
    ],
    ids=["header_over_8190_bytes", "bad_request_line", "bad_chunk_size"],
)
async def test_malformed_http_gets_a_json_400_and_one_log_line(
    upstream, proxy, http, caplog, request_bytes, phrase
):
    with caplog.at_level(logging.INFO):
        answer = await raw_exchange(proxy.url, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0]
    assert b"application/json" in head
    err = json.loads(body)["error"]
    assert err["code"] == "bad_http_request" and phrase in err["message"] and len(err["message"]) < 300
    logged = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1 and logged[0].exc_info is None and "\n" not in logged[0].getMessage()
    await assert_still_serving(http, proxy.url, "/v1/chat/completions")


def test_a_malformed_tool_message_passed_through_keeps_the_hard_limit(tmp_path):
    """Lenient mode passes a malformed message on untouched, but never past the hard limit."""
    tp = TokenPilot(store=ArtifactStore(tmp_path / "store"))
    msgs = [*tool_output_history(OUTPUT)[:2], {"role": "tool", "tool_call_id": 7, "content": OUTPUT}]
    prepared = tp.prepare(msgs, None, session_id="s")
    assert prepared.stats.malformed == 1
    tool = prepared.messages[-1]
    assert tool["tool_call_id"] == 7 and len(tool["content"]) <= HARD_LIMIT
    aid = re.search(r"art_[0-9a-f]{24}", tool["content"]).group(0)
    assert tp.recall(aid, session_id="s").text == OUTPUT
    small = [*msgs[:2], {"role": "tool", "tool_call_id": 7, "content": "short"}]
    assert (
        TokenPilot(store=ArtifactStore(tmp_path / "other")).prepare(small, None, session_id="t").messages[-1]
        == small[-1]
    )
