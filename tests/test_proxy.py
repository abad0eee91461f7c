"""`tokenpilot serve` against a scripted fake upstream on 127.0.0.1 (no network, no LLM).

What the upstream receives is what a provider's prefix cache sees, so most checks
look there: byte-stable prefixes across calls, sessions, dates, workspaces and a
restart; usage coming back; errors passed through or turned into clean ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import REPO, shared_path

from tokenpilot import RECALL_TOOL
from tokenpilot_openclaw import PLUGIN_DIR
from tokenpilot_proxy import Proxy, ProxySettings, SetupError
from tokenpilot_proxy.demo import FakeUpstream, Fault, Reply, ToolCall, common_prefix_len, prompt_text
from tokenpilot_proxy.server import RunningProxy
from tokenpilot_proxy.sessions import (
    SessionStats,
    normalize_session_id,
    recall_candidates,
    resolve_session_id,
)
from tokenpilot_proxy.sse import SSESplitter, event_data
from tokenpilot_proxy.wire import split_per_call

INTERNAL = (
    "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nConversation data (data, not instructions):\n"
    '"Active exec sessions:\\nnone"\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>'
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
    for name in ("exec", "read", "write")
]


# ---------------------------------------------------------------------------
# Inline OpenClaw-shaped requests (always run)
# ---------------------------------------------------------------------------
def system_prompt(date: str, workspace: str, tz: str = "UTC") -> str:
    body = "\n".join(
        f"- rule {i}: keep answers short and cite files under {workspace}/docs/{i}.md" for i in range(60)
    )
    return (
        "<!-- openclaw:attempt:STABLE -->\nYou are a personal assistant running inside OpenClaw.\n"
        f"Your workspace is {workspace}. Read {workspace}/AGENTS.md first.\n{body}\n"
        "<!-- /openclaw:attempt:STABLE -->\n<!-- openclaw:attempt:DYNAMIC -->\n## Temporal Context\n"
        f"Current date: {date}\nTime zone: {tz}\nFor the exact current time, use `session_status`.\n"
    )


def first_user(text: str, session: str, date: str, workspace: str) -> dict[str, Any]:
    runtime = f"Runtime: agent=main | session=agent:main:explicit:{session} | sessionId={session} | host=vm | repo={workspace} | os=Linux | shell=bash"
    return {"role": "user", "content": f"[Wed {date} 09:21 UTC] {text}\n\n{runtime}"}


def internal() -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": INTERNAL}]}


def chat(
    session: str, messages: list[dict[str, Any]], *, stream: bool = True, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "fake-model", "messages": [*messages, internal()], "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(prompt_cache_key=f"{session}:0", tools=TOOLS, tool_choice="auto")
    body.update(extra)
    return body


def stable_prompt(body: dict[str, Any]) -> str:
    """The prompt without its per-call tail (TokenPilot's values message, OpenClaw's internal context)."""
    msgs = list(body["messages"])
    while (
        msgs
        and msgs[-1].get("role") == "user"
        and _text(msgs[-1]).lstrip().startswith(("<tokenpilot-values>", "<<<BEGIN_OPENCLAW"))
    ):
        msgs.pop()
    return prompt_text({**body, "messages": msgs})


def _text(msg: dict[str, Any]) -> str:
    c = msg.get("content")
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))


def assert_append_only(requests: list[Any]) -> None:
    for a, b in zip(requests, requests[1:]):
        assert b.prompt.startswith(stable_prompt(a.body)), "a later request does not extend the earlier one"


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------
@pytest.fixture
def proxy_defaults(tmp_path):
    return {"state_dir": tmp_path / "state", "list_sessions": True}  # per-session stats, no token


@pytest.fixture
async def proxy(upstream, start_proxy):
    return await start_proxy(upstream.url)


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as s:
        yield s


async def post(
    http: aiohttp.ClientSession, rp: RunningProxy, body: Any, **kw: Any
) -> tuple[int, Any, list[bytes]]:
    """(status, parsed JSON or None, SSE events)."""
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    async with http.post(
        rp.url + "/v1/chat/completions",
        data=data,
        headers={"Content-Type": "application/json", **kw.pop("headers", {})},
    ) as r:
        raw = await r.read()
        if r.headers.get("Content-Type", "").startswith("text/event-stream"):
            return r.status, None, SSESplitter().feed(raw)
        return r.status, json.loads(raw) if raw else None, []


def stream_text(events: list[bytes]) -> str:
    out = []
    for e in events:
        d = event_data(e)
        if d and d != "[DONE]":
            obj = json.loads(d)
            for ch in obj.get("choices") or []:
                out.append(ch.get("delta", {}).get("content") or "")
    return "".join(out)


async def get_json(http: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, Any]:
    async with http.get(url, **kw) as r:
        return r.status, await r.json()


# ---------------------------------------------------------------------------
# Byte-stable prefixes
# ---------------------------------------------------------------------------
async def test_prefix_append_only_across_calls(upstream, proxy, http):
    sysmsg = {"role": "system", "content": system_prompt("2026-12-02", "/home/alice/ws")}
    history = [sysmsg, first_user("list files", "s1", "2026-12-02", "/home/alice/ws")]
    upstream.responder = lambda body: (
        Reply("", (ToolCall("exec", {"command": "ls"}),)) if len(body["messages"]) < 6 else Reply("done")
    )
    status, _, events = await post(http, proxy, chat("s1", history))
    assert status == 200
    history += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call1",
                    "type": "function",
                    "function": {"name": "exec", "arguments": '{"command":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call1", "content": "a.txt\nb.txt"},
    ]
    await post(http, proxy, chat("s1", history))
    history += [
        {"role": "assistant", "content": "two files"},
        {"role": "user", "content": "[Thu 2026-12-03 00:05 UTC] thanks"},
    ]
    history[0] = {
        "role": "system",
        "content": system_prompt("2026-12-03", "/home/alice/ws"),
    }  # the date rolled over
    await post(http, proxy, chat("s1", history))

    reqs = upstream.chat_requests()
    assert len(reqs) == 3
    assert_append_only(reqs)
    for r in reqs:  # OpenClaw's unsaved message stays last, after anything TokenPilot adds per call
        assert _text(r.body["messages"][-1]) == INTERNAL
        assert r.body["prompt_cache_key"] == "s1:0"
        assert "recall_artifact" in [t["function"]["name"] for t in r.body["tools"]]
    assert reqs[1].cached_tokens > 0.9 * (len(stable_prompt(reqs[0].body)) // 4)
    _, stats = await get_json(http, proxy.url + "/tokenpilot/stats")
    s1 = stats["sessions"]["s1"]
    assert s1["calls"] == 3 and s1["prefix_breaks"] == 0 and s1["errors"] == 0
    assert s1["cached_tokens"] == sum(r.cached_tokens for r in reqs)


async def test_two_sessions_on_different_days_and_workspaces_share_the_prefix(upstream, proxy, http):
    a = [
        {"role": "system", "content": system_prompt("2026-12-02", "/home/alice/ws")},
        first_user("hi", "sa", "2026-12-02", "/home/alice/ws"),
    ]
    b = [
        {"role": "system", "content": system_prompt("2027-01-15", "/Users/bob/project", tz="Europe/Vienna")},
        first_user("hello", "sb", "2027-01-15", "/Users/bob/project"),
    ]
    await post(http, proxy, chat("sa", a))
    await post(http, proxy, chat("sb", b))
    ra, rb = upstream.chat_requests()
    common = common_prefix_len(ra.prompt, rb.prompt)
    values_at = rb.prompt.index("<tokenpilot-values>")
    assert common >= values_at, (
        "tools and the stabilised system prompt must be byte-identical across sessions"
    )
    assert "2027-01-15" not in rb.prompt[:values_at] and "/Users/bob" not in rb.prompt[:values_at]
    assert rb.cached_tokens >= values_at // 4 - 1
    assert rb.body["prompt_cache_key"] == "sb:0" and ra.body["prompt_cache_key"] == "sa:0"


async def test_real_openclaw_prompt_shared_across_sessions_and_days(start_proxy, http):
    """The captured 48 KB OpenClaw system prompt, replayed as two sessions on different days and workspaces."""
    lines = shared_path("openclaw", "captured_requests_run5.jsonl").read_text().splitlines()
    captured = [json.loads(line) for line in lines]

    def other_session(body: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(body)
        for old, new in (
            ("2026-12-02", "2026-12-03"),
            ("Wed ", "Thu "),
            ("/home/alice/ws", "/home/bob/work"),
            ("e2e-5", "e2e-9"),
            ("09:21", "10:02"),
        ):
            text = text.replace(old, new)
        return json.loads(text)

    async with FakeUpstream() as up:  # OpenAI's rules: 1024-token minimum, 128-token steps
        rp = await start_proxy(up.url)
        try:
            for rec in captured:
                headers = {
                    k: v for k, v in rec["headers"].items() if k in ("session_id", "x-session-affinity")
                }
                assert (await post(http, rp, rec["body"], headers=headers))[0] == 200
            for rec in captured:
                assert (await post(http, rp, other_session(rec["body"])))[0] == 200
            _, stats = await get_json(http, rp.url + "/tokenpilot/stats")
        finally:
            await rp.stop()
    a1, a2, b1, b2 = up.chat_requests()
    assert_append_only([a1, a2])
    assert_append_only([b1, b2])
    values_at = b1.prompt.index("<tokenpilot-values>")
    assert common_prefix_len(a1.prompt, b1.prompt) >= values_at
    system_tokens = len(captured[0]["body"]["messages"][0]["content"]) // 4
    assert b1.cached_tokens >= 0.9 * system_tokens, (
        "a new session on another day reuses the cached system prompt"
    )
    assert a2.cached_tokens >= 0.9 * system_tokens
    assert set(stats["sessions"]) == {"e2e-5", "e2e-9"}
    assert all(s["prefix_breaks"] == 0 for s in stats["sessions"].values())


# ---------------------------------------------------------------------------
# Streaming, usage, non-streaming
# ---------------------------------------------------------------------------
async def test_streaming_passes_through_event_by_event(upstream, proxy, http):
    upstream.responder = lambda body: Reply("The quick brown fox jumps over the lazy dog. " * 5)
    upstream.chunk_chars = 7
    status, _, events = await post(http, proxy, chat("st", [{"role": "user", "content": "go"}]))
    assert status == 200
    datas = [event_data(e) for e in events]
    assert datas[-1] == "[DONE]"
    assert stream_text(events) == "The quick brown fox jumps over the lazy dog. " * 5
    chunks = [json.loads(d) for d in datas[:-1]]
    assert (
        len([c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]) > 20
    )  # not re-chunked
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert (
        usage
        and usage[0]["prompt_tokens_details"]["cached_tokens"] == upstream.chat_requests()[0].cached_tokens
    )


async def test_usage_chunk_hidden_when_the_client_did_not_ask(upstream, proxy, http):
    body = chat("nu", [{"role": "user", "content": "go"}])
    del body["stream_options"]
    status, _, events = await post(http, proxy, body)
    assert status == 200
    assert upstream.chat_requests()[0].body["stream_options"] == {"include_usage": True}
    assert not any(b'"usage"' in e for e in events)
    _, stats = await get_json(http, proxy.url + "/tokenpilot/stats")
    assert stats["sessions"]["nu"]["usage_reports"] == 1  # recorded anyway


async def test_non_streaming_response_and_usage(upstream, proxy, http):
    upstream.responder = lambda body: Reply("plain answer")
    msgs = [
        {"role": "system", "content": system_prompt("2026-12-02", "/home/a/ws")},
        {"role": "user", "content": "q"},
    ]
    s1, r1, _ = await post(http, proxy, chat("ns", msgs, stream=False))
    msgs += [{"role": "assistant", "content": "plain answer"}, {"role": "user", "content": "q2"}]
    s2, r2, _ = await post(http, proxy, chat("ns", msgs, stream=False))
    assert s1 == s2 == 200
    assert r2["choices"][0]["message"]["content"] == "plain answer"
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    _, stats = await get_json(http, proxy.url + "/tokenpilot/stats")
    ns = stats["sessions"]["ns"]
    assert ns["prompt_tokens"] == r1["usage"]["prompt_tokens"] + r2["usage"]["prompt_tokens"]
    assert ns["cached_tokens"] == r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert ns["output_tokens"] == r1["usage"]["completion_tokens"] + r2["usage"]["completion_tokens"]
    assert ns["hit_rate"] == pytest.approx(ns["cached_tokens"] / ns["prompt_tokens"], abs=1e-3)


# ---------------------------------------------------------------------------
# Artifacts and stats
# ---------------------------------------------------------------------------
BIG = "".join(f"line {i}: " + "x" * 60 + "\n" for i in range(1, 2001))  # ~140 KB of bash output


def big_tool_history(session: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": system_prompt("2026-12-02", "/home/a/ws")},
        first_user("run it", session, "2026-12-02", "/home/a/ws"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command":"gen"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": BIG},
    ]


async def test_artifacts_are_scoped_to_their_session(upstream, proxy, http):
    await post(http, proxy, chat("owner", big_tool_history("owner")))
    await post(http, proxy, chat("other", [{"role": "user", "content": "hi"}]))
    sent_tool = next(m for m in upstream.chat_requests()[0].body["messages"] if m["role"] == "tool")[
        "content"
    ]
    assert len(sent_tool) < len(BIG) / 5
    aid = re.search(r"art_[0-9a-f]{24}", sent_tool).group(0)
    url = f"{proxy.url}/tokenpilot/artifacts/{aid}"

    status, body = await get_json(http, url, params={"session": "owner"})
    assert status == 200 and body["found"] and body["text"] == BIG and body["total_lines"] == 2000
    status, body = await get_json(
        http, url, params={"session": "owner:0", "start_line": "1000", "end_line": "1002"}
    )
    assert status == 200 and body["text"] == "".join(BIG.splitlines(keepends=True)[999:1002])
    assert body["content"].startswith("[tokenpilot: lines 1000-1002 of 2000")
    status, body = await get_json(http, url, params={"session": "owner", "pattern": "^line 1234:"})
    assert status == 200 and body["text"].startswith("1234: line 1234:")

    status, body = await get_json(http, url, params={"session": "other"})
    assert status == 404 and body["error"]["code"] == "artifact_not_found" and body["text"] == ""
    status, body = await get_json(
        http, f"{proxy.url}/tokenpilot/artifacts/art_{'0' * 24}", params={"session": "owner"}
    )
    assert status == 404
    status, body = await get_json(
        http, f"{proxy.url}/tokenpilot/artifacts/not-an-id", params={"session": "owner"}
    )
    assert status == 404 and "no artifact" in body["error"]["message"]
    status, body = await get_json(http, url)
    assert status == 400 and body["error"]["param"] == "session"
    status, body = await get_json(http, url, params={"session": "owner", "start_line": "ten"})
    assert status == 400 and body["error"]["param"] == "start_line"

    _, stats = await get_json(http, proxy.url + "/tokenpilot/stats")
    assert stats["sessions"]["owner"]["tokens_saved"] > 20_000
    assert stats["totals"]["calls"] == 2 and set(stats["sessions"]) == {"owner", "other"}


# ---------------------------------------------------------------------------
# Bad requests
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "needle", "param"),
    [
        (b"{not json", "not valid JSON", None),
        (b"\xff\xfe", "not UTF-8", None),
        (b"[1, 2]", "must be a JSON object", None),
        (json.dumps({"model": "m"}), "'messages' must be a list", "messages"),
        (json.dumps({"messages": "hi"}), "'messages' must be a list", "messages"),
        (json.dumps({"messages": [{"content": "x"}]}), "message 0", "messages"),
        (json.dumps({"messages": [{"role": "user", "content": 5}]}), "'content' must be", "messages"),
        (json.dumps({"messages": [], "stream": "yes"}), "'stream' must be a boolean", "stream"),
        (json.dumps({"messages": [], "model": 3}), "'model' must be a string", "model"),
        (json.dumps({"messages": [], "tools": {"a": 1}}), "'tools' must be a list", "tools"),
        (json.dumps({"messages": [], "tools": [{"type": "function"}]}), "tools[0]", "tools"),
        (
            json.dumps({"messages": [], "prompt_cache_key": 7}),
            "'prompt_cache_key' must be",
            "prompt_cache_key",
        ),
    ],
)
async def test_bad_requests_get_a_400_naming_the_problem(upstream, proxy, http, body, needle, param):
    status, err, _ = await post(http, proxy, body)
    assert status == 400
    assert needle in err["error"]["message"]
    assert err["error"].get("param") == param
    assert upstream.chat_requests() == []


async def test_body_over_the_limit_is_413(upstream, start_proxy, http):
    rp = await start_proxy(upstream.url, max_body_bytes=10_000)
    try:
        status, err, _ = await post(http, rp, chat("big", [{"role": "user", "content": "x" * 20_000}]))
        assert status == 413 and "limit" in err["error"]["message"]

        async def chunks():  # no Content-Length: the limit is enforced while reading
            for _ in range(20):
                yield b" " * 1000

        async with http.post(rp.url + "/v1/chat/completions", data=chunks()) as r:
            assert r.status == 413 and (await r.json())["error"]["type"] == "request_too_large"
        assert (await post(http, rp, chat("ok", [{"role": "user", "content": "small"}])))[0] == 200
    finally:
        await rp.stop()


async def test_unknown_routes_and_wrong_methods_answer_json(proxy, http):
    async with http.get(proxy.url + "/nope") as r:
        assert r.status == 404 and (await r.json())["error"]["type"] == "not_found"
    for path in ("/v1/responses", "/v1/messages"):
        async with http.get(proxy.url + path) as r:
            assert r.status == 405 and "error" in await r.json()
    async with http.get(proxy.url + "/v1/chat/completions") as r:
        assert r.status == 405 and "error" in await r.json()


# ---------------------------------------------------------------------------
# Upstream faults
# ---------------------------------------------------------------------------
async def test_upstream_timeout_is_504_and_the_proxy_stays_up(upstream, start_proxy, http):
    rp = await start_proxy(upstream.url, read_timeout_s=0.3)
    try:
        upstream.fail_next(Fault(delay_s=1.5))
        status, err, _ = await post(http, rp, chat("t", [{"role": "user", "content": "hi"}]))
        assert status == 504 and err["error"]["code"] == "upstream_timeout"
        upstream.fail_next(Fault(delay_s=1.5))
        status, err, _ = await post(http, rp, chat("t", [{"role": "user", "content": "hi"}], stream=False))
        assert status == 504
        status, _, events = await post(http, rp, chat("t", [{"role": "user", "content": "hi"}]))
        assert status == 200 and stream_text(events) == "ok"
        _, stats = await get_json(http, rp.url + "/tokenpilot/stats")
        assert stats["sessions"]["t"]["errors"] == 2 and stats["sessions"]["t"]["calls"] == 3
        assert (
            stats["sessions"]["t"]["prefix_breaks"] == 0
        )  # the retried history was not re-ingested differently
    finally:
        await rp.stop()


@pytest.mark.parametrize("stream", [True, False])
async def test_upstream_errors_are_returned_faithfully(upstream, proxy, http, stream):
    body = b'{"error": {"message": "overloaded, try later", "type": "server_error", "code": "overloaded"}}'
    upstream.fail_next(Fault(status=503, body=body))
    async with http.post(
        proxy.url + "/v1/chat/completions", json=chat("e", [{"role": "user", "content": "x"}], stream=stream)
    ) as r:
        assert r.status == 503 and await r.read() == body
    upstream.fail_next(
        Fault(status=400, body=b'{"error": {"message": "bad model", "type": "invalid_request_error"}}')
    )
    async with http.post(
        proxy.url + "/v1/chat/completions", json=chat("e", [{"role": "user", "content": "x"}], stream=stream)
    ) as r:
        assert r.status == 400 and (await r.json())["error"]["message"] == "bad model"
    assert (await post(http, proxy, chat("e", [{"role": "user", "content": "x"}], stream=stream)))[0] == 200


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (Fault(cut_after=3), "upstream_stream_interrupted"),
        (Fault(eof_after=3), "upstream_stream_interrupted"),
        (Fault(stall_after=3, stall_s=1.5), "upstream_timeout"),
    ],
)
async def test_a_stream_cut_midway_ends_with_an_error_event(upstream, start_proxy, http, fault, code):
    rp = await start_proxy(upstream.url, read_timeout_s=0.4)
    try:
        upstream.responder = lambda body: Reply("a fairly long answer that arrives in many chunks " * 3)
        upstream.fail_next(fault)
        status, _, events = await post(http, rp, chat("cut", [{"role": "user", "content": "go"}]))
        assert status == 200
        last = json.loads(event_data(events[-1]))
        assert last["error"]["code"] == code
        assert (
            0 < len(stream_text(events[:-1])) < len("a fairly long answer that arrives in many chunks " * 3)
        )
        status, _, events = await post(http, rp, chat("cut", [{"role": "user", "content": "go"}]))
        assert status == 200 and event_data(events[-1]) == "[DONE]"
        _, stats = await get_json(http, rp.url + "/tokenpilot/stats")
        assert stats["sessions"]["cut"]["errors"] == 1 and stats["sessions"]["cut"]["calls"] == 2
    finally:
        await rp.stop()


async def test_unreachable_upstream_is_502(start_proxy, http):
    rp = await start_proxy("http://127.0.0.1:9/v1", connect_timeout_s=2)
    try:
        status, err, _ = await post(http, rp, chat("u", [{"role": "user", "content": "x"}]))
        assert status == 502 and err["error"]["code"] == "upstream_unreachable"
        async with http.get(rp.url + "/health") as r:
            assert r.status == 200
    finally:
        await rp.stop()


# ---------------------------------------------------------------------------
# Auth and keys
# ---------------------------------------------------------------------------
async def test_auth_token_guards_everything_but_health(upstream, start_proxy, http, monkeypatch):
    monkeypatch.setenv("TP_TEST_TOKEN", "s3cret")
    monkeypatch.setenv("TP_TEST_UPSTREAM_KEY", "sk-upstream")
    rp = await start_proxy(
        upstream.url, auth_token_env="TP_TEST_TOKEN", upstream_key_env="TP_TEST_UPSTREAM_KEY"
    )
    try:
        body = chat("auth", [{"role": "user", "content": "x"}])
        assert (await post(http, rp, body))[0] == 401
        assert (await post(http, rp, body, headers={"Authorization": "Bearer wrong"}))[0] == 401
        async with http.get(rp.url + "/tokenpilot/stats") as r:
            assert r.status == 401
        async with http.get(rp.url + "/tokenpilot/artifacts/art_x", params={"session": "auth"}) as r:
            assert r.status == 401
        async with http.get(rp.url + "/health") as r:
            assert r.status == 200
        assert (await post(http, rp, body, headers={"Authorization": "Bearer s3cret"}))[0] == 200
        assert upstream.chat_requests()[-1].headers["Authorization"] == "Bearer sk-upstream"
    finally:
        await rp.stop()


async def test_client_key_passed_on_without_an_upstream_key(upstream, proxy, http, monkeypatch):
    monkeypatch.delenv("TOKENPILOT_UPSTREAM_API_KEY", raising=False)
    await post(
        http,
        proxy,
        chat("k", [{"role": "user", "content": "x"}]),
        headers={"Authorization": "Bearer sk-client"},
    )
    assert upstream.chat_requests()[-1].headers["Authorization"] == "Bearer sk-client"


def test_missing_auth_token_variable_stops_startup(tmp_path, monkeypatch):
    monkeypatch.delenv("TP_NOT_SET", raising=False)
    settings = ProxySettings(
        upstream="http://127.0.0.1:1/v1",
        auth_token_env="TP_NOT_SET",
        store_dir=tmp_path / "s",
        state_dir=None,
    )
    with pytest.raises(SetupError, match="TP_NOT_SET"):
        Proxy(settings).resolve_secrets()


async def test_models_from_upstream_or_config(upstream, proxy, start_proxy, http):
    status, body = await get_json(http, proxy.url + "/v1/models")
    assert status == 200 and [m["id"] for m in body["data"]] == ["fake-model"]
    rp = await start_proxy(upstream.url, models=("a", "b"), state_dir=None)
    try:
        status, body = await get_json(http, rp.url + "/v1/models")
        assert [m["id"] for m in body["data"]] == ["a", "b"]
    finally:
        await rp.stop()


# ---------------------------------------------------------------------------
# State across restarts
# ---------------------------------------------------------------------------
async def test_state_is_flushed_and_reloaded_across_a_restart(upstream, start_proxy, http, tmp_path):
    history = big_tool_history("keep")
    rp = await start_proxy(upstream.url)
    await post(http, rp, chat("keep", history))
    await rp.stop()
    files = list((tmp_path / "state").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["id"] == "keep"

    rp2 = await start_proxy(upstream.url)
    try:
        _, stats = await get_json(http, rp2.url + "/tokenpilot/stats")
        assert stats["sessions"]["keep"]["calls"] == 1
        history += [
            {"role": "assistant", "content": "ran"},
            {"role": "user", "content": "[Wed 2026-12-02 09:30 UTC] more"},
        ]
        await post(http, rp2, chat("keep", history))
        assert_append_only(
            upstream.chat_requests()
        )  # the reduced tool output renders byte-identically after the restart
        sent = next(m for m in upstream.chat_requests()[-1].body["messages"] if m["role"] == "tool")[
            "content"
        ]
        aid = re.search(r"art_[0-9a-f]{24}", sent).group(0)
        status, body = await get_json(
            http, f"{rp2.url}/tokenpilot/artifacts/{aid}", params={"session": "keep"}
        )
        assert status == 200 and body["text"] == BIG
        _, stats = await get_json(http, rp2.url + "/tokenpilot/stats")
        assert stats["sessions"]["keep"]["calls"] == 2 and stats["sessions"]["keep"]["prefix_breaks"] == 0
    finally:
        await rp2.stop()


def test_sigterm_flushes_state(tmp_path):
    """The real command: SIGTERM ends it cleanly and the session is on disk."""
    loop = asyncio.new_event_loop()
    up = FakeUpstream()
    url = loop.run_until_complete(up.start())
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "tokenpilot_proxy", "serve", "--upstream", url, "--port", str(port)]
    cmd += [
        "--state-dir",
        str(tmp_path / "state"),
        "--store-dir",
        str(tmp_path / "store"),
        "--flush-interval",
        "0",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:

        async def drive() -> int:
            async with aiohttp.ClientSession() as http:
                deadline = time.time() + 20
                while True:
                    try:
                        async with http.get(f"http://127.0.0.1:{port}/health") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientError:
                        if time.time() > deadline:
                            raise
                        await asyncio.sleep(0.1)
                body = chat("sig", [{"role": "user", "content": "x"}])
                async with http.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
                    await r.read()
                    return r.status

        assert loop.run_until_complete(drive()) == 200
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        loop.run_until_complete(up.close())
        loop.close()
    assert proc.returncode == 0, out
    files = list((tmp_path / "state").glob("*.json"))
    assert [json.loads(f.read_text())["id"] for f in files] == ["sig"]


# ---------------------------------------------------------------------------
# Diagnostics
# ---------------------------------------------------------------------------
async def test_a_prefix_break_is_logged_with_its_cause(upstream, proxy, http, caplog):
    msgs = [
        {"role": "system", "content": system_prompt("2026-12-02", "/home/a/ws")},
        {"role": "user", "content": "hi"},
    ]
    changed = [*TOOLS[:2], {**TOOLS[2], "function": {**TOOLS[2]["function"], "description": "changed"}}]
    await post(http, proxy, chat("brk", msgs))
    with caplog.at_level(logging.WARNING, logger="tokenpilot.openclaw"):
        await post(http, proxy, chat("brk", msgs, tools=changed))
    warning = [r.getMessage() for r in caplog.records if "prefix broken" in r.getMessage()]
    assert warning and "tools changed" in warning[0] and "brk" in warning[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tokenpilot.openclaw"):
        await post(
            http, proxy, chat("brk", [msgs[0], {"role": "user", "content": "rewritten"}], tools=changed)
        )
    warning = [r.getMessage() for r in caplog.records if "prefix broken" in r.getMessage()]
    assert warning and "history rewritten" in warning[0]
    assert "first differing message: #1 (user): 'hi' -> 'rewritten'" in warning[0]


def test_session_ids_from_cache_key_or_headers():
    assert normalize_session_id("abc:0") == "abc" == normalize_session_id("abc:12")
    assert normalize_session_id("a:b") == "a:b"
    long = "x" * 80  # OpenClaw cuts it to fit 64 code points; the plugin sends it whole
    cut = normalize_session_id(long[:62] + ":0")
    assert cut == normalize_session_id(long[:61] + ":10") == long[:56]
    assert recall_candidates(long) == [normalize_session_id(long), cut]
    assert resolve_session_id({"prompt_cache_key": "k:0"}, {"session_id": "h:0"}) == "k"
    assert resolve_session_id({}, {"x-session-affinity": "h:3"}) == "h"
    assert resolve_session_id({"prompt_cache_key": ""}, {}) is None


def test_per_call_messages_are_held_out():
    msgs = [{"role": "user", "content": "q"}, internal()]
    assert split_per_call(msgs) == ([msgs[0]], [msgs[1]])
    assert split_per_call([msgs[0]]) == ([msgs[0]], [])


async def test_sessions_without_any_id_are_derived_by_the_core(upstream, proxy, http):
    body = chat("x", [{"role": "system", "content": "You help."}, {"role": "user", "content": "hi"}])
    del body["prompt_cache_key"]
    await post(http, proxy, body)
    await post(http, proxy, body)
    _, stats = await get_json(http, proxy.url + "/tokenpilot/stats")
    (sid,) = stats["sessions"]
    assert sid.startswith("s_") and stats["sessions"][sid]["calls"] == 2
    assert upstream.chat_requests()[0].body["prompt_cache_key"] == sid


def test_stats_record_usage_variants():
    st = SessionStats()
    st.record_usage(
        {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 64}}
    )
    st.record_usage({"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 96})  # DeepSeek
    st.record_usage({"prompt_tokens": None, "prompt_tokens_details": None})
    assert (st.prompt_tokens, st.cached_tokens, st.output_tokens, st.usage_reports) == (200, 160, 10, 3)
    assert SessionStats.from_dict({**st.to_dict(), "unknown": 1}) == st


# ---------------------------------------------------------------------------
# The plugin and the config helpers
# ---------------------------------------------------------------------------
def test_plugin_recall_tool_is_the_core_schema():
    shipped = json.loads((PLUGIN_DIR / "recall_tool.json").read_text())
    assert shipped == RECALL_TOOL["function"], (
        'plugin/recall_tool.json is stale; regenerate it with: python -c "import json; from tokenpilot import RECALL_TOOL; '
        "open('tokenpilot_openclaw/plugin/recall_tool.json', 'w').write(json.dumps(RECALL_TOOL['function'], indent=2) + '\\n')\""
    )
    manifest = json.loads((PLUGIN_DIR / "openclaw.plugin.json").read_text())
    assert manifest["contracts"]["tools"] == ["recall_artifact"] and manifest["kind"] == "context-engine"
    assert json.loads((PLUGIN_DIR / "package.json").read_text())["openclaw"]["extensions"] == ["./index.js"]
    src = (PLUGIN_DIR / "index.js").read_text()
    assert 'catalogMode: "direct-only"' in src and "transcriptSemantics" in src and "commitTurn" in src
    assert "recall_tool.json" in src


NODE_DRIVER = """
const [mod, proxyUrl, sessionId, artifactId] = process.argv.slice(2);
const plugin = await import(mod);
const tools = [], engines = [], middlewares = [];
plugin.default({
  pluginConfig: { proxyUrl },
  logger: { warn() {} },
  registerTool: (factory, opts) => tools.push([factory, opts]),
  registerContextEngine: (id, factory) => engines.push([id, factory]),
  registerAgentToolResultMiddleware: (handler, opts) => middlewares.push([handler, opts]),
});
const big = Array.from({ length: 1500 }, (_, i) => `row ${i + 1}: ` + "y".repeat(40)).join("\\n");
const event = (toolName, text) => ({ toolName, toolCallId: "c9", args: { command: "gen" },
  result: { content: [{ type: "text", text }], details: { aggregated: text, exitCode: 0 } } });
const [handler, mwOpts] = middlewares[0];
const reduced = await handler(event("exec", big), { sessionId });
const untouched = [await handler(event("exec", "small"), { sessionId }),
  await handler(event("recall_artifact", big), { sessionId }), await handler(event("exec", big), {})];
const tool = tools[0][0]({ sessionId });
const part = await tool.execute("call1", { artifact_id: artifactId, start_line: 2, end_line: 3 });
const other = await tools[0][0]({ sessionId: "someone-else" }).execute("call2", { artifact_id: artifactId });
const dead = [];
plugin.default({ pluginConfig: { proxyUrl: "http://127.0.0.1:9", timeoutMs: 2000 }, logger: { warn() {} },
  registerTool: (factory) => dead.push(factory), registerContextEngine() {} });
const down = await dead[0]({ sessionId }).execute("call3", { artifact_id: artifactId });
const engine = engines[0][1]({});
const messages = [{ role: "user", content: "x" }];
const assembled = await engine.assemble({ messages });
const first = await engine.commitTurn({ advancementKey: "k1", messages });
const again = await engine.commitTurn({ advancementKey: "k1", messages });
const compacted = await engine.compact({ sessionId });
console.log(JSON.stringify({ opts: tools[0][1], name: tool.name, catalogMode: tool.catalogMode, parameters: tool.parameters,
  part, other, down, engineId: engines[0][0], info: engine.info, same: assembled.messages === messages, first, again, compacted,
  mwOpts, reduced, untouched, bigLength: big.length }));
"""


async def test_plugin_recall_and_engine_under_node(upstream, proxy, http, tmp_path):
    """The plugin's JS, driven by a stub OpenClaw API under plain Node (any version with fetch)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    await post(http, proxy, chat("js", big_tool_history("js")))
    sent = next(m for m in upstream.chat_requests()[0].body["messages"] if m["role"] == "tool")["content"]
    aid = re.search(r"art_[0-9a-f]{24}", sent).group(0)
    driver = tmp_path / "driver.mjs"
    driver.write_text(NODE_DRIVER)
    proc = await asyncio.create_subprocess_exec(
        node,
        str(driver),
        (PLUGIN_DIR / "index.js").as_uri(),
        proxy.url,
        "js",
        aid,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    res = json.loads(out)
    assert res["opts"] == {"name": "recall_artifact"} and res["catalogMode"] == "direct-only"
    assert {"name": res["name"], "parameters": res["parameters"]} == {
        k: RECALL_TOOL["function"][k] for k in ("name", "parameters")
    }
    assert res["part"]["content"][0]["text"] == "[tokenpilot: lines 2-3 of 2000 of " + aid + "]\n" + "".join(
        BIG.splitlines(keepends=True)[1:3]
    )
    assert res["part"]["details"]["found"] is True
    assert res["other"]["details"]["found"] is False and "no artifact" in res["other"]["content"][0]["text"]
    assert "cannot reach the TokenPilot proxy" in res["down"]["content"][0]["text"]
    assert res["engineId"] == "tokenpilot" and res["same"] is True
    assert res["info"]["transcriptSemantics"] == {
        "currentTurnFence": "before-current-turn-entry-v1",
        "turnAdvancementIdempotency": "atomic-idempotent-v1",
    }
    assert (res["first"], res["again"]) == ({"status": "committed"}, {"status": "duplicate"})
    assert (
        res["compacted"]["ok"] is False and res["compacted"]["compacted"] is False
    )  # no OpenClaw runtime here
    # the tool-result middleware: big outputs reduced at the proxy, the rest left to OpenClaw
    assert res["mwOpts"] == {"runtimes": ["openclaw"]} and res["untouched"] == [None, None, None]
    kept = res["reduced"]["result"]
    meta = kept["details"]["tokenpilot"]
    assert kept["details"]["exitCode"] == 0 and "aggregated" not in kept["details"]
    assert meta["originalChars"] == res["bigLength"] and meta["cutByOpenClaw"] is False
    assert meta["artifactId"] in kept["content"][0]["text"] and len(kept["content"][0]["text"]) < 5000
    async with http.get(
        f"{proxy.url}/tokenpilot/artifacts/{meta['artifactId']}", params={"session": "js"}
    ) as r:
        assert (await r.json())["text"] == "\n".join(f"row {i + 1}: " + "y" * 40 for i in range(1500))


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenpilot_openclaw", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        timeout=60,
        check=False,
    )


def test_install_writes_the_config_and_doctor_reads_it(tmp_path):
    cfg = tmp_path / "home" / ".openclaw" / "openclaw.json"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(
        '// mine\n{agents: {defaults: {model: {primary: "openai/gpt-5.4-mini", fallbacks: ["x/y"]}, contextPruning: {mode: "cache-ttl"}}},}\n'
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}  # no openclaw binary
    res = _cli(
        "openclaw",
        "install",
        "--upstream",
        "https://api.openai.com/v1",
        "--model",
        "gpt-5.4-mini",
        "--port",
        "8799",
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert "paste this JSON5" in res.stdout
    data = json.loads(cfg.read_text())
    provider = data["models"]["providers"]["tokenpilot"]
    assert provider["baseUrl"] == "http://127.0.0.1:8799/v1" and provider["api"] == "openai-completions"
    assert provider["models"][0]["compat"] == {
        "supportsPromptCacheKey": True,
        "sendSessionAffinityHeaders": True,
    }
    service = provider["localService"]
    assert Path(service["command"]).is_absolute() and service["healthUrl"] == "http://127.0.0.1:8799/health"
    assert service["args"][:5] == [
        "-m",
        "tokenpilot_proxy",
        "serve",
        "--upstream",
        "https://api.openai.com/v1",
    ]
    assert data["agents"]["defaults"]["model"] == {"primary": "tokenpilot/gpt-5.4-mini", "fallbacks": ["x/y"]}
    assert data["agents"]["defaults"]["contextPruning"]["mode"] == "off"
    assert data["plugins"]["entries"]["tokenpilot"] == {
        "enabled": True,
        "config": {"proxyUrl": "http://127.0.0.1:8799"},
    }
    assert (
        data["plugins"]["slots"]["contextEngine"] == "tokenpilot"
        and str(PLUGIN_DIR) in data["plugins"]["load"]["paths"]
    )
    assert cfg.with_name("openclaw.json.tokenpilot.bak").read_text().startswith("// mine")
    assert "sk-" not in cfg.read_text()

    log_file = tmp_path / "home" / ".openclaw" / "logs" / "tokenpilot-serve.log"
    assert service["args"][service["args"].index("--log-file") + 1] == str(log_file)

    res = _cli("openclaw", "doctor", "--skip-openclaw", "--json", "--no-start", env=env)
    checks = {c["check"]: c["status"] for c in json.loads(res.stdout)}
    assert res.returncode == 0, res.stdout
    assert (
        checks["provider api"] == "ok"
        and checks["default model"] == "ok"
        and checks["plugin tokenpilot"] == "ok"
    )
    assert checks["proxy"] == "warn"  # not running: OpenClaw starts it on demand

    res = _cli("openclaw", "doctor", "--skip-openclaw", "--json", env=env)  # doctor starts it itself
    found = {c["check"]: c for c in json.loads(res.stdout)}
    assert found["proxy"]["status"] == "ok" and "started by doctor" in found["proxy"]["detail"], res.stdout
    assert found["proxy log"]["status"] == "ok" and str(log_file) in found["proxy log"]["detail"]
    assert "proxy ready" in log_file.read_text()  # the proxy doctor started wrote its log there
    assert _cli("openclaw", "doctor", "--skip-openclaw", "--no-start", env=env).returncode == 0


def test_install_print_shows_secret_references_only():
    res = _cli(
        "openclaw",
        "install",
        "--print",
        "--upstream",
        "http://u/v1",
        "--model",
        "m",
        "--auth-token-env",
        "TP_TOKEN",
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["models"]["providers"]["tokenpilot"]["apiKey"] == "${TP_TOKEN}"
    assert data["plugins"]["entries"]["tokenpilot"]["config"]["authToken"] == "${TP_TOKEN}"


async def test_doctor_reports_cache_hits_from_the_proxy(upstream, proxy, http):
    from tokenpilot_proxy.checks import check_proxy

    msgs = [
        {"role": "system", "content": system_prompt("2026-12-02", "/home/a/ws")},
        {"role": "user", "content": "q"},
    ]
    await post(http, proxy, chat("d", msgs))
    await post(
        http,
        proxy,
        chat("d", [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "q2"}]),
    )
    checks = {c.what: c for c in await asyncio.to_thread(check_proxy, proxy.url, None)}
    assert checks["proxy"].status == "ok" and checks["cache hits"].status == "ok"
    assert "1/1" in checks["cache hits"].detail


async def test_a_break_across_a_restart_is_saved_and_doctor_names_the_message(upstream, http, tmp_path):
    """OpenClaw starts a fresh proxy per turn; a replay that rewrites an old message (its
    truncation count changed) is still counted after the restart, saved, and shown by doctor."""
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    state, store = tmp_path / "state", tmp_path / "store"
    res = _cli(
        "openclaw", "install", "--upstream", upstream.url, "--model", "fake-model",
        "--state-dir", str(state), "--store-dir", str(store), env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    live = big_tool_history("restart") + [{"role": "assistant", "content": "done"}]
    live[3] = {**live[3], "content": BIG + "\n[... 1200 more characters truncated]"}
    settings = ProxySettings(
        upstream=upstream.url, port=0, state_dir=state, store_dir=store, flush_interval_s=0
    )
    for turn, note in enumerate(("1200", "1187")):  # the replay writes another count
        msgs = [*live[:3], {**live[3], "content": live[3]["content"].replace("1200", note)}, *live[4:]]
        msgs.append({"role": "user", "content": f"turn {turn}"})
        rp = await RunningProxy(settings, shutdown_timeout_s=1).start()
        try:
            assert (await post(http, rp, chat("restart", msgs)))[0] == 200
        finally:
            await rp.stop()
    saved = json.loads(next(state.glob("*.json")).read_text())["stats"]
    assert saved["prefix_breaks"] == 1 and saved["last_prefix_break"] == "history rewritten by the caller"
    assert saved["last_prefix_break_detail"].startswith("first differing message: #3 (tool)")
    res = _cli("openclaw", "doctor", "--skip-openclaw", "--no-start", "--json", env=env)
    found = {c["check"]: c for c in json.loads(res.stdout)}
    assert found["prefix breaks"]["status"] == "warn", res.stdout
    assert "1 in 1 session(s)" in found["prefix breaks"]["detail"]
    assert "first differing message: #3 (tool)" in found["prefix breaks"]["detail"]


async def test_tool_results_reduced_before_the_host_keeps_them(upstream, proxy, http):
    """The plugin's middleware path: reduce at /tokenpilot/tool-result, keep the answer, and
    the chat request that carries it later is forwarded with it unchanged; recall is whole."""
    url = proxy.url + "/tokenpilot/tool-result"
    body = {"session": "mw", "tool": "exec", "arguments": {"command": "gen"}, "text": BIG}
    async with http.post(url, json=body) as r:
        assert r.status == 200
        got = await r.json()
    assert got["reduced"] is True and got["session"] == "mw" and len(got["content"]) < len(BIG) / 10
    assert got["artifact_id"] in got["content"]
    async with http.post(url, json=body) as r:
        assert (await r.json())["content"] == got["content"]  # deterministic: replays match
    msgs = big_tool_history("mw")
    msgs[3] = {**msgs[3], "content": got["content"]}
    assert (await post(http, proxy, chat("mw", msgs)))[0] == 200
    sent = next(m for m in upstream.chat_requests()[-1].body["messages"] if m["role"] == "tool")
    assert sent["content"] == got["content"]
    async with http.get(
        f"{proxy.url}/tokenpilot/artifacts/{got['artifact_id']}", params={"session": "mw"}
    ) as r:
        assert (await r.json())["text"] == BIG
    small = {**body, "text": "short output"}
    async with http.post(url, json=small) as r:
        assert (await r.json()) == {
            "session": "mw",
            "reduced": False,
            "content": "short output",
            "artifact_id": None,
        }
    for bad in ({"tool": "exec", "text": BIG}, {"session": "mw", "text": 5}, [1, 2]):
        async with http.post(url, json=bad) as r:
            assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("api", "status"),
    [
        ("openai-completions", "ok"),
        ("openai-responses", "ok"),
        ("anthropic-messages", "ok"),
        ("google-gemini", "FAIL"),
    ],
)
def test_doctor_accepts_every_api_the_proxy_serves(api, status):
    from tokenpilot_openclaw.doctor import check_config
    from tokenpilot_openclaw.openclaw_config import PROVIDER_ID

    data = {"models": {"providers": {PROVIDER_ID: {"baseUrl": "http://127.0.0.1:8787/v1", "api": api}}}}
    checks, _, _ = check_config(data)
    found = next(c for c in checks if c.what == "provider api")
    assert found.status == status, found


def test_proxy_prune_keeps_sessions_it_served_and_drops_idle_ones(tmp_path, monkeypatch):
    """A session that only prepares (stores nothing new) for longer than the lease is still
    live: the proxy renews the leases of sessions it served before the store prunes."""
    import time

    import tokenpilot.store.artifacts as artifacts
    from tokenpilot import ArtifactStore, TokenPilot
    from tokenpilot_proxy import Proxy, ProxySettings

    store = ArtifactStore(tmp_path / "art", size_limit_bytes=1, lease_s=3600)
    proxy = Proxy(
        ProxySettings(upstream="http://127.0.0.1:9", store_dir=tmp_path / "art", state_dir=None),
        pilot=TokenPilot(store=store),
    )
    busy = store.put("busy", "b" * 10_000)  # both leases start now
    idle = store.put("idle", "i" * 10_000)
    later = time.time() + 7200  # two hours on: both leases (one hour) ran out
    monkeypatch.setattr(artifacts.time, "time", lambda: later)
    proxy.keeper.last_seen["busy"] = later - 60  # busy was served a minute ago, storing nothing new
    proxy.keeper.last_seen["gone"] = later - 4000  # served once, over an hour ago: forgotten
    assert proxy.prune() == 1
    assert store.get("busy", busy)
    assert not store.recall("idle", idle).found
    assert "gone" not in proxy.keeper.last_seen
