"""Web pages through the default facade: what an agent that fetches them is sent.

Each of the 130 Readability pages in ../shared/html/readability goes in as one `web_fetch`
tool result through `TokenPilot().prepare`, as a new user's agent would send it; the
rendered tool message is compared with the page's main content (Readability's
expected.html): its size against the page, and the share of the content's word 4-grams
still in the render, in order (tests/html_metrics.py `grams_kept`). A page small enough to
be sent whole counts as fully kept. Prints the page-by-page table (worst first), the
medians and p10, and the worst pages.

    .venv/bin/python benchmarks/bench_pages.py [--worst N] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from contract import render_through_facade  # noqa: E402
from html_metrics import grams_kept, visible_text  # noqa: E402

from tokenpilot import TokenPilot  # noqa: E402
from tokenpilot.store.artifacts import ArtifactStore  # noqa: E402

SHARED = Path(os.environ.get("TOKENPILOT_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "html" / "readability"


def measure() -> list[tuple[str, int, int, float, float]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tp = TokenPilot(store=ArtifactStore(tmp), lifecycle=False)
        for d in sorted(p for p in CORPUS.iterdir() if (p / "source.html").is_file()):
            html = (d / "source.html").read_text(encoding="utf-8", errors="surrogateescape")
            article = visible_text(
                (d / "expected.html").read_text(encoding="utf-8", errors="surrogateescape")
            )
            args = json.dumps({"url": f"https://x/{d.name}"})
            out = render_through_facade(tp, f"page-{d.name}", "web_fetch", args, html)
            kept = 1.0 if out == html else grams_kept(article, out)
            rows.append((d.name, len(html), len(out), len(out) / len(html), kept))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worst", type=int, default=10, help="how many worst pages to name")
    ap.add_argument("--markdown", action="store_true", help="print the page-by-page table too")
    args = ap.parse_args(argv)
    if not CORPUS.is_dir():
        print(f"{CORPUS} not found: the shared corpus is only present in CI and dev checkouts")
        return 1
    rows = measure()
    rows.sort(key=lambda r: (r[4], r[0]))
    kept = sorted(r[4] for r in rows)
    sizes = [r[3] for r in rows]
    print(
        f"{len(rows)} pages: median size {statistics.median(sizes):.4f}, median kept "
        f"{statistics.median(kept):.4f}, p10 kept {kept[len(kept) // 10]:.4f}, min {kept[0]:.4f}"
    )
    print(f"\nworst {args.worst} by kept:")
    for name, src, out, size, k in rows[: args.worst]:
        print(f"  {name:40s} kept {k:.3f}  size {size:.3f}  ({src:,} -> {out:,} chars)")
    if args.markdown:
        print("\n| page | page chars | sent chars | size | 4-grams kept |\n|---|---|---|---|---|")
        for name, src, out, size, k in rows:
            print(f"| {name} | {src:,} | {out:,} | {size:.3f} | {k:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
