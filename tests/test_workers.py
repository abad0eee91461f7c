"""`tokenpilot serve --workers N`: N processes on one port behave as one proxy.

The workers share the disk store in its multi-process mode (`DiskStore(shared=True)`:
a per-session `flock` and a stored version beside each state), as replicas share
Redis. So a session whose calls the kernel spreads over both workers gets the
upstream bytes one process sends, with its evictions at the same calls; every
original is recallable from either worker; `/tokenpilot/stats` shows the whole
session from either; SIGTERM stops every worker with its state saved; a killed
worker is started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import REPO

from drills.crashdrill import ServeProcess, free_port
from drills.fleetdrill import SESSION as SID
from drills.fleetdrill import TOOLS, file_text, prefix_breaks, session_calls, settled
from tokenpilot import TokenPilot
from tokenpilot.errors import StoreError
from tokenpilot.store.disk import DiskStore
from tokenpilot.store.protocol import StateConflict
from tokenpilot_proxy import Proxy, ProxySettings, wire
from tokenpilot_proxy.demo import FakeUpstream

TASKS = 10  # 30 calls: the one-process reference evicts several times
ENV = {"PYTHONPATH": str(REPO), "TOKENPILOT_ESTIMATOR_MODEL": ""}


@pytest.fixture(autouse=True)
def offline_estimator(monkeypatch):
    monkeypatch.delenv("TOKENPILOT_ESTIMATOR_MODEL", raising=False)


# ---------------------------------------------------------------------------
# The disk store shared by processes
# ---------------------------------------------------------------------------
HOLD_LOCK = """
import sys, time
from tokenpilot.store.disk import DiskStore
store = DiskStore(sys.argv[1] + "/store", sys.argv[1] + "/state", shared=True)
with store.session_lock(sys.argv[2]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_shared_disk_store_versions_refuse_a_stale_writer(tmp_path):
    a = DiskStore(tmp_path / "store", tmp_path / "state", shared=True)
    b = DiskStore(tmp_path / "store", tmp_path / "state", shared=True)
    assert a.state_version(SID) == 0 and a.load_state(SID) is None
    v1 = a.save_state(SID, {"id": SID, "n": 1}, expect=0)
    assert v1 == 1 and b.state_version(SID) == 1  # the other process sees the new version
    assert b.save_state(SID, {"id": SID, "n": 2}, expect=1) == 2
    with pytest.raises(StateConflict):
        a.save_state(SID, {"id": SID, "n": 3}, expect=1)  # a still holds version 1
    assert a.load_state(SID) == (2, {"id": SID, "n": 2})
    assert [v for v, _ in a.load_states()] == [2]


def test_shared_disk_store_lock_holds_across_processes_and_dies_with_its_holder(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path), SID],
        stdout=subprocess.PIPE,
        env={**os.environ, **ENV},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        mine = DiskStore(tmp_path / "store", tmp_path / "state", shared=True, lock_wait_s=0.2)
        with pytest.raises(StoreError, match="stayed taken by another live process"):
            with mine.session_lock(SID):
                pass
        holder.kill()  # dies holding the lock: the kernel releases it
        holder.wait(10)
        with mine.session_lock(SID):
            with mine.session_lock(SID):  # re-entrant in a thread
                mine.save_state(SID, {"id": SID}, expect=0)
        assert mine.state_version(SID) == 1
    finally:
        holder.kill()
        holder.wait(10)


def test_workers_without_a_shared_state_are_refused(tmp_path):
    with pytest.raises(ValueError, match="--workers > 1 with --no-state"):
        ProxySettings(upstream="http://127.0.0.1:9/v1", state_dir=None, workers=2)


# ---------------------------------------------------------------------------
# One process, in-process: the reference bytes
# ---------------------------------------------------------------------------
def one_process(calls: list[list[dict[str, Any]]], tmp: Path) -> tuple[list[bytes], list[int]]:
    settings = ProxySettings(
        upstream="http://127.0.0.1:9/v1", store_dir=tmp / "store", state_dir=tmp / "state", flush_interval_s=0
    )
    proxy = Proxy(settings, pilot=TokenPilot(store=str(tmp / "store")))
    bodies, evictions = [], []
    for n, history in enumerate(calls):
        body = {"model": "m", "messages": history, "tools": TOOLS, "prompt_cache_key": SID}
        hist, per_call = wire.split_per_call(body["messages"])
        prepared = proxy.path.prepare(hist, body["tools"], SID, {})
        bodies.append(wire.encode(wire.upstream_body(body, prepared, per_call, SID)))
        if prepared.stats.prefix_break == "eviction":
            evictions.append(n)
        assert proxy.pilot.session(SID).lifecycle.wait(60)
    return bodies, evictions


# ---------------------------------------------------------------------------
# `tokenpilot serve --workers 2`
# ---------------------------------------------------------------------------
class Workers(ServeProcess):
    """`tokenpilot serve --workers N` as a subprocess; ready once it says "serving"."""

    def __init__(self, upstream: str, workdir: Path, n: int = 2) -> None:
        super().__init__(upstream, free_port(), workdir, ENV)
        self.cmd += ["--workers", str(n), "--list-sessions"]  # the test reads per-session stats
        self.state = DiskStore(workdir / "store", workdir / "state", shared=True)

    async def start(self, http: aiohttp.ClientSession, timeout_s: float = 60.0) -> float:
        t = await super().start(http, timeout_s)
        await self.wait_log("tokenpilot: serving", timeout_s)
        return t

    async def wait_log(self, text: str, timeout_s: float = 60.0, count: int = 1) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            log = self.log.read_text(errors="replace")
            if log.count(text) >= count:
                return log
            assert time.monotonic() < deadline, f"{text!r} not logged in {timeout_s:g} s:\n{log[-3000:]}"
            await asyncio.sleep(0.05)


def fresh_connections() -> aiohttp.ClientSession:
    """A client that opens a new connection per request: the kernel picks the worker each time."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True), timeout=aiohttp.ClientTimeout(total=120)
    )


async def workers_seen(url: str, tries: int = 60) -> dict[int, int]:
    """pid -> sessions that worker holds in memory, over many fresh connections."""
    seen: dict[int, int] = {}
    async with fresh_connections() as http:
        for _ in range(tries):
            async with http.get(f"{url}/health") as r:
                got = await r.json()
            seen[got["pid"]] = got["sessions"]
    return seen


async def recall_all(url: str, store: DiskStore, originals: set[str]) -> set[str]:
    """Every artifact of the session, recalled through the workers, is its stored bytes; the
    file bodies found in them (a reduced output's original, or inside an evicted bundle)."""
    found: set[str] = set()
    async with fresh_connections() as http:
        for aid in store.artifact_ids(SID):
            async with http.get(f"{url}/tokenpilot/artifacts/{aid}", params={"session": SID}) as r:
                assert r.status == 200, await r.text()
                text = (await r.json())["text"]
            assert text == store.get(SID, aid)
            if text in originals:
                found.add(text)
                continue
            bundle = json.loads(text)  # an evicted bundle: the messages as the agent sent them
            tool_texts = [m["content"] for m in bundle if m.get("role") == "tool"]
            assert tool_texts and set(tool_texts) <= originals
            found.update(tool_texts)
    return found


async def test_one_session_spread_over_two_workers_sends_the_bytes_of_one_process(tmp_path):
    calls = session_calls(TASKS)
    ref_bodies, ref_evictions = await asyncio.to_thread(one_process, calls, tmp_path / "alone")
    assert len(ref_evictions) >= 2, ref_evictions
    originals = {file_text(t, p) for t in range(TASKS) for p in range(2)}

    upstream = FakeUpstream()
    await upstream.start()
    work = tmp_path / "workers"
    work.mkdir()
    serve = Workers(upstream.url, work)
    try:
        async with aiohttp.ClientSession() as http:
            await serve.start(http)
        async with fresh_connections() as http:
            for n, history in enumerate(calls):
                body = {"model": "m", "messages": history, "tools": TOOLS, "prompt_cache_key": SID}
                async with http.post(f"{serve.url}/v1/chat/completions", json=body) as r:
                    assert r.status == 200, f"call {n}: {await r.text()}"
                    await r.read()
                await settled(serve.state)  # the estimator's result is in the shared state
        bodies = [r.raw for r in upstream.chat_requests()]
        assert prefix_breaks([json.loads(b) for b in bodies]) == ref_evictions
        for n, (got, want) in enumerate(zip(bodies, ref_bodies, strict=True)):
            assert got == want, f"call {n}: the body differs from the one-process body"

        seen = await workers_seen(serve.url)
        assert len(seen) == 2 and all(held == 1 for held in seen.values()), seen  # both served it
        assert len(await recall_all(serve.url, serve.state, originals)) >= 4
        async with fresh_connections() as http:  # the fleet's view, from either worker
            for _ in range(6):
                async with http.get(f"{serve.url}/tokenpilot/stats") as r:
                    view = await r.json()
                assert view["sessions"][SID]["calls"] == len(calls)

        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(serve.proc.wait(), 40) == 0
        log = serve.log.read_text()
        assert log.count("stopped (exited with code 0)") == 2, log[-3000:]
        got = serve.state.load_state(SID)
        assert got is not None
        stats = got[1]["stats"]
        assert stats["calls"] == len(calls) and stats["prompt_tokens"] > 0  # usage flushed at stop
    finally:
        await serve.kill()
        await upstream.close()


async def test_workers_of_a_supervisor_killed_with_sigkill_stop_too(tmp_path):
    """No orphan keeps serving the port: each worker follows its parent out (saving first)."""
    upstream = FakeUpstream()
    await upstream.start()
    serve = Workers(upstream.url, tmp_path)
    pids: set[int] = set()
    try:
        async with aiohttp.ClientSession() as http:
            await serve.start(http)
        pids = set(await workers_seen(serve.url))
        assert len(pids) == 2, pids
        await serve.kill()  # SIGKILL to the supervisor alone
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not [pid for pid in pids if _alive(pid)]
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await upstream.close()


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


async def test_a_killed_worker_is_started_again_and_the_session_goes_on(tmp_path):
    calls = session_calls(2)
    upstream = FakeUpstream()
    await upstream.start()
    serve = Workers(upstream.url, tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            await serve.start(http)
        seen = await workers_seen(serve.url)
        assert len(seen) == 2, seen
        victim = min(seen)
        os.kill(victim, signal.SIGKILL)
        await serve.wait_log("was killed by SIGKILL; starting it again")
        await serve.wait_log("tokenpilot: proxy ready", count=3)
        after = await workers_seen(serve.url)
        assert len(after) == 2 and victim not in after, after
        async with fresh_connections() as http:
            for history in calls:
                body = {"model": "m", "messages": history, "tools": TOOLS, "prompt_cache_key": SID}
                async with http.post(f"{serve.url}/v1/chat/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
        got = serve.state.load_state(SID)
        assert got is not None and got[1]["stats"]["calls"] == len(calls)
        serve.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(serve.proc.wait(), 40) == 0
    finally:
        await serve.kill()
        await upstream.close()


# ---------------------------------------------------------------------------
# The fleet's stats on Redis: a replica shows sessions it never served
# ---------------------------------------------------------------------------


async def test_stats_on_redis_show_every_session_of_the_fleet(own_redis_url, tmp_path):
    def replica(name: str) -> Proxy:
        settings = ProxySettings(
            upstream="http://127.0.0.1:9/v1",
            store_url=own_redis_url,
            store_dir=tmp_path / name / "store",
            state_dir=tmp_path / name / "state",
            flush_interval_s=0,
        )
        return Proxy(settings, pilot=TokenPilot(store=own_redis_url))

    a, b = replica("a"), replica("b")
    history = session_calls(1)[0]
    for sid, proxy in (("only-a", a), ("only-b", b), ("both", a), ("both", b)):
        hist, _ = wire.split_per_call(history)
        await asyncio.to_thread(proxy.path.prepare, hist, TOOLS, sid, {})
    b.stats["both"].prompt_tokens += 7  # counted by b after its last write: shown too
    for proxy in (a, b):
        view = proxy.fleet_stats()
        assert set(view) == {"only-a", "only-b", "both"}
        assert view["both"].calls == 2 and view["only-a"].calls == 1 and view["only-b"].calls == 1
    assert b.fleet_stats()["both"].prompt_tokens == 7 and a.fleet_stats()["both"].prompt_tokens == 0
