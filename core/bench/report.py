"""Bench output: a table like the paper's Table 3, JSON records, and figures."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .replay import RunResult


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


COLUMNS = (
    "method",
    "cost $",
    "hit M",
    "miss M",
    "write M",
    "out M",
    "hit rate",
    "retention",
    "recoverable",
    "peak ctx",
    "breaks",
    "recalls",
    "vs vanilla",
)


def table(results: Sequence[RunResult], title: str = "tokenpilot bench") -> Table:
    """Method, cost, hit/miss/output tokens (M), hit rate, retention and the change against vanilla.

    `results` should share one trace set, mode and profile (see `print_table`)."""
    t = Table(title=title, show_lines=False)
    for col in COLUMNS:
        t.add_column(col, justify="left" if col == "method" else "right", no_wrap=True)
    recs = [r.record() for r in results]
    base = next((r["cost_usd"] for r in recs if r["method"] == "vanilla"), None)
    for r in recs:
        change = "" if not base or r["method"] == "vanilla" else f"{100 * (r['cost_usd'] / base - 1):+.1f}%"
        t.add_row(
            r["method"],
            f"{r['cost_usd']:.4f}",
            f"{r['hit_tokens'] / 1e6:.3f}",
            f"{r['miss_tokens'] / 1e6:.3f}",
            f"{r['write_tokens'] / 1e6:.3f}",
            f"{r['output_tokens'] / 1e6:.3f}",
            _pct(r["cache_hit_rate"]),
            _pct(r["retention"]),
            _pct(r["recoverable"]),
            f"{r['peak_context_tokens']:,}",
            str(r["prefix_breaks"]),
            str(r["recalls_charged"]),
            change,
        )
    return t


def print_table(
    results: Sequence[RunResult], console: Console | None = None, title: str = "tokenpilot bench"
) -> None:
    """One table per trace set × mode × profile, wide enough not to truncate."""
    console = console or Console()
    if console.width < 150 and not console.is_terminal:
        console.width = 150
    groups: dict[tuple[str, str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.trace_set, r.mode, r.cache_profile), []).append(r)
    for (ts, mode, prof), runs in groups.items():
        console.print(table(runs, f"{title}\n{ts} · {mode} mode · {prof} cache"))


def markdown(results: Sequence[RunResult]) -> str:
    """The table as Markdown (one block per trace set × mode × profile), for READMEs and PRs."""
    out: list[str] = []
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r.trace_set, r.mode, r.cache_profile), []).append(r.record())
    for (ts, mode, prof), recs in groups.items():
        base = next((r["cost_usd"] for r in recs if r["method"] == "vanilla"), None)
        out.append(f"**{ts}** · {mode} · {prof} cache\n")
        out.append(
            "| method | cost $ | vs vanilla | hit rate | retention | recoverable | peak ctx | breaks | recalls |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in recs:
            change = (
                "" if not base or r["method"] == "vanilla" else f"{100 * (r['cost_usd'] / base - 1):+.1f}%"
            )
            out.append(
                f"| {r['method']} | {r['cost_usd']:.4f} | {change} | {_pct(r['cache_hit_rate'])} | {_pct(r['retention'])} "
                f"| {_pct(r['recoverable'])} | {r['peak_context_tokens']:,} | {r['prefix_breaks']} "
                f"| {r['recalls_charged']} |"
            )
        out.append("")
    return "\n".join(out)


def write_json(results: Sequence[RunResult], path: str | Path) -> None:
    """One record per method × mode × profile × trace set (schema: README, `tokenpilot bench`)."""
    Path(path).write_text(json.dumps([r.record() for r in results], indent=2) + "\n")


def write_plots(results: Sequence[RunResult], outdir: str | Path) -> list[Path]:
    """Per-call context size (paper Fig. 3), per-task hit rate (Fig. 4), the B sweep (Fig. 6)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    groups: dict[tuple[str, str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.trace_set, r.mode, r.cache_profile), []).append(r)
    for (ts, mode, prof), runs in groups.items():
        stem = f"{_slug(ts)}_{mode}_{prof}"
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for r in runs:
            ax.plot([c.prompt_tokens for c in r.calls], label=r.method, linewidth=1)
        ax.set(
            xlabel="model call",
            ylabel="prompt tokens",
            title=f"Context size per call — {ts} ({mode}, {prof})",
        )
        ax.legend(fontsize=7, ncol=2)
        written.append(_save(fig, out / f"context_{stem}.png"))

        fig, ax = plt.subplots(figsize=(9, 4.5))
        width = 0.8 / max(len(runs), 1)
        for k, r in enumerate(runs):
            rates = _task_hit_rates(r)
            ax.bar([x + k * width for x in range(len(rates))], rates, width=width, label=r.method)
        ax.set(
            xlabel="task",
            ylabel="cache hit rate",
            title=f"Hit rate per task — {ts} ({mode}, {prof})",
            ylim=(0, 1),
        )
        ax.legend(fontsize=7, ncol=2)
        written.append(_save(fig, out / f"task_hit_rate_{stem}.png"))

        sweep = [
            (r.method, r.record())
            for r in runs
            if r.method.startswith("tokenpilot")
            and r.method not in ("tokenpilot_global", "tokenpilot_immediate")
        ]
        if len(sweep) > 1:
            order = {"tokenpilot_B1": 1, "tokenpilot": 3, "tokenpilot_B5": 5, "tokenpilot_Binf": 99}
            sweep.sort(key=lambda x: order.get(x[0], 50))
            fig, ax = plt.subplots(figsize=(6, 4))
            labels = [{"tokenpilot": "B=3"}.get(n, n.replace("tokenpilot_B", "B=")) for n, _ in sweep]
            ax.plot(labels, [rec["cost_usd"] for _, rec in sweep], marker="o")
            ax.set(xlabel="estimator batch B", ylabel="cost $", title=f"B sweep — {ts} ({mode}, {prof})")
            written.append(_save(fig, out / f"b_sweep_{stem}.png"))
    return written


def _task_hit_rates(r: RunResult) -> list[float]:
    per: dict[tuple[str, int], list[int]] = {}
    for c in r.calls:
        acc = per.setdefault((c.session_id.split("#")[0], c.task), [0, 0])
        acc[0] += c.hit_tokens
        acc[1] += c.prompt_tokens
    return [h / p if p else 0.0 for h, p in per.values()]


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)[:60]


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
