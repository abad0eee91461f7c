"""The retention dial's curve: cost against retention, one panel per recorded set, every
method of the bench a mark, TokenPilot's three positions joined by a line.

    tokenpilot bench ../shared/traces/<set> --peers --json out/<set>.json   # per set
    python benchmarks/plot_dial.py out/*.json --out docs/dial.png

The x axis is the retention under both of the bench's rules (the lower of `retention`,
needs first seen in a tool output, and `retention_all`, needs first seen in any message);
the y axis the cost against vanilla. The dashed line is the 95% the default keeps.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DIAL = ("tokenpilot_all", "tokenpilot", "tokenpilot_lean")
X_FLOOR, Y_CEILING = 0.85, 1.05  # what is drawn: a method beyond them is listed, not drawn
LABELLED = {  # the methods named on the chart (the rest are grey dots)
    "oracle": "oracle",
    "keep_last_n": "keep_last_n",
    "anthropic_context_editing": "ctx editing",
    "anthropic_clear_at_least": "ctx editing (clear_at_least)",
    "headroom": "headroom",
    "langchain_summarization": "langchain summarization",
    "langchain_clear_30k": "langchain clear 30k",
    "tokenpilot_global": "tokenpilot (no eviction)",
}
LABELS = {"tokenpilot_all": "all", "tokenpilot": "balanced", "tokenpilot_lean": "lean"}


def load(paths: list[str]) -> dict[str, list[dict]]:
    """Bench records by trace set (one JSON file may hold several sets)."""
    sets: dict[str, list[dict]] = {}
    for p in paths:
        for r in json.loads(Path(p).read_text()):
            if r.get("mode", "continuous") == "continuous":
                sets.setdefault(r["trace_set"], []).append(r)
    return sets


def points(records: list[dict]) -> list[tuple[str, float, float]]:
    """(method, retention under both rules, cost × vanilla) of every method but vanilla."""
    vanilla = next(r["cost_usd"] for r in records if r["method"] == "vanilla")
    return [
        (r["method"], min(r["retention"], r["retention_all"]), r["cost_usd"] / vanilla)
        for r in records
        if r["method"] != "vanilla"
    ]


def plot(sets: dict[str, list[dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(sets)
    cols = 3
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        pts = points(sets[name])
        xmin = max(min(x for _, x, _ in pts), X_FLOOR) - 0.01
        ymin, ymax = min(y for _, _, y in pts) - 0.03, Y_CEILING
        off = []
        for method, x, y in pts:
            if method in DIAL:
                continue
            if y > ymax or x < xmin:
                off.append(f"{method} {y:.2f}× at {x:.0%}")
                continue
            marker, color = ("*", "black") if method.startswith("oracle") else ("o", "0.55")
            ax.scatter([x], [y], marker=marker, color=color, s=60 if marker == "*" else 22, zorder=2)
            if method in LABELLED:
                ax.annotate(
                    LABELLED[method],
                    (x, y),
                    fontsize=6,
                    color="0.3",
                    xytext=(3, 2),
                    textcoords="offset points",
                )
        if off:
            ax.text(
                0.02,
                0.98,
                "off the chart:\n" + "\n".join(off),
                transform=ax.transAxes,
                fontsize=5.5,
                va="top",
                color="0.4",
            )
        ax.set_xlim(xmin, 1.005)
        ax.set_ylim(ymin, ymax)
        dial = [next((p for p in pts if p[0] == m), None) for m in DIAL]
        dial = [p for p in dial if p is not None]
        ax.plot([p[1] for p in dial], [p[2] for p in dial], "-o", color="tab:blue", zorder=3, lw=2)
        for method, x, y in dial:
            ax.annotate(
                LABELS[method],
                (x, y),
                fontsize=8,
                color="tab:blue",
                xytext=(4, -10),
                textcoords="offset points",
            )
        ax.axvline(0.95, ls="--", lw=0.8, color="tab:red")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("retention, both rules", fontsize=8)
        ax.set_ylabel("cost × vanilla", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle("TokenPilot's dial (blue: all → balanced → lean) beside every other method", fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+", help="tokenpilot bench --json files")
    ap.add_argument("--out", default="docs/dial.png")
    args = ap.parse_args(argv)
    plot(load(args.json), Path(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
