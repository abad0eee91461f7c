"""Time of `recall_artifact` with a pattern on a 10 MB original, for hostile and normal patterns.

A model-written pattern must not hang the process (issue: `(a+)+$` froze the proxy
under Python's `re`). Target: every pattern returns within 1 s. Prints the median of
a few runs per pattern and the worst case; no asserts.

    .venv/bin/python benchmarks/bench_recall.py
"""

from __future__ import annotations

import random
import statistics
import time

from tokenpilot.store.artifacts import ArtifactStore

RUNS = 3
TARGET_BYTES = 10 * 2**20


def artifact() -> str:
    """10 MB of log lines, 'a'*40+'b' lines, minified-page lines and random a/b lines."""
    rng = random.Random(7)
    parts: list[str] = []
    size = 0
    i = 0
    while size < TARGET_BYTES:
        i += 1
        if i % 2000 == 0:
            line = "<div class='x'>" + "<p>filler text</p>" * 8000 + "</div>"  # a 144 KB line
        elif i % 100 < 3:
            line = "".join(rng.choice("ab") for _ in range(2000))
        elif i % 100 < 60:
            line = f"2026-01-02T03:04:{i % 60:02d} INFO worker {i % 17} processed item {i} key=value{i % 9}"
        else:
            line = "a" * 40 + "b"
        parts.append(line + "\n")
        size += len(line) + 1
    return "".join(parts)


PATTERNS = [
    r"(a+)+$",
    r"(a|aa)*c",
    r"(x+x+)+y",
    r".*.*.*=.*",
    r"[ab]*a[ab]{20}c",
    r"\1",
    r"(?=a)",
    "[",
    "|".join(f"word{i:04d}" for i in range(222)),  # 1,997 chars: over the 1,000-char limit
    "|".join(f"w{i:03d}" for i in range(200))[:999],  # a 999-char alternation
    "processed",
    r"item 12345\b",
    r"^2026-\S+ INFO worker 3 ",
    r"(?i)FILLER",
    ".",  # every line matches: the cost of formatting 10 MB of results
]


def main() -> None:
    text = artifact()
    store = ArtifactStore()
    aid = store.put("bench", text)
    print(f"artifact: {len(text.encode()) / 2**20:.1f} MB, {text.count(chr(10)):,} lines")
    worst = (0.0, "")
    for pattern in PATTERNS:
        times = []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            result = store.recall("bench", aid, pattern=pattern)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        worst = max(worst, (max(times), pattern))
        label = pattern if len(pattern) <= 40 else f"{pattern[:30]}… ({len(pattern):,} chars)"
        note = result.note if len(result.note) <= 150 else result.note[:147] + "..."
        print(f"{med:8.3f} s  {label!r:48}  {note}")
    print(f"worst: {worst[0]:.3f} s for {worst[1][:40]!r}")


if __name__ == "__main__":
    main()
