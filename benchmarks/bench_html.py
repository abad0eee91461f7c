"""Benchmark html_slimming on the 130 Readability test pages in ../shared/html/readability.

Run: .venv/bin/python benchmarks/bench_html.py [--worst N] [--quiet]

Prints, per page, the output/source size ratio and the retention of expected.html's
words (in order, exact LCS; see tests/html_metrics.py), then the medians, the worst
pages by retention, and the throughput of HtmlSlimming over all sources in MB/s
(median of 3 timed runs). Targets: median size <= 10%, median retention >= 98%, >= 20 MB/s.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from html_metrics import retention, visible_text, words  # noqa: E402

from tokenpilot.passes.base import PassContext  # noqa: E402
from tokenpilot.passes.html import HtmlSlimming  # noqa: E402

SHARED = Path(os.environ.get("TOKENPILOT_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "html" / "readability"


def load_pages() -> list[tuple[str, str, str]]:
    """(name, source.html, expected.html) for every page folder, sorted by name."""
    pages = []
    for d in sorted(p for p in CORPUS.iterdir() if (p / "source.html").is_file()):
        src = (d / "source.html").read_text(encoding="utf-8", errors="surrogateescape")
        exp = (d / "expected.html").read_text(encoding="utf-8", errors="surrogateescape")
        pages.append((d.name, src, exp))
    return pages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worst", type=int, default=10, help="how many worst pages to list")
    ap.add_argument("--quiet", action="store_true", help="skip the per-page table")
    args = ap.parse_args()
    if not CORPUS.is_dir():
        print(f"{CORPUS} not found: the shared corpus is only present in CI and dev checkouts")
        return 1
    pages = load_pages()
    slim = HtmlSlimming()
    ctx = PassContext(tool_name="web_fetch")

    rows = []
    for name, src, exp in pages:
        out = slim.apply(src, ctx)
        ratio = len(out) / len(src)
        ret = retention(words(visible_text(exp)), words(out))
        rows.append((name, len(src), len(out), ratio, ret))
    if not args.quiet:
        print(f"{'page':45s} {'source':>10s} {'output':>9s} {'size':>7s} {'retain':>7s}")
        for name, n_src, n_out, ratio, ret in rows:
            print(f"{name:45s} {n_src:10,d} {n_out:9,d} {ratio:7.2%} {ret:7.2%}")

    total = sum(len(src) for _, src, _ in pages)
    walls, cpus = [], []
    for _ in range(3):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        for _, src, _ in pages:
            slim.apply(src, ctx)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    secs, cpu = statistics.median(walls), statistics.median(cpus)
    untouched = [name for (name, n_src, n_out, _r, _k) in rows if n_src == n_out]

    med_size = statistics.median(r[3] for r in rows)
    med_ret = statistics.median(r[4] for r in rows)
    print()
    print(f"pages: {len(rows)}   source chars: {total:,}")
    print(f"median size ratio: {med_size:.2%}   (target <= 10%)")
    print(f"median retention:  {med_ret:.2%}   (target >= 98%)")
    print(f"mean retention:    {statistics.fmean(r[4] for r in rows):.2%}")
    print(f"throughput: {total / secs / 1e6:.1f} MB/s  ({secs:.2f} s per pass over all sources, median of 3)")
    print(
        f"            {total / cpu / 1e6:.1f} MB/s of CPU time (less sensitive to other load on the machine)"
    )
    print(
        f"left unchanged ({len(untouched)}, shorter than min_chars={slim.min_chars} or not smaller): {untouched}"
    )
    print(f"\nworst {args.worst} pages by retention:")
    for name, _src, _out, ratio, ret in sorted(rows, key=lambda r: (r[4], r[0]))[: args.worst]:
        print(f"  {name:45s} retain {ret:7.2%}  size {ratio:7.2%}")
    print(f"\nworst {args.worst} pages by size ratio:")
    for name, _src, _out, ratio, ret in sorted(rows, key=lambda r: (-r[3], r[0]))[: args.worst]:
        print(f"  {name:45s} size {ratio:7.2%}  retain {ret:7.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
