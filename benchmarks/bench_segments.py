"""The segment rules' cost per batch as a session grows: `evictable_bundles` on
generated turn records (reads, writes, edits, searches and commands over 50 files, a
few failed or repeated), median of 5 runs per size, and that cost per turn.

A flat cost per turn means a batch costs about the turns it reads: a session of
thousands of turns is planned as cheaply per turn as a short one.

    .venv/bin/python benchmarks/bench_segments.py [--sizes 100,1000,3000,10000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from tokenpilot.lifecycle.segments import BundleRecord, SegmentRules, evictable_bundles

FILES = [f"src/m{k}.py" for k in range(40)] + [f"/repo/src/m{k}.py" for k in range(10)]


def records(n: int, seed: int = 1) -> list[BundleRecord]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        kind = rnd.choice(["read", "write", "edit", "search", "command", "none"])
        paths = tuple(rnd.sample(FILES, rnd.randint(0, 2))) if kind != "none" else ()
        out.append(
            BundleRecord(
                turn_id=f"t{i}",
                opens_with_user=i % 20 == 0,
                has_calls=kind != "none",
                kind=kind,
                paths=paths,
                whole_read=rnd.random() < 0.5,
                call_key=f"{kind}:{rnd.randint(0, 60)}",
                uses=frozenset({f"m{rnd.randint(0, 40)}.py"}),
                said=frozenset(),
                provides=frozenset({f"id{i}"}),
                hits=frozenset(paths) if kind == "search" else frozenset(),
                failed=rnd.random() < 0.05,
                repeat=rnd.random() < 0.05,
                tokens=rnd.randint(100, 5000),
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,3000,10000")
    args = ap.parse_args()
    rules = SegmentRules()
    print(f"{'turns':>7} {'ms per batch':>13} {'µs per turn':>12} {'retired':>8}")
    for n in (int(x) for x in args.sizes.split(",")):
        recs = records(n)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            retired = evictable_bundles(recs, rules)
            times.append(time.perf_counter() - t)
        ms = statistics.median(times) * 1000
        print(f"{n:>7} {ms:>13.2f} {ms * 1000 / n:>12.2f} {len(retired):>8}")


if __name__ == "__main__":
    main()
