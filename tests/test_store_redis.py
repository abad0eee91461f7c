"""The store protocol's contract on both backends, and proxy replicas sharing one Redis.

Redis comes from `TOKENPILOT_TEST_REDIS` (CI starts a server, see `.ci/run`), else a
`redis-server` this module starts on a free port when the binary is on PATH, else the
Redis tests skip with the reason (a fresh clone without Redis).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from conftest import REPO

from tokenpilot import ArtifactStore, StateConflict, StoreError, TokenPilot
from tokenpilot._canonical import artifact_id_for
from tokenpilot.store.disk import DiskStore
from tokenpilot.store.protocol import Store

redis = pytest.importorskip(
    "redis", reason="the Redis store needs the redis client: pip install 'tokenpilot[redis]'"
)
from drills.crashdrill import (  # noqa: E402
    TOOLS,
    ServeProcess,
    extends,
    free_port,
    system_prompt,
    tool_turn,
)
from tokenpilot.store.redis import RedisStore  # noqa: E402


def _namespaced(url: str) -> str:
    """`url` with a namespace of its own, so tests never see each other's keys."""
    return f"{url}{'&' if '?' in url else '?'}namespace=test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["disk", "redis"])
def make_store(request, tmp_path) -> Callable[..., Store]:
    """A factory for the backend under test; `size_limit_bytes` and `lease_s` pass through."""
    if request.param == "disk":

        def disk(**kw: Any) -> Store:
            return DiskStore(ArtifactStore(tmp_path / f"a{uuid.uuid4().hex[:6]}", **kw), tmp_path / "state")

        return disk
    url = _namespaced(request.getfixturevalue("redis_url"))
    return lambda **kw: RedisStore(url, **kw)


# ---------------------------------------------------------------------------
# The contract, on both backends
# ---------------------------------------------------------------------------
def test_put_get_recall_are_byte_exact_and_scoped_to_the_session(make_store):
    store = make_store()
    text = "".join(f"line {n}: caf\u00e9 \ud800 {n * n}\n" for n in range(300))
    weird = "agent\ud800:main"  # a lone surrogate in the session id (valid JSON)
    aid = store.put(weird, text)
    assert aid == artifact_id_for(text) and store.put(weird, text) == aid  # same content, same id
    assert store.get(weird, aid) == text and store.get_bytes(weird, aid) == text.encode(
        "utf-8", "surrogatepass"
    )
    assert list(store.artifact_ids(weird)) == [aid]
    got = store.recall(weird, aid, pattern=r"line 29\d:")
    assert got.found and got.text.count("\n") == 10 and "of 300 lines" in got.note
    assert store.recall(weird, aid, start_line=300).text == text.splitlines(keepends=True)[-1]
    assert not store.recall("agent", aid).found  # another session never sees it
    assert not store.recall(weird, "art_" + "0" * 24).found


def test_a_session_id_that_prefixes_another_never_lists_or_prunes_its_data(make_store):
    store = make_store(size_limit_bytes=1)
    ids = ["agent", "agent:y", "agent\ud800", "agent:"]
    aids = {sid: store.put(sid, f"original of {sid!r}\n" * 100) for sid in ids}
    for sid in ids:
        assert list(store.artifact_ids(sid)) == [aids[sid]], sid
    store.close_session("agent")
    for sid in ids[1:]:
        store.open_session(sid)
    assert store.prune() == 1  # only the closed "agent"
    assert not store.recall("agent", aids["agent"]).found
    for sid in ids[1:]:
        assert store.get(sid, aids[sid]) == f"original of {sid!r}\n" * 100, sid


def test_prune_keeps_live_sessions_and_drops_dead_ones_oldest_first(make_store):
    store = make_store(size_limit_bytes=3000, lease_s=100.0)
    live = store.put("live", "L" * 2000)
    old = store.put("old", "O" * 2000)
    store.close_session("old")
    assert store.prune() == 1 and not store.recall("old", old).found
    assert store.get("live", live) == "L" * 2000  # over the limit or not, a live lease is kept
    store.put("live", "M" * 2000)
    assert store.prune() == 0 and len(list(store.artifact_ids("live"))) == 2
    assert store.prune(now=time.time() + 101) == 2  # the lease ran out: no longer live
    assert list(store.artifact_ids("live")) == [] and not store.recall("live", live).found


def test_state_is_versioned_and_a_stale_writer_is_refused(make_store):
    store = make_store()
    sid = "sess\ud800"
    assert store.state_version(sid) == 0 and store.load_state(sid) is None
    v1 = store.save_state(sid, {"id": sid, "n": 1}, expect=0)
    v2 = store.save_state(sid, {"id": sid, "n": 2}, expect=v1)
    assert (v1, v2) == (1, 2) and store.state_version(sid) == 2
    assert store.load_state(sid) == (2, {"id": sid, "n": 2})
    with pytest.raises(StateConflict):
        store.save_state(sid, {"id": sid, "n": 3}, expect=v1)  # someone wrote since v1
    assert store.load_state(sid) == (2, {"id": sid, "n": 2})
    assert [d["id"] for _, d in store.load_states()] == [sid]
    with store.session_lock(sid), store.session_lock(sid):  # re-entrant in one thread
        assert store.save_state(sid, {"id": sid, "n": 3}) == 3


# ---------------------------------------------------------------------------
# Redis only: locks across processes, failures
# ---------------------------------------------------------------------------
_HOLDER = """
import sys, time
from tokenpilot.store.redis import RedisStore
store = RedisStore(sys.argv[1], lock_ttl_s=float(sys.argv[3]))
with store.session_lock(sys.argv[2]):
    print("held", flush=True)
    time.sleep(float(sys.argv[4]))
    store._r.set(store.namespace + ":released", "1")
print("released", flush=True)
time.sleep(60)
"""


def _holder(url: str, sid: str, ttl_s: float, hold_s: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, url, sid, str(ttl_s), str(hold_s)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_two_processes_contend_for_one_session_lock(redis_url):
    url = _namespaced(redis_url)
    holder = _holder(url, "s", ttl_s=30, hold_s=1.0)
    try:
        store = RedisStore(url, lock_wait_s=30)
        with store.session_lock("s"):  # waits for the other process to let go
            assert store._r.get(store.namespace + ":released") == b"1"
        other = RedisStore(url, lock_wait_s=0.2)
        with other.session_lock("another session"):
            pass  # one session's lock never holds up another's
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_replicas_lock_expires_and_an_expired_lock_is_released_only_by_its_owner(redis_url):
    url = _namespaced(redis_url)
    holder = _holder(url, "s", ttl_s=1.0, hold_s=120)
    holder.kill()  # SIGKILL while holding the lock: nobody releases it
    holder.wait()
    store = RedisStore(url, lock_wait_s=0.1)
    with pytest.raises(StoreError, match="stayed taken"):
        with store.session_lock("s"):
            pass
    patient = RedisStore(url, lock_wait_s=30)
    with patient.session_lock("s"):  # the dead holder's lock expired
        pass

    first = _holder(url, "t", ttl_s=0.3, hold_s=1.0)
    try:
        first.send_signal(signal.SIGSTOP)  # frozen: its heartbeat stops, so its lock lapses
        second = RedisStore(url, lock_wait_s=30)
        with second.session_lock("t"):  # taken once `first`'s lapsed
            first.send_signal(signal.SIGCONT)
            assert first.stdout is not None and first.stdout.readline().strip() == "released"
            # `first` let go late: that must not have freed `second`'s lock
            with pytest.raises(StoreError, match="stayed taken"):
                with RedisStore(url, lock_wait_s=0.1).session_lock("t"):
                    pass
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
        first.wait()


def test_redis_down_is_a_store_error_naming_the_url_without_its_password():
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    store = RedisStore(url, socket_timeout_s=1)
    with pytest.raises(StoreError) as got:
        store.put("s", "x")
    msg = str(got.value)
    assert f"127.0.0.1:{url.rsplit(':', 1)[1]}" in msg and "hunter2" not in msg and "***" in msg
    assert got.value.strerror == "Redis unreachable"
    for call in (lambda: store.state_version("s"), lambda: store.session_lock("s").__enter__()):
        with pytest.raises(StoreError, match="127.0.0.1"):
            call()


def test_with_redis_down_the_agent_keeps_running_unreduced_as_on_a_full_disk():
    pilot = TokenPilot(store=f"redis://127.0.0.1:{free_port()}/0", lifecycle=False)
    big = "".join(f"row {n}: {n * 31}\n" for n in range(20000))
    msgs = [
        {"role": "user", "content": "run it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": big},
    ]
    p = pilot.prepare(msgs, session_id="s")
    sent = p.messages[-1]["content"]
    assert p.stats.unstored == 1 and "art_" not in sent  # no id that could not be recalled
    assert sent == big or "could not be stored (Redis unreachable)" in sent


# ---------------------------------------------------------------------------
# Two real `tokenpilot serve` replicas on one Redis
# ---------------------------------------------------------------------------
def _without_tail(body: dict[str, Any]) -> dict[str, Any]:
    """The body without its per-call tail (the placeholder values that changed, sent last and
    never persisted, I1): what every later body must repeat byte for byte."""
    msgs = body["messages"]
    last = msgs[-1] if msgs else {}
    if isinstance(last.get("content"), str) and last["content"].startswith("<tokenpilot-values>"):
        msgs = msgs[:-1]
    return {**body, "messages": msgs}


async def test_replicas_share_sessions_across_a_sigkill(redis_url, tmp_path):
    import aiohttp

    from tokenpilot_proxy.demo import FakeUpstream

    url = _namespaced(redis_url)
    env = {"PYTHONPATH": str(REPO)}

    def replica(name: str) -> ServeProcess:
        p = ServeProcess(upstream.url, free_port(), tmp_path / name, env)
        (tmp_path / name).mkdir()
        p.cmd += ["--store", url]
        return p

    upstream = FakeUpstream()
    await upstream.start()
    history: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt("2026-12-02")},
        {"role": "user", "content": "check case 7"},
    ]
    originals: dict[str, str] = {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            a, b = replica("a"), replica("b")
            await a.start(http)
            await b.start(http)
            served = {"a": 0, "b": 0}

            async def send(step: int, proxy: ServeProcess, fallback: ServeProcess | None) -> None:
                body = {
                    "model": "m",
                    "messages": history,
                    "tools": TOOLS,
                    "prompt_cache_key": "replica-session",
                }
                try:
                    async with http.post(f"{proxy.url}/v1/chat/completions", json=body) as r:
                        assert r.status == 200, await r.text()
                        served["a" if proxy is a else "b"] += 1
                except aiohttp.ClientConnectionError:
                    assert fallback is not None, f"step {step}: {proxy.url} down"
                    await send(step, fallback, None)  # what a load balancer does

            for step in range(12):
                history.extend(tool_turn(7, step))
                originals[artifact_id_for(history[-1]["content"])] = history[-1]["content"]
                if step in (1, 10):  # a new day: only the session's stored state renders it the same
                    history[0] = {"role": "system", "content": system_prompt(f"2026-12-{2 + step:02d}")}
                if step == 5:
                    await a.kill()  # SIGKILL mid-session; its next request fails over to b
                if step == 8:
                    await a.start(http)  # restarted: knows the session only from Redis
                first, other = (a, b) if step % 2 == 0 else (b, a)
                await send(step, first, other if step in (6, 8) else None)
            assert served["a"] >= 5 and served["b"] >= 6, served

            bodies = [r.body for r in upstream.chat_requests()]
            assert len(bodies) == 12
            breaks = [
                i for i in range(1, len(bodies)) if not extends(bodies[i], _without_tail(bodies[i - 1]))
            ]
            assert breaks == [], f"prefix breaks at upstream bodies {breaks}"
            seen = {
                aid for r in upstream.chat_requests() for aid in r.raw.decode().split('"') if aid in originals
            }
            seen |= {aid for aid in originals if aid in upstream.chat_requests()[-1].raw.decode()}
            assert len(seen) >= 10, f"only {len(seen)} reduced outputs pointed at a stored original"
            for aid in sorted(seen):
                for proxy in (a, b):
                    q = {"session": "replica-session"}
                    async with http.get(f"{proxy.url}/tokenpilot/artifacts/{aid}", params=q) as r:
                        got = await r.json()
                    assert r.status == 200 and got["text"] == originals[aid], (proxy.url, aid)
            await a.stop()
            await b.stop()
    finally:
        await upstream.close()
        for p in ("a", "b"):
            with_log = tmp_path / p / "proxy.log"
            if with_log.exists() and b"Traceback" in with_log.read_bytes():
                print(with_log.read_text())
        await asyncio.sleep(0)
