"""Faults and abuse against `tokenpilot serve`: every case gets its exact answer, then a normal chat.

A fake upstream on 127.0.0.1 stands in for the provider (no network, no LLM). Each
case checks the status and the OpenAI-shaped error body the client sees, and
`assert_still_serving` sends one good request after it: the proxy must stay up.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import REPO
from yarl import URL

from tokenpilot_proxy import Proxy, ProxySettings, SetupError
from tokenpilot_proxy.demo import FakeUpstream, Fault, Reply, prompt_text
from tokenpilot_proxy.server import RunningProxy, configure_logging, main_serve
from tokenpilot_proxy.sessions import (
    MAX_SESSION_CHARS,
    credential_fingerprint,
    derived_owner,
    normalize_session_id,
    recall_candidates,
)
from tokenpilot_proxy.sse import SSESplitter, event_data
from tokenpilot_proxy.upstream import redact_url, split_credentials
from tokenpilot_proxy.wire import MAX_JSON_DEPTH, encode, json_depth_exceeds

BIG = "".join(f"line {i}: " + "x" * 60 + "\n" for i in range(1, 2001))  # ~140 KB of tool output


# ---------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------
@pytest.fixture
def proxy_defaults():
    return {"list_sessions": True}  # these tests read per-session stats, without a token


@pytest.fixture
async def proxy(upstream, start_proxy):
    return await start_proxy(upstream.url)


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as s:
        yield s


def chat_body(messages: list[dict[str, Any]], key: str | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "fake-model", "messages": messages, "stream": False}
    if key is not None:
        body["prompt_cache_key"] = key
    return {**body, **extra}


def tool_history(first: str, output: str) -> list[dict[str, Any]]:
    """A conversation whose tool output is big enough for TokenPilot to shorten it."""
    return [
        {"role": "system", "content": "You are a careful coding assistant. " * 20},
        {"role": "user", "content": first},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"gen"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]


async def send(
    http: aiohttp.ClientSession, url: str, data: Any, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """POST a body (dict: as JSON; bytes or a chunk generator: as is); (status, headers, raw body)."""
    raw = json.dumps(data) if isinstance(data, dict) else data
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    async with http.post(url + "/v1/chat/completions", data=raw, headers=hdrs) as r:
        return r.status, dict(r.headers), await r.read()


async def get(http: aiohttp.ClientSession, url: str | URL, **kw: Any) -> tuple[int, dict[str, str], bytes]:
    async with http.get(url, **kw) as r:
        return r.status, dict(r.headers), await r.read()


def error_of(raw: bytes) -> dict[str, Any]:
    """The OpenAI-shaped error object of a response body (and that it is one)."""
    err = json.loads(raw)["error"]
    assert isinstance(err["message"], str) and err["message"] and "type" in err and "code" in err
    return err


async def assert_still_serving(http: aiohttp.ClientSession, url: str, **headers: str) -> None:
    """One normal chat right after a fault: the proxy answers it as usual."""
    status, _, raw = await send(http, url, chat_body([{"role": "user", "content": "still there?"}]), headers)
    assert status == 200, raw
    assert json.loads(raw)["choices"][0]["message"]["content"] == "ok"


def artifact_id_in(body: dict[str, Any]) -> str:
    tool = next(m for m in body["messages"] if m["role"] == "tool")
    return re.search(r"art_[0-9a-f]{24}", tool["content"]).group(0)


def stable_prompt(body: dict[str, Any]) -> str:
    """The prompt without TokenPilot's per-call values message at the end."""
    msgs = list(body["messages"])
    while msgs and msgs[-1].get("role") == "user" and str(msgs[-1].get("content")).startswith("<tokenpilot-"):
        msgs.pop()
    return prompt_text({**body, "messages": msgs})


def assert_each_extends_the_last(bodies: list[dict[str, Any]]) -> None:
    for a, b in zip(bodies, bodies[1:]):
        assert prompt_text(b).startswith(stable_prompt(a)), "a call does not extend its caller's last one"


async def stats_of(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    _, _, raw = await get(http, url + "/tokenpilot/stats")
    return json.loads(raw)["sessions"]


# ---------------------------------------------------------------------------
# Sessions never merge by accident
# ---------------------------------------------------------------------------
def test_session_ids_keep_the_whole_key_bounded_and_distinct():
    shared = "tenant-7/project-atlas/" + "q" * 40  # 63 chars: the first 56 are common
    a, b = shared + "-conversation-1", shared + "-conversation-2"
    ids = {normalize_session_id(k) for k in (a, b, a + ":0", shared + "x:3", shared + "y:3")}
    assert len(ids) == 4 and normalize_session_id(a) == normalize_session_id(a + ":0")
    assert all(len(i) <= MAX_SESSION_CHARS for i in ids)
    assert normalize_session_id(a).startswith("tenant-7/project-atlas/")
    assert normalize_session_id("short-key:4") == "short-key"
    # no key can name a hashed or a derived id: it is hashed itself
    hashed = normalize_session_id(a)
    assert normalize_session_id(hashed) != hashed
    assert normalize_session_id("s_0123456789abcdef") != "s_0123456789abcdef"
    assert not derived_owner(normalize_session_id("s_0123456789abcdef_0123456789abcdef"))[0]
    # lone surrogates and control characters: hashed into a plain, UTF-8-safe id
    for odd in ("key-\ud800", "key-\udfff", "line\nbreak", "nul\x00"):
        sid = normalize_session_id(odd)
        assert sid.encode("utf-8") and "\n" not in sid and "\x00" not in sid
    assert normalize_session_id("key-\ud800") != normalize_session_id("key-\udfff")


def test_openclaw_cut_keys_meet_the_plugins_whole_session_id():
    whole = "agent-main-explicit-" + "0123456789abcdef" * 4  # 84 code points
    cut = normalize_session_id(whole[:62] + ":0")  # OpenClaw fits the key into 64 code points
    assert cut == normalize_session_id(whole[:61] + ":12") == normalize_session_id(whole[:56] + ":3")
    assert cut in recall_candidates(whole)  # the plugin sends the whole id
    assert normalize_session_id(whole) != cut  # a client sending the whole id as its key: its own session


def test_credential_fingerprints_are_hashes():
    alice = credential_fingerprint({"authorization": "Bearer sk-alice"})
    assert alice and "alice" not in alice and len(alice) == 16
    assert alice != credential_fingerprint({"authorization": "Bearer sk-bob"})
    assert credential_fingerprint({"x-api-key": "sk-alice"}) not in (None, alice)
    assert credential_fingerprint({}) is None
    assert credential_fingerprint({"authorization": "Bearer \udcff"})  # surrogateescape'd header bytes


async def test_keys_sharing_56_chars_are_two_sessions(upstream, proxy, http):
    shared = "tenant-7/project-atlas/" + "q" * 40
    keys = {"a": shared + "-conversation-1", "b": shared + "-conversation-2"}
    outputs = {"a": BIG, "b": BIG.replace("x", "y")}
    histories = {n: tool_history(f"run the {n} job", outputs[n]) for n in keys}
    for turn in range(3):  # alternate a, b, a, b, a, b
        for n, key in keys.items():
            status, _, raw = await send(http, proxy.url, chat_body(histories[n], key))
            assert status == 200, raw
            histories[n] += [
                {"role": "assistant", "content": f"{n} step {turn} done"},
                {"role": "user", "content": f"{n}: next step {turn}"},
            ]
    by_key: dict[str, list[dict[str, Any]]] = {k: [] for k in keys.values()}
    for r in upstream.chat_requests():
        by_key[r.body["prompt_cache_key"]].append(r.body)
    for bodies in by_key.values():
        assert len(bodies) == 3
        assert_each_extends_the_last(bodies)
    sessions = await stats_of(http, proxy.url)
    assert len(sessions) == 2 and all(s["prefix_breaks"] == 0 and s["calls"] == 3 for s in sessions.values())

    aid_a, aid_b = (artifact_id_in(by_key[keys[n]][0]) for n in ("a", "b"))
    assert aid_a != aid_b
    url = f"{proxy.url}/tokenpilot/artifacts/"
    status, _, raw = await get(http, url + aid_a, params={"session": keys["a"]})
    assert status == 200 and json.loads(raw)["text"] == BIG
    for aid, other in ((aid_a, keys["b"]), (aid_b, keys["a"])):
        status, _, raw = await get(http, url + aid, params={"session": other})
        assert status == 404 and error_of(raw)["code"] == "artifact_not_found"
    await assert_still_serving(http, proxy.url)


async def test_callers_without_keys_are_kept_apart_by_their_credentials(upstream, proxy, http, monkeypatch):
    monkeypatch.delenv("TOKENPILOT_UPSTREAM_API_KEY", raising=False)  # the caller's key goes upstream
    callers = {"alice": "Bearer sk-alice-111", "bob": "Bearer sk-bob-222"}
    outputs = {"alice": BIG, "bob": BIG.replace("x", "z")}
    histories = {n: tool_history("same opening question", outputs[n]) for n in callers}
    for turn in range(3):  # six calls, alternating; same conversation start, different keys
        for n, auth in callers.items():
            status, _, raw = await send(http, proxy.url, chat_body(histories[n]), {"Authorization": auth})
            assert status == 200, raw
            histories[n] += [
                {"role": "assistant", "content": f"{n} answer {turn}"},
                {"role": "user", "content": f"{n} follow-up {turn}"},
            ]
    by_caller: dict[str, list[dict[str, Any]]] = {a: [] for a in callers.values()}
    for r in upstream.chat_requests():
        by_caller[r.headers["Authorization"]].append(r.body)
    for bodies in by_caller.values():
        assert len(bodies) == 3 and len({b["prompt_cache_key"] for b in bodies}) == 1
        assert_each_extends_the_last(bodies)
    sessions = await stats_of(http, proxy.url)
    assert len(sessions) == 2 and all(s["prefix_breaks"] == 0 for s in sessions.values())
    assert all(derived_owner(sid)[1] is not None for sid in sessions)
    assert not any("sk-" in sid for sid in sessions)

    alice_sid = by_caller[callers["alice"]][0]["prompt_cache_key"]
    aid = artifact_id_in(by_caller[callers["alice"]][0])
    url = f"{proxy.url}/tokenpilot/artifacts/{aid}"
    status, _, raw = await get(
        http, url, params={"session": alice_sid}, headers={"Authorization": callers["alice"]}
    )
    assert status == 200 and json.loads(raw)["text"] == BIG
    for headers in ({"Authorization": callers["bob"]}, {}):
        status, _, raw = await get(http, url, params={"session": alice_sid}, headers=headers)
        err = error_of(raw)
        assert status == 403 and err["code"] == "session_forbidden" and "credentials" in err["message"]
    await assert_still_serving(http, proxy.url)


async def test_a_key_shaped_like_a_derived_id_does_not_reach_that_session(upstream, proxy, http):
    body = chat_body(tool_history("hello", BIG))
    assert (await send(http, proxy.url, body, {"Authorization": "Bearer sk-victim"}))[0] == 200
    victim = upstream.chat_requests()[-1].body["prompt_cache_key"]
    status, _, _ = await send(http, proxy.url, chat_body([{"role": "user", "content": "x"}], victim))
    assert status == 200
    assert set(await stats_of(http, proxy.url)) == {victim, normalize_session_id(victim)}


# ---------------------------------------------------------------------------
# Lone surrogates
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
async def test_lone_surrogates_reach_the_upstream_as_valid_utf8(upstream, proxy, http, stream):
    history = tool_history("caf\u00e9 \ud800 please", BIG.replace("line 1:", "line 1: \udbff"))
    body = json.dumps(chat_body(history, "user-key-\ud800", stream=stream))  # JSON escapes: ASCII
    assert "\\ud800" in body
    status, _, raw = await send(http, proxy.url, body.encode())
    assert status == 200, raw
    sent = upstream.chat_requests()[-1]
    text = sent.raw.decode("utf-8")  # strict: valid UTF-8 or this raises
    assert "\\ud800" in text and "caf\u00e9" in text  # only the surrogate is escaped
    assert sent.body["prompt_cache_key"] == "user-key-\ud800"
    assert sent.body["messages"][1]["content"] == "caf\u00e9 \ud800 please"
    tool = next(m for m in sent.body["messages"] if m["role"] == "tool")["content"]
    assert len(tool) < len(BIG) / 5, "the request was forwarded unreduced"
    (sid,) = await stats_of(http, proxy.url)
    assert sid == normalize_session_id("user-key-\ud800")
    await assert_still_serving(http, proxy.url)


async def test_a_session_with_lone_surrogates_is_saved_and_restored(upstream, start_proxy, http, tmp_path):
    history = tool_history("caf\u00e9 \ud800 please", BIG.replace("line 1:", "line 1: \udbff"))
    body = json.dumps(chat_body(history, "key-\ud800")).encode()
    first = await start_proxy(upstream.url, state_dir=tmp_path / "state")
    assert (await send(http, first.url, body))[0] == 200
    await first.stop()
    assert list((tmp_path / "state").glob("*.json")), "the session's state was not written"
    again = await start_proxy(upstream.url, state_dir=tmp_path / "state")
    assert (await send(http, again.url, body))[0] == 200
    a, b = (r.body for r in upstream.chat_requests()[-2:])
    assert a == b  # restored from its state: the same bytes, the same artifact
    (sid,) = await stats_of(http, again.url)
    assert (await stats_of(http, again.url))[sid]["calls"] == 2


def test_encoding_keeps_normal_bodies_and_escapes_only_surrogates():
    normal = {"messages": [{"role": "user", "content": "caf\u00e9 \u2603 \U0001f600"}]}
    assert encode(normal) == json.dumps(normal, ensure_ascii=False, separators=(",", ":")).encode()
    odd = {"a": "\ud800\u00e9"}
    assert encode(odd) == b'{"a":"\\ud800\xc3\xa9"}' == encode(dict(odd))
    assert json.loads(encode(odd)) == odd


# ---------------------------------------------------------------------------
# Hostile and malformed bodies
# ---------------------------------------------------------------------------
def test_depth_check_counts_outside_strings_only():
    limit = MAX_JSON_DEPTH
    assert not json_depth_exceeds(b"[" * limit + b"]" * limit, limit)
    assert json_depth_exceeds(b"[" * (limit + 1) + b"]" * (limit + 1), limit)
    assert json_depth_exceeds(b'{"a":' * 65 + b"[" * 64, limit)
    assert not json_depth_exceeds(b'{"a": "' + b"[{" * 500 + b'"}', limit)
    assert not json_depth_exceeds(b'{"a": "\\"' + b"[" * 500 + b'"}', limit)  # an escaped quote
    assert json_depth_exceeds(b'{"a": "\\\\"' + b"[" * 500 + b"]" * 500 + b"}", limit)  # an escaped backslash
    assert not json_depth_exceeds(b"[" + b"[[],{}]," * 100_000 + b"[]]", limit)


@pytest.mark.parametrize(
    ("raw", "code", "needle"),
    [
        (
            b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "json_too_deep",
            f"{MAX_JSON_DEPTH} levels",
        ),
        (b"[" * 100_000, "json_too_deep", "deeper than"),
        (b'{"messages": [{"role": "user", "content": "x"}]', "invalid_json", "not valid JSON"),
        (b"", "invalid_json", "not valid JSON"),
        (b"\xed\xa0\x80", "invalid_encoding", "not UTF-8"),  # a surrogate as raw bytes is no UTF-8
    ],
)
async def test_hostile_and_malformed_json_get_a_400(upstream, proxy, http, raw, code, needle):
    status, headers, body = await send(http, proxy.url, raw)
    err = error_of(body)
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    assert err["code"] == code and needle in err["message"] and err["type"] == "invalid_request_error"
    assert upstream.chat_requests() == []
    await assert_still_serving(http, proxy.url)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
async def test_json_is_accepted_whatever_the_content_type(upstream, proxy, http, content_type):
    status, _, raw = await send(
        http, proxy.url, chat_body([{"role": "user", "content": "hi"}]), {"Content-Type": content_type}
    )
    assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] == "ok"


async def test_bodies_over_the_limit_are_413_with_or_without_a_length(upstream, start_proxy, http):
    limit = 20_000
    rp = await start_proxy(upstream.url, max_body_bytes=limit)

    def padded(size: int) -> bytes:
        body = json.dumps(chat_body([{"role": "user", "content": ""}])).encode()
        return body.replace(b'"content": ""', b'"content": "' + b"x" * (size - len(body)) + b'"')

    assert len(padded(limit)) == limit
    status, _, raw = await send(http, rp.url, padded(limit))
    assert status == 200, raw  # exactly at the limit: accepted

    async def chunked(data: bytes):
        for i in range(0, len(data), 4096):
            yield data[i : i + 4096]

    for size in (limit + 1, 50 * limit):
        for data in (padded(size), chunked(padded(size))):
            status, _, raw = await send(http, rp.url, data)
            err = error_of(raw)
            assert status == 413 and err["code"] == "request_too_large" and "20,000 bytes" in err["message"]
    bomb = gzip.compress(padded(50 * limit))
    status, _, raw = await send(http, rp.url, bomb, {"Content-Encoding": "gzip"})
    assert status == 413 and len(bomb) < limit
    await assert_still_serving(http, rp.url)


async def test_a_50k_message_request_is_answered(upstream, proxy, http):
    n = 50_000
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i}"} for i in range(n)
    ]
    status, _, raw = await send(http, proxy.url, chat_body(messages, "fifty-k"))
    assert status == 200, raw[:300]
    assert len(upstream.chat_requests()[-1].body["messages"]) >= n
    await assert_still_serving(http, proxy.url)


# ---------------------------------------------------------------------------
# Upstream faults
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("status", [429, 500, 503])
@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_errors_are_relayed_as_they_came(upstream, proxy, http, status, stream):
    body = b'{"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limited"}}'
    upstream.fail_next(Fault(status=status, body=body))
    got, _, raw = await send(http, proxy.url, chat_body([{"role": "user", "content": "x"}], stream=stream))
    assert (got, raw) == (status, body)
    await assert_still_serving(http, proxy.url)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_non_json_200_from_the_upstream_is_502(upstream, proxy, http, stream):
    upstream.fail_next(Fault(status=200, body=b"<html>gateway says hi</html>"))
    status, _, raw = await send(http, proxy.url, chat_body([{"role": "user", "content": "x"}], stream=stream))
    err = error_of(raw)
    assert status == 502 and err["code"] == "upstream_bad_response" and "not JSON" in err["message"]
    await assert_still_serving(http, proxy.url)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_slow_upstream_is_504(upstream, start_proxy, http, stream):
    rp = await start_proxy(upstream.url, read_timeout_s=0.3)
    upstream.fail_next(Fault(delay_s=1.5))
    status, _, raw = await send(http, rp.url, chat_body([{"role": "user", "content": "x"}], stream=stream))
    assert status == 504 and error_of(raw)["code"] == "upstream_timeout"
    await assert_still_serving(http, rp.url)


async def test_an_unreachable_upstream_is_502(start_proxy, http):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rp = await start_proxy(f"http://127.0.0.1:{port}/v1", connect_timeout_s=2)
    status, _, raw = await send(http, rp.url, chat_body([{"role": "user", "content": "x"}]))
    err = error_of(raw)
    assert status == 502 and err["code"] == "upstream_unreachable" and f"127.0.0.1:{port}" in err["message"]
    assert (await get(http, rp.url + "/health"))[0] == 200


async def test_a_stream_cut_by_the_upstream_ends_with_an_error_event(upstream, proxy, http):
    upstream.responder = lambda body: Reply("a long answer in many small chunks " * 4)
    upstream.fail_next(Fault(cut_after=3))
    status, headers, raw = await send(
        http, proxy.url, chat_body([{"role": "user", "content": "go"}], stream=True)
    )
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    last = json.loads(event_data(SSESplitter().feed(raw)[-1]))
    assert last["error"]["code"] == "upstream_stream_interrupted"
    upstream.responder = None
    await assert_still_serving(http, proxy.url)


async def test_a_client_leaving_mid_stream_does_not_hurt_the_proxy(upstream, proxy, http, caplog):
    upstream.responder = lambda body: Reply("word " * 400)
    upstream.chunk_chars, upstream.chunk_delay_s = 5, 0.01
    body = json.dumps(chat_body([{"role": "user", "content": "go"}], stream=True))
    gone = "tokenpilot: client went away during a stream"
    with caplog.at_level(logging.INFO, logger="tokenpilot.openclaw"):
        async with aiohttp.ClientSession() as leaving:
            async with leaving.post(proxy.url + "/v1/chat/completions", data=body) as r:
                assert r.status == 200
                await r.content.readany()  # first events, then hang up
        for _ in range(400):  # the proxy notices at its next write to the client
            if gone in [rec.getMessage() for rec in caplog.records]:
                break
            await asyncio.sleep(0.025)
        upstream.chunk_delay_s, upstream.responder = 0.0, None
        await assert_still_serving(http, proxy.url)
    ours = [rec for rec in caplog.records if rec.name.startswith("tokenpilot")]
    assert gone in [rec.getMessage() for rec in ours]
    assert not [rec for rec in ours if rec.levelno >= logging.WARNING]


# ---------------------------------------------------------------------------
# Artifact reads: guessed, foreign and traversal-looking ids
# ---------------------------------------------------------------------------
TRICKY_IDS = [
    "../../etc/passwd",
    "..%2F..%2Fetc%2Fpasswd",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "%252e%252e%252fetc%252fpasswd",
    "..%5C..%5Cwindows%5Cwin.ini",
    "art_" + "a" * 1000,
    "art_%00" + "0" * 23,
    "%00",
    "art_0123456789abcdef01234567%00.json",
    "art_0123456789ABCDEF01234567",
]


@pytest.mark.parametrize("aid", TRICKY_IDS)
async def test_traversal_looking_artifact_ids_are_404(upstream, proxy, http, aid):
    await send(http, proxy.url, chat_body(tool_history("x", BIG), "owner"))
    url = URL(f"{proxy.url}/tokenpilot/artifacts/{aid}?session=owner", encoded=True)
    status, headers, raw = await get(http, url)
    assert status == 404 and headers["Content-Type"].startswith("application/json")
    assert error_of(raw)["code"] in ("artifact_not_found", None)  # None: no such route at all
    assert b"root:" not in raw and len(raw) < 1500  # a long guessed id is not echoed back in full
    await assert_still_serving(http, proxy.url)


async def test_guessed_and_foreign_artifact_ids_are_404(upstream, proxy, http):
    await send(http, proxy.url, chat_body(tool_history("x", BIG), "owner"))
    await send(http, proxy.url, chat_body([{"role": "user", "content": "hi"}], "intruder"))
    real = artifact_id_in(upstream.chat_requests()[0].body)
    url = f"{proxy.url}/tokenpilot/artifacts/"
    for aid, session in (
        (real, "intruder"),
        (real, "owner:1/../intruder"),
        (real, "../../owner"),
        (real, "owner\x00"),
        ("art_" + "0" * 24, "owner"),
        ("art_" + real[4:][::-1], "owner"),
    ):
        status, _, raw = await get(http, url + aid, params={"session": session})
        assert status == 404 and error_of(raw)["code"] == "artifact_not_found", (aid, session)
    assert (await get(http, url + real, params={"session": "owner"}))[0] == 200
    await assert_still_serving(http, proxy.url)


# ---------------------------------------------------------------------------
# The proxy's bearer token, and the upstream key staying secret
# ---------------------------------------------------------------------------
UPSTREAM_KEY = "sk-upstream-SECRET-0123456789"


async def test_missing_or_wrong_bearer_token_is_401(upstream, start_proxy, http, monkeypatch):
    monkeypatch.setenv("TP_FAULTS_TOKEN", "proxy-token-1")
    rp = await start_proxy(upstream.url, auth_token_env="TP_FAULTS_TOKEN")
    body = chat_body([{"role": "user", "content": "x"}])
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "proxy-token-1"}):
        status, _, raw = await send(http, rp.url, body, headers)
        err = error_of(raw)
        assert (
            status == 401 and err["code"] == "invalid_proxy_token" and err["type"] == "authentication_error"
        )
        status, _, raw = await get(http, rp.url + "/tokenpilot/artifacts/art_x?session=s", headers=headers)
        assert status == 401
    assert upstream.chat_requests() == []
    await assert_still_serving(http, rp.url, Authorization="Bearer proxy-token-1")


async def test_the_upstream_key_never_shows_in_logs_or_answers(
    upstream, start_proxy, http, monkeypatch, caplog
):
    monkeypatch.setenv("TP_FAULTS_UPSTREAM_KEY", UPSTREAM_KEY)
    rp = await start_proxy(upstream.url, upstream_key_env="TP_FAULTS_UPSTREAM_KEY", read_timeout_s=0.3)
    seen: list[bytes] = []

    def keep(status: int, headers: dict[str, str], raw: bytes) -> None:
        seen.append(raw + json.dumps(headers).encode())

    msg = [{"role": "user", "content": "x"}]
    with caplog.at_level(logging.DEBUG):
        keep(*await send(http, rp.url, chat_body(tool_history("x", BIG), "k")))
        keep(*await send(http, rp.url, chat_body(msg, "k", stream=True)))
        for fault in (
            Fault(status=401, body=b'{"error":{"message":"bad key","type":"x","code":null}}'),
            Fault(status=500),
            Fault(status=200, body=b"garbage"),
            Fault(delay_s=1.0),
            Fault(cut_after=1),
        ):
            upstream.fail_next(fault)
            keep(*await send(http, rp.url, chat_body(msg, "k", stream=fault.cut_after is not None)))
        keep(*await send(http, rp.url, b"[" * 5000))
        keep(*await send(http, rp.url, b"{bad"))
        keep(*await get(http, rp.url + "/tokenpilot/artifacts/art_nope?session=k"))
        keep(*await get(http, rp.url + "/tokenpilot/stats"))
        keep(*await get(http, rp.url + "/v1/models"))
        keep(*await get(http, rp.url + "/health"))
        keep(*await get(http, rp.url + "/nowhere"))
    assert upstream.chat_requests()[0].headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert len(seen) == 14 and not [s for s in seen if UPSTREAM_KEY.encode() in s]
    logged = [rec.getMessage() + str(rec.args) + (rec.exc_text or "") for rec in caplog.records]
    assert logged and not [line for line in logged if UPSTREAM_KEY in line]


# ---------------------------------------------------------------------------
# Start-up: secrets, URL credentials, the log file
# ---------------------------------------------------------------------------
@pytest.fixture
def restore_logging():
    """`configure_logging` replaces the root handlers; put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for h in root.handlers:
        if h not in handlers:
            h.close()
    root.handlers[:], root.level = handlers, level


def _proxy(tmp_path: Path, upstream: str = "http://127.0.0.1:1/v1", **kw: Any) -> Proxy:
    return Proxy(ProxySettings(upstream=upstream, store_dir=tmp_path / "s", state_dir=None, **kw))


@pytest.mark.parametrize("bad", ["sk-abc\n", "sk-abc\r\nX-Evil: 1", "sk-\x1babc", "\tsk-abc"])
def test_an_api_key_with_control_characters_stops_startup(tmp_path, monkeypatch, bad):
    monkeypatch.setenv("TP_FAULTS_BAD_KEY", bad)
    with pytest.raises(SetupError, match="TP_FAULTS_BAD_KEY") as exc:
        _proxy(tmp_path, upstream_key_env="TP_FAULTS_BAD_KEY").resolve_secrets()
    assert "sk-" not in str(exc.value)
    monkeypatch.setenv("TP_FAULTS_BAD_TOKEN", bad)
    with pytest.raises(SetupError, match="TP_FAULTS_BAD_TOKEN"):
        _proxy(tmp_path, auth_token_env="TP_FAULTS_BAD_TOKEN").resolve_secrets()


def test_url_credentials_are_split_and_redacted():
    url, auth = split_credentials("https://us%40er:p%3Ass@host:8443/v1")
    assert url == "https://host:8443/v1" and auth == "Basic dXNAZXI6cDpzcw=="  # us@er:p:ss
    assert split_credentials("http://host/v1") == ("http://host/v1", None)
    assert redact_url("http://user:hunter2@host/v1") == "http://user:***@host/v1"
    assert redact_url("http://host/v1") == "http://host/v1"
    with pytest.raises(ValueError) as exc:
        ProxySettings(upstream="ftp://user:hunter2@host/v1")
    assert "hunter2" not in str(exc.value)


def test_url_credentials_and_an_api_key_together_stop_startup(tmp_path, monkeypatch):
    monkeypatch.setenv("TP_FAULTS_KEY", "sk-both")
    with pytest.raises(SetupError, match="choose one") as exc:
        _proxy(
            tmp_path, "http://user:hunter2@127.0.0.1:1/v1", upstream_key_env="TP_FAULTS_KEY"
        ).resolve_secrets()
    assert "hunter2" not in str(exc.value) and "sk-both" not in str(exc.value)


async def test_url_credentials_go_as_basic_auth(upstream, start_proxy, http, monkeypatch, caplog):
    monkeypatch.delenv("TOKENPILOT_UPSTREAM_API_KEY", raising=False)
    url = upstream.url.replace("http://", "http://proxyuser:hunter2@")
    with caplog.at_level(logging.INFO, logger="tokenpilot.openclaw"):
        rp = await start_proxy(url)
        await assert_still_serving(http, rp.url, Authorization="Bearer client-key")
    assert upstream.chat_requests()[-1].headers["Authorization"] == "Basic cHJveHl1c2VyOmh1bnRlcjI="
    ready = [r.getMessage() for r in caplog.records if "proxy ready" in r.getMessage()]
    assert ready and "proxyuser:***@" in ready[0] and "hunter2" not in " ".join(ready)


def test_log_file_appends_with_time_and_level(tmp_path, restore_logging):
    path = tmp_path / "deeper" / "logs" / "serve.log"
    path.parent.mkdir(parents=True)
    path.write_text("an earlier line\n")
    configure_logging("INFO", path)
    logging.getLogger("tokenpilot.openclaw").warning("tokenpilot: something to keep")
    lines = path.read_text().splitlines()
    assert lines[0] == "an earlier line"
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING tokenpilot: something to keep", lines[1]
    )
    configure_logging("INFO", tmp_path / "new" / "dirs" / "serve.log")
    logging.getLogger("tokenpilot.openclaw").info("tokenpilot: made its folder")
    assert "made its folder" in (tmp_path / "new" / "dirs" / "serve.log").read_text()


def test_an_unwritable_log_file_stops_startup_with_one_line(tmp_path, restore_logging, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for target in (blocker / "serve.log", tmp_path):  # under a file; a directory
        with pytest.raises(SetupError, match="--log-file"):
            configure_logging("INFO", target)
        code = main_serve(["--upstream", "http://127.0.0.1:1/v1", "--no-state", "--log-file", str(target)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("tokenpilot serve: --log-file") and "\n" not in err


def test_serve_writes_its_log_file_and_hides_the_url_password(tmp_path):
    """The real command: `--log-file` and `--upstream user:pass@...` end to end."""
    loop = asyncio.new_event_loop()
    up = FakeUpstream()
    url = loop.run_until_complete(up.start()).replace("http://", "http://bob:hunter2@")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_file = tmp_path / "logs" / "serve.log"
    cmd = [sys.executable, "-m", "tokenpilot_proxy", "serve", "--upstream", url, "--port", str(port)]
    cmd += ["--no-state", "--store-dir", str(tmp_path / "store"), "--log-file", str(log_file)]
    env = {k: v for k, v in os.environ.items() if k != "TOKENPILOT_UPSTREAM_API_KEY"}
    proc = subprocess.Popen(
        cmd, env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:

        async def drive() -> int:
            async with aiohttp.ClientSession() as http:
                deadline = time.time() + 30
                while True:
                    try:
                        if (await get(http, f"http://127.0.0.1:{port}/health"))[0] == 200:
                            break
                    except aiohttp.ClientError:
                        if time.time() > deadline or proc.poll() is not None:
                            raise
                        await asyncio.sleep(0.1)
                body = chat_body([{"role": "user", "content": "x"}])
                return (await send(http, f"http://127.0.0.1:{port}", body))[0]

        assert loop.run_until_complete(drive()) == 200
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        loop.run_until_complete(up.close())
        loop.close()
    assert proc.returncode == 0, out
    logged = log_file.read_text()
    assert re.search(r"^\S+ \S+ INFO tokenpilot: proxy ready, upstream http://bob:\*\*\*@", logged, re.M), (
        logged
    )
    assert "shutting down" in logged and "hunter2" not in logged + out
    assert up.chat_requests()[0].headers["Authorization"] == "Basic Ym9iOmh1bnRlcjI="


# ---------------------------------------------------------------------------
# A full disk: forwarded unreduced (hard limit kept), said once per session
# ---------------------------------------------------------------------------
class _FullDisk:
    """An artifact store whose writes fail with ENOSPC while `full` is set."""

    def __init__(self, store: Any) -> None:
        self.store, self.full = store, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def put(self, session_id: str, data: Any) -> str:
        if self.full:
            raise OSError(28, "No space left on device")
        return self.store.put(session_id, data)


async def test_a_full_disk_forwards_unreduced_and_logs_once_per_session(upstream, http, tmp_path, caplog):
    from tokenpilot import ArtifactStore, TokenPilot

    disk = _FullDisk(ArtifactStore(tmp_path / "store"))
    settings = ProxySettings(upstream=upstream.url, port=0, state_dir=tmp_path / "state", flush_interval_s=0)
    proxy = Proxy(settings, pilot=TokenPilot(store=disk))  # type: ignore[arg-type]
    rp = await RunningProxy(settings, proxy, shutdown_timeout_s=1).start()
    try:
        output = "".join(f"{i:06d} build output line\n" for i in range(12_000))  # 288,000 chars
        msgs = tool_history("build it", output)
        caplog.set_level(logging.INFO, logger="tokenpilot.openclaw")
        for turn in range(3):
            status, _, raw = await send(http, rp.url, chat_body(msgs, key="disk"))
            assert status == 200, raw
            msgs = msgs + [
                {"role": "assistant", "content": f"step {turn}"},
                {"role": "user", "content": "go on"},
            ]
        sent = [r.body for r in upstream.chat_requests()]
        tool = next(m for m in sent[-1]["messages"] if m["role"] == "tool")["content"]
        assert len(tool) <= 200_000 + 300 and "could not be stored" in tool and "art_" not in tool
        assert_each_extends_the_last(sent)  # the cut form is stable while the disk stays full
        said = [r.getMessage() for r in caplog.records if "No space left on device" in r.getMessage()]
        assert len(said) == 1 and "session disk" in said[0], said

        disk.full = False  # space comes back: the output is reduced and stored, said once
        status, _, raw = await send(http, rp.url, chat_body(msgs, key="disk"))
        assert status == 200, raw
        tool = next(m for m in upstream.chat_requests()[-1].body["messages"] if m["role"] == "tool")[
            "content"
        ]
        aid = re.search(r"art_[0-9a-f]{24}", tool).group(0)
        assert disk.store.get("disk", aid) == output
        assert any("works again" in r.getMessage() for r in caplog.records)
        await assert_still_serving(http, rp.url)
    finally:
        await rp.stop()
