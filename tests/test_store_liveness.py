"""A Redis store that stalls, and replicas that die holding a session's lock.

Each test starts its own `redis-server` (`LocalRedis`), since a stall (SIGSTOP: the
kernel accepts connections, nothing answers) must never reach a server other tests use;
teardown always resumes and stops it. Waits are bounded by deadlines and client
timeouts (a hang fails the test); no assertion is on a measured time (that is
`benchmarks/bench_redis_stall.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from tokenpilot import StoreError, TokenPilot
from tokenpilot._canonical import artifact_id_for
from tokenpilot.store.protocol import LockBusy, StoreUnanswered

redis = pytest.importorskip(
    "redis", reason="the Redis store needs the redis client: pip install 'tokenpilot[redis]'"
)
from drills.crashdrill import TOOLS, ServeProcess, extends, free_port, system_prompt, tool_turn  # noqa: E402
from drills.local_redis import LocalRedis  # noqa: E402
from tokenpilot.store.redis import RedisStore  # noqa: E402


@pytest.fixture
def server() -> Iterator[LocalRedis]:
    srv = LocalRedis()
    if srv.binary is None:
        pytest.skip("no redis-server on PATH: these tests stall a server of their own")
    srv.start()
    try:
        yield srv
    finally:
        srv.close()  # SIGCONT first: a stopped server would ignore the SIGTERM


def _until(ok: Any, what: str, timeout_s: float = 15.0) -> None:
    """Wait for `ok()`; fail naming `what` past the deadline (a liveness bound, not a timing)."""
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(0.02)


def _as_stored(session: Any) -> Any:
    """An exported session as the store gives it back (JSON: tuples become lists)."""
    return json.loads(json.dumps(session))


def _lock_key(store: RedisStore, sid: str) -> str:
    return store._k("lock", sid)


# ---------------------------------------------------------------------------
# The store: one timeout, then skipped until a probe sees Redis answer
# ---------------------------------------------------------------------------
def test_a_stalled_redis_costs_one_timeout_then_is_skipped_until_it_answers(server):
    store = RedisStore(server.url, socket_timeout_s=0.5, probe_interval_s=0.1)
    aid = store.put("s", "kept\n" * 500)
    server.stall()
    try:
        with pytest.raises(StoreUnanswered) as first:
            store.get("s", aid)
        assert first.value.strerror == "Redis timed out" and not store.available
        for call in (
            lambda: store.put("s", "new"),
            lambda: store.state_version("s"),
            store.session_lock("t").__enter__,
        ):
            with pytest.raises(StoreError) as skipped:
                call()
            # not sent: no second timeout, and the same few words for a model-visible note (I2)
            assert not isinstance(skipped.value, StoreUnanswered), skipped.value
            assert "skipped" in str(skipped.value) and skipped.value.strerror == "Redis timed out"
    finally:
        server.resume()
    _until(lambda: store.available, "the store being used again after SIGCONT")
    assert store.get("s", aid) == "kept\n" * 500
    store.put("s", "new")  # writes work again


def test_a_lock_that_a_stalled_call_left_is_dropped_once_redis_answers(server):
    """The lock's SET waits in the frozen server's socket and runs when it resumes; with a
    60 s TTL only the breaker's clean-up can free the session for the next caller."""
    store = RedisStore(server.url, lock_ttl_s=60, socket_timeout_s=0.5, probe_interval_s=0.1)
    with store.session_lock("warm"):  # loads the lock scripts: the late call is a real SET
        pass
    server.stall()
    try:
        with pytest.raises(StoreUnanswered):
            store.session_lock("s").__enter__()
    finally:
        server.resume()
    _until(lambda: store.available, "the store being used again after SIGCONT")
    client = redis.Redis.from_url(server.url)
    assert client.exists(_lock_key(store, "s")) == 0
    with RedisStore(server.url, lock_wait_s=0.2).session_lock("s"):  # another replica takes it at once
        pass
    client.close()


def test_a_lock_whose_release_was_skipped_is_dropped_once_redis_answers(server):
    store = RedisStore(server.url, lock_ttl_s=60, socket_timeout_s=0.5, probe_interval_s=0.1)
    lock = store.session_lock("s")
    lock.__enter__()
    server.stall()
    try:
        with pytest.raises(StoreUnanswered):
            store.state_version("other")  # opens the breaker
        lock.__exit__(None, None, None)  # its release is skipped: the lock stays in Redis
    finally:
        server.resume()
    _until(lambda: store.available, "the store being used again after SIGCONT")
    with RedisStore(server.url, lock_wait_s=0.2).session_lock("s"):
        pass


# ---------------------------------------------------------------------------
# Locks: a short TTL renewed while held
# ---------------------------------------------------------------------------
def _hold_in_thread(store: RedisStore, sid: str, hold_s: float, done: threading.Event) -> threading.Thread:
    taken = threading.Event()

    def hold() -> None:
        with store.session_lock(sid):
            taken.set()
            time.sleep(hold_s)
            done.set()  # still inside the lock

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert taken.wait(10)
    return t


def test_a_held_lock_is_renewed_past_its_ttl(server, caplog):
    caplog.set_level(logging.INFO, logger="tokenpilot")
    holder = RedisStore(server.url, lock_ttl_s=0.3)
    done = threading.Event()
    t = _hold_in_thread(holder, "s", hold_s=1.5, done=done)  # 5 TTLs
    with RedisStore(server.url, lock_wait_s=30).session_lock("s"):
        assert done.is_set()  # taken only once the holder let go: its heartbeat kept it
    t.join()
    assert "stopped renewing" not in caplog.text and "lapsed" not in caplog.text  # released, not lapsed


def test_a_live_holder_that_keeps_renewing_gives_the_waiter_lock_busy(server):
    holder = RedisStore(server.url, lock_ttl_s=0.2, lock_wait_s=30)
    done = threading.Event()
    t = _hold_in_thread(holder, "s", hold_s=2.0, done=done)
    with pytest.raises(LockBusy, match="stayed taken for 0.6 s .its holder kept renewing it"):
        with RedisStore(server.url, lock_wait_s=0.6).session_lock("s"):
            pass
    assert not done.is_set()
    t.join()


def test_a_holder_stuck_longer_than_the_wait_stops_renewing(server, caplog):
    caplog.set_level(logging.WARNING, logger="tokenpilot")
    holder = RedisStore(server.url, lock_ttl_s=0.2, lock_wait_s=0.5)  # renews for at most 0.5 s
    done = threading.Event()
    t = _hold_in_thread(holder, "s", hold_s=4.0, done=done)
    with RedisStore(server.url, lock_wait_s=30).session_lock("s"):
        assert not done.is_set()  # the stuck holder no longer keeps the session
    assert "no longer renewing it" in caplog.text
    t.join()


_HOLDER = """
import sys, time
from tokenpilot.store.redis import RedisStore
store = RedisStore(sys.argv[1], lock_ttl_s=float(sys.argv[3]))
with store.session_lock(sys.argv[2]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_killed_holders_lock_lapses_within_its_ttl_and_the_waiter_says_why(server, caplog):
    caplog.set_level(logging.INFO, logger="tokenpilot")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, server.url, "s", "1.0"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        proc.kill()  # SIGKILL while holding the lock: nobody releases it, nobody renews it
        proc.wait()
        with RedisStore(server.url, lock_wait_s=30).session_lock("s"):
            pass
    finally:
        proc.kill()
        proc.wait()
    assert "the replica holding its lock stopped renewing it" in caplog.text
    assert "stayed taken" not in caplog.text and "failed" not in caplog.text


def test_lock_times_come_from_the_url_or_the_constructor(server):
    store = RedisStore(f"{server.url}?lock_ttl=2.5&lock_wait=7&namespace=n1", lock_ttl_s=9)
    assert (store.lock_ttl_s, store.lock_wait_s, store.namespace) == (2.5, 7.0, "n1")  # the URL wins
    assert RedisStore(server.url, lock_ttl_s=9, lock_wait_s=0).lock_wait_s == 0
    with RedisStore(f"{server.url}?lock_ttl=1", lock_wait_s=0).session_lock("s"):
        ttl = redis.Redis.from_url(server.url).pttl("tokenpilot:lock:{73}")
        assert 0 < ttl <= 1000
    for bad in ("lock_ttl=0", "lock_ttl=x", "lock_wait=-1", "lock_ttl=inf"):
        with pytest.raises(StoreError, match="bad Redis store URL"):
            RedisStore(f"{server.url}?{bad}")


def test_serve_options_set_the_lock_times_and_the_store_timeout(server):
    from tokenpilot_proxy import Proxy
    from tokenpilot_proxy.serve_options import add_serve_arguments
    from tokenpilot_proxy.server import settings_from_args

    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    argv = ["--upstream", "http://127.0.0.1:9/v1", "--store", server.url]
    defaults = settings_from_args(p.parse_args(argv))
    assert (defaults.store_lock_ttl_s, defaults.store_lock_wait_s, defaults.store_timeout_s) == (
        5.0,
        30.0,
        1.0,
    )
    args = p.parse_args([*argv, "--lock-ttl", "2", "--lock-wait", "3", "--store-timeout", "0.25"])
    store = Proxy(settings_from_args(args)).pilot.store
    assert isinstance(store, RedisStore)
    assert (store.lock_ttl_s, store.lock_wait_s) == (2.0, 3.0)
    assert store._r.connection_pool.connection_kwargs["socket_timeout"] == 0.25
    for bad in (["--lock-ttl", "0"], ["--lock-wait", "-1"], ["--store-timeout", "0"]):
        with pytest.raises(ValueError, match=bad[0]):
            settings_from_args(p.parse_args([*argv, *bad]))


# ---------------------------------------------------------------------------
# The proxy
# ---------------------------------------------------------------------------
def _history(key: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": system_prompt("2026-12-02")},
        {"role": "user", "content": f"check {key}"},
    ]


def test_a_busy_session_is_served_from_memory_without_a_store_failure(server, caplog, tmp_path):
    from tokenpilot_proxy import Proxy, ProxySettings

    caplog.set_level(logging.INFO)
    settings = ProxySettings(
        upstream="http://127.0.0.1:9/v1", store_url=server.url, store_lock_wait_s=0.5, store_dir=tmp_path
    )
    proxy = Proxy(settings)
    history = _history("busy") + tool_turn(1, 0)
    done = threading.Event()
    t = _hold_in_thread(RedisStore(server.url, lock_ttl_s=0.2), "busy", hold_s=2.0, done=done)
    prepared = proxy.path.prepare(history, TOOLS, "busy", {})
    assert prepared.session_id == "busy" and not done.is_set()
    assert caplog.text.count("stayed taken") == 1  # asked once: the save inside did not wait again
    assert "serving this call from this process's memory" in caplog.text
    assert "session store failed" not in caplog.text
    t.join()


class _LateStore(RedisStore):
    """Redis stalled between a save's send and its answer: the first save is kept back
    (`StoreUnanswered`), later ones are skipped, and `land()` applies the first one late,
    as the server does when it resumes."""

    stalled = False
    held_back: tuple[str, dict[str, Any], int | None] | None = None

    def save_state(self, session_id: str, data: Any, *, expect: int | None = None) -> int:
        if not self.stalled:
            return super().save_state(session_id, data, expect=expect)
        if self.held_back is None:
            self.held_back = (session_id, dict(data), expect)
            raise StoreUnanswered("Redis store write failed: Timeout reading", "Redis timed out")
        raise StoreError("Redis store write skipped", "Redis timed out")

    def land(self) -> dict[str, Any]:
        assert self.held_back is not None
        sid, data, expect = self.held_back
        super().save_state(sid, data, expect=expect)
        return data


def test_an_own_write_that_a_stalled_redis_applies_late_does_not_roll_memory_back(server, tmp_path):
    from tokenpilot.lifecycle.schedule import LifecycleConfig
    from tokenpilot_proxy import Proxy, ProxySettings

    # The estimator runs inside each call: run in the background, its result is saved
    # whenever its thread ends, which on a busy machine fell after the stall and bumped
    # the version before the late write landed (a StateConflict, or `4 == 3` below).
    store = _LateStore(f"{server.url}?namespace=late")
    pilot = TokenPilot(store=store, lifecycle=LifecycleConfig(schedule="inline"))
    proxy = Proxy(ProxySettings(upstream="http://127.0.0.1:9/v1"), pilot=pilot)
    assert proxy.state is store
    history = _history("late")
    for step in range(4):
        if step == 1:
            store.stalled = True  # this call's save is kept back; the next one's is skipped
        history += tool_turn(1, step)
        proxy.path.prepare(list(history), TOOLS, "late", {})
    store.stalled = False
    landed = store.land()  # the state of call 1, written after calls 2 and 3 were served from memory
    memory = proxy.pilot.export_session("late")
    assert landed["session"] != memory
    history += tool_turn(1, 4)
    prepared = proxy.path.prepare(list(history), TOOLS, "late", {})
    assert prepared.stats.prefix_break is None  # nothing was re-rendered from the older state
    got = store.load_state("late")
    assert got is not None and got[1]["session"] == _as_stored(proxy.pilot.export_session("late"))
    assert got[0] == 3  # call 1 (late), then call 4 on top of it: no conflict


async def test_a_stalled_redis_never_hangs_the_proxy_and_nothing_is_lost(server, tmp_path, caplog):
    import aiohttp

    from tokenpilot_proxy import ProxySettings
    from tokenpilot_proxy.demo import FakeUpstream
    from tokenpilot_proxy.server import RunningProxy

    caplog.set_level(logging.INFO)
    originals: dict[str, dict[str, str]] = {}
    histories: dict[str, list[dict[str, Any]]] = {}

    async def call(http: aiohttp.ClientSession, base: str, key: str) -> None:
        history = histories.setdefault(key, _history(key))
        history += tool_turn(len(histories), len(originals.setdefault(key, {})))
        originals[key][artifact_id_for(history[-1]["content"])] = history[-1]["content"]
        body = {"model": "m", "messages": history, "tools": TOOLS, "prompt_cache_key": key}
        # 10 s: before the breaker, one stalled call took 25 s
        async with http.post(
            f"{base}/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=10)
        ) as r:
            assert r.status == 200, await r.text()

    async with FakeUpstream() as upstream, aiohttp.ClientSession() as http:
        settings = ProxySettings(
            upstream=upstream.url,
            port=0,
            store_url=f"{server.url}?namespace=stall",
            store_dir=tmp_path,
            store_lock_ttl_s=60,  # a lock left behind must be dropped, not outlived
            store_lock_wait_s=2,
        )
        async with RunningProxy(settings) as running:
            store = running.proxy.pilot.store
            assert isinstance(store, RedisStore)
            for _ in range(2):
                await call(http, running.url, "a")
            server.stall()
            try:
                for _ in range(3):
                    await call(http, running.url, "a")
                for key in ("b", "c"):  # sessions new while Redis is stalled
                    await call(http, running.url, key)
                async with http.get(f"{running.url}/tokenpilot/artifacts/art_{'0' * 24}?session=a") as r:
                    assert r.status == 503 and (await r.json())["error"]["code"] == "store_unavailable"
            finally:
                server.resume()
            await asyncio.to_thread(_until, lambda: store.available, "the proxy using Redis again")
            for key in ("a", "b", "c", "a"):
                await call(http, running.url, key)  # the lock must not be held by a leftover
            await running.proxy.flush()
            client = redis.Redis.from_url(server.url)
            assert client.keys("stall:lock:*") == []
            for key in histories:  # what was served from memory is in Redis
                got = store.load_state(key)
                assert got is not None and got[1]["session"] == _as_stored(
                    running.proxy.pilot.export_session(key)
                ), key
            for key, by_id in originals.items():  # every output, stored once Redis answered
                for aid, text in by_id.items():
                    async with http.get(
                        f"{running.url}/tokenpilot/artifacts/{aid}", params={"session": key}
                    ) as r:
                        assert r.status == 200 and (await r.json())["text"] == text, (key, aid)
            client.close()
    assert "stayed taken" not in caplog.text
    assert caplog.text.count("session store failed") == 1  # once per outage
    assert "answers again" in caplog.text


# ---------------------------------------------------------------------------
# Two real replicas: one SIGKILLed while it holds a session's lock
# ---------------------------------------------------------------------------
def _freeze_while_locked(client: Any, key: str, pid: int, request_done: Any) -> bool:
    """Stop `pid` (SIGSTOP) at a moment it holds the lock `key`: True once it is frozen
    holding it; False when its request finished without being caught holding it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not request_done():
        if client.exists(key):
            os.kill(pid, signal.SIGSTOP)
            if client.exists(key):
                return True
            os.kill(pid, signal.SIGCONT)  # it let go in between: try the next call
            return False
        time.sleep(0.001)
    return False


async def test_a_replica_killed_holding_a_sessions_lock_stalls_it_for_seconds_only(server, tmp_path):
    import aiohttp

    from tokenpilot_proxy.demo import FakeUpstream

    env = {"PYTHONPATH": str(REPO)}
    key = "kill-session"

    def replica(name: str) -> ServeProcess:
        (tmp_path / name).mkdir()
        p = ServeProcess(upstream.url, free_port(), tmp_path / name, env)
        p.cmd += ["--store", server.url]  # default --lock-ttl 5, --lock-wait 30
        return p

    def big_turn(step: int) -> list[dict[str, Any]]:
        turn = tool_turn(3, step)
        turn[-1]["content"] = "".join(f"step {step} row {n}: {n * 7919 % 104729}\n" for n in range(60_000))
        return turn  # ~1.7 MB: its prepare holds the lock long enough to be caught

    upstream = FakeUpstream()
    await upstream.start()
    history = _history(key)
    originals: dict[str, str] = {}
    client = redis.Redis.from_url(server.url)
    lock_key = RedisStore(server.url)._k("lock", key)
    a = b = None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            a, b = replica("a"), replica("b")
            await a.start(http)
            await b.start(http)

            async def send(proxy: ServeProcess, timeout_s: float = 60) -> None:
                body = {"model": "m", "messages": history, "tools": TOOLS, "prompt_cache_key": key}
                t = aiohttp.ClientTimeout(total=timeout_s)
                async with http.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=t) as r:
                    assert r.status == 200, await r.text()

            def add(turn: list[dict[str, Any]]) -> None:
                history.extend(turn)
                originals[artifact_id_for(turn[-1]["content"])] = turn[-1]["content"]

            for step in range(4):  # the session on both replicas in turn
                add(tool_turn(3, step))
                await send(a if step % 2 == 0 else b)
            caught = False
            for step in range(4, 10):
                add(big_turn(step))
                task = asyncio.ensure_future(send(a))
                assert a.proc is not None
                caught = await asyncio.to_thread(
                    _freeze_while_locked, client, lock_key, a.proc.pid, task.done
                )
                if caught:
                    break
                await task  # answered before it was caught: the session goes on, try again
            assert caught, "never caught replica a holding the session's lock"
            await a.kill()  # SIGKILL while it holds the lock (frozen: it renews nothing)
            with pytest.raises((aiohttp.ClientError, ConnectionError)):
                await task  # the call that died with it: the client retries it on b
            await send(b, timeout_s=10)  # the lock lapses within --lock-ttl; b answers within 10 s
            for later in range(step + 1, step + 3):
                add(tool_turn(3, later))
                await send(b)

            bodies = [r.body for r in upstream.chat_requests()]
            breaks = [
                i for i in range(1, len(bodies)) if not extends(bodies[i], _without_tail(bodies[i - 1]))
            ]
            assert breaks == [], f"prefix breaks at upstream bodies {breaks}"
            for aid, text in originals.items():  # nothing lost: every original byte-exact from b
                async with http.get(f"{b.url}/tokenpilot/artifacts/{aid}", params={"session": key}) as r:
                    got = await r.json()
                assert r.status == 200 and got["text"] == text, aid
            await b.stop()
    finally:
        for p in (a, b):
            if p is not None and p.proc is not None and p.proc.returncode is None:
                p.proc.send_signal(signal.SIGCONT)
                await p.kill()
        await upstream.close()
        client.close()
    log = Path(tmp_path / "b" / "proxy.log").read_text()
    assert "the replica holding its lock stopped renewing it" in log
    assert "session store failed" not in log and "stayed taken" not in log


def _without_tail(body: dict[str, Any]) -> dict[str, Any]:
    """The body without its per-call tail (placeholder values sent last, never persisted)."""
    msgs = body["messages"]
    last = msgs[-1] if msgs else {}
    if isinstance(last.get("content"), str) and last["content"].startswith("<tokenpilot-values>"):
        msgs = msgs[:-1]
    return {**body, "messages": msgs}


def test_a_started_local_redis_entered_again_is_one_server_and_close_stops_it() -> None:
    """`with LocalRedis().start() as r:` once left a second server's start over the first,
    and the first outlived `close` (one redis-server leaked per test run)."""
    if LocalRedis().binary is None:
        pytest.skip("no redis-server on PATH")
    srv = LocalRedis().start()
    first = srv.proc
    with srv as again:
        assert again.proc is first and first is not None and first.poll() is None
    assert first.poll() is not None  # stopped, not left running
