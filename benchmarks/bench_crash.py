"""SIGKILL a real `tokenpilot serve` in the middle of 200 concurrent streams over 20 sessions.

Starts the proxy and a fake upstream, kills the proxy when half of the calls have
reached the upstream, restarts it on the same state and store, and lets every
conversation go on. Prints lost artifacts and prefix changes across the restart (both
must be 0), the error count (calls cut by the kill) and the restart time.

    .venv/bin/python benchmarks/bench_crash.py [--sessions 20] [--streams 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # drills: the tests' shared helpers

from drills.crashdrill import crash_drill  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--streams", type=int, default=200)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokenpilot-crash-") as d:
        t0 = time.perf_counter()
        r = asyncio.run(crash_drill(d, sessions=args.sessions, streams=args.streams))
        wall = time.perf_counter() - t0
    print(
        f"streams sent            {r.requests} ({args.sessions} sessions, kill at {r.upstream_before_kill})"
    )
    print(f"answered / errors       {r.answered} / {r.errors}  (errors: calls cut by the kill)")
    print(f"artifacts checked/lost  {r.artifacts_checked} / {r.artifacts_lost}")
    print(
        f"sessions checked        {r.sessions_checked}, prefix changes across the restart: {r.prefix_changes}"
    )
    print(f"restart to /health      {r.restart_s:.2f} s; whole drill {wall:.1f} s")
    for line in r.problems[:10]:
        print("  problem:", line)
    return 1 if r.prefix_changes or r.artifacts_lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
