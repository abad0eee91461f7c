"""One session sent round-robin to `tokenpilot serve` replicas on one Redis.

Shared by `tests/test_fleet_lifecycle.py` (which waits for every estimator run, for
byte-identity with one replica) and `benchmarks/bench_round_robin.py` (which does not,
as a load balancer would not). The session is synthetic: one-shot tasks, each reading
two big files, so the offline estimator retires finished tasks and the cost gate lets
their eviction through.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tokenpilot_proxy import Proxy, ProxySettings, wire
from tokenpilot_proxy.demo import FakeUpstream

from .crashdrill import ServeProcess, free_port

SESSION = "fleet-session"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write",
            "description": "write a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            },
        },
    },
]


def file_text(task: int, part: int, lines: int = 160) -> str:
    """A big, unique file body (hex rows read like data: many tokens, no repetition)."""
    return "".join(
        f"{row:04d} {hashlib.sha256(f'{task}/{part}/{row}'.encode()).hexdigest()}\n" for row in range(lines)
    )


def session_calls(tasks: int) -> list[list[dict[str, Any]]]:
    """The history of each model call of a session: per task a user request, two reads
    (each answered by the next call) and a final answer; 3 calls a task."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant. Use the tools."}
    ]
    calls: list[list[dict[str, Any]]] = []
    for t in range(tasks):
        history.append({"role": "user", "content": f"Task {t}: summarise report_{t}.csv into summary_{t}.md"})
        calls.append(list(history))
        for part in range(2):
            cid = f"call_{t}_{part}"
            args = json.dumps({"path": f"report_{t}_{part}.csv"})
            history.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": cid, "type": "function", "function": {"name": "read", "arguments": args}}
                    ],
                }
            )
            history.append({"role": "tool", "tool_call_id": cid, "content": file_text(t, part)})
            calls.append(list(history))
        history.append({"role": "assistant", "content": f"Wrote summary_{t}.md."})
    return calls


def prefix_breaks(bodies: list[Any]) -> list[int]:
    """Calls whose messages do not extend the previous call's (here: the evictions)."""
    return [
        n
        for n in range(1, len(bodies))
        if bodies[n]["messages"][: len(bodies[n - 1]["messages"])] != bodies[n - 1]["messages"]
    ]


def namespaced(url: str) -> str:
    """`url` with a namespace of its own: one fleet's keys, unseen by every other."""
    return f"{url}{'&' if '?' in url else '?'}namespace=fleet-{uuid.uuid4().hex[:12]}"


def replica_settings(url: str, folder: Path) -> ProxySettings:
    """An in-process replica's settings as `serve --store url` builds them, its own
    folders under `folder`, no periodic flush (the tests decide when state is written)."""
    folder.mkdir(parents=True, exist_ok=True)
    return ProxySettings(
        upstream="http://127.0.0.1:9/v1",
        store_url=url,
        store_dir=folder / "store",
        state_dir=folder / "state",
        flush_interval_s=0,
    )


def prepare_call(proxy: Proxy, history: list[dict[str, Any]]) -> tuple[bytes, str | None]:
    """One call of the session through an in-process replica: the bytes it sends upstream,
    and why its prefix broke (None when it did not)."""
    body = {"model": "m", "messages": history, "tools": TOOLS, "prompt_cache_key": SESSION}
    hist, per_call = wire.split_per_call(body["messages"])
    prepared = proxy.path.prepare(hist, body["tools"], SESSION, {})
    return wire.encode(wire.upstream_body(body, prepared, per_call, SESSION)), prepared.stats.prefix_break


async def settled(store: Any, timeout_s: float = 60.0) -> None:
    """Until the session's stored state holds no claimed estimator job: its claimant has
    delivered the result into the shared state (under the session lock)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = await asyncio.to_thread(store.load_state, SESSION)
        if got is None or got[1].get("session") is None or got[1]["session"]["lifecycle"]["job"] is None:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the estimator's result did not reach the store within {timeout_s:g} s")
        await asyncio.sleep(0.01)


async def round_robin(
    redis_url: str,
    replicas: int,
    calls: list[list[dict[str, Any]]],
    workdir: Path,
    *,
    settle: bool,
    env: dict[str, str] | None = None,
) -> list[bytes]:
    """Start `replicas` serve processes on a fresh namespace of `redis_url`, send call n to
    replica n mod `replicas` (waiting for each estimator run when `settle`), and return
    the bodies the upstream received, in order."""
    from tokenpilot.store.redis import RedisStore

    url = namespaced(redis_url)
    store = RedisStore(url)
    upstream = FakeUpstream()
    await upstream.start()
    procs: list[ServeProcess] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
            for i in range(replicas):
                work = workdir / f"replica{i}-{uuid.uuid4().hex[:6]}"
                work.mkdir(parents=True)
                p = ServeProcess(upstream.url, free_port(), work, env)
                p.cmd += ["--store", url]
                procs.append(p)
                await p.start(http)
            for n, history in enumerate(calls):
                body = {"model": "m", "messages": history, "tools": TOOLS, "prompt_cache_key": SESSION}
                async with http.post(f"{procs[n % replicas].url}/v1/chat/completions", json=body) as r:
                    if r.status != 200:
                        raise RuntimeError(f"call {n}: HTTP {r.status}: {await r.text()}")
                    await r.read()
                if settle:
                    await settled(store)
            for p in procs:
                await p.stop()
        return [r.raw for r in upstream.chat_requests()]
    finally:
        for p in procs:
            await p.kill()
        await upstream.close()
