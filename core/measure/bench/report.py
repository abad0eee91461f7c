"""Bench output: a table like the paper's Table 3, JSON records, and figures."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from .replay import RunResult


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


COLUMNS = (
    "method",
    "kind",
    "cost $",
    "hit M",
    "miss M",
    "write M",
    "out M",
    "hit rate",
    "retention",
    "all",
    "recoverable",
    "peak ctx",
    "breaks",
    "recalls",
    "same",
    "vs vanilla",
    "of oracle",
)
# What fits 100 columns: the decision-making figures (`--wide` shows them all).
NARROW = (
    "method",
    "cost $",
    "vs vanilla",
    "of oracle",
    "hit rate",
    "retention",
    "all",
    "breaks",
    "recalls",
)

LEGEND = """\
cost $       simulated bill: cached + uncached + cache-write + output tokens, at the prices above
vs vanilla   change against sending the agent's own prompt untouched
of oracle    share of the oracle's saving this method saves: (vanilla - it) / (vanilla - oracle)
hit rate     share of prompt tokens served from the provider's prefix cache
retention    share of the ids, paths and numbers that a recorded answer used (first seen in tool
             output) and that are still visible to the model
all          the same, for what was first seen in any earlier message (the agent's own words,
             arguments and heredocs too)
recoverable  visible, or one recall_artifact call away
breaks       calls whose cacheable prefix did not extend the previous call's (each re-prefills)
recalls      calls that paid an extra round trip to recall something hidden (in cost $)
same         a second run of a fresh method rendered every request byte for byte the same
methods      oracle: hindsight, the cheapest schedule of evicting turns after the last call
             that needs them under both rules (TokenPilot's ingestion, a message shown as
             sent where a reduction hid a later need; oracle_raw: the agent's own prompt);
             keep_last_n: our sketch of the paper's baseline; anthropic_context_editing:
             the Messages API's clear_tool_uses_20250919 as documented
             (anthropic_clear_at_least: with its clear_at_least of 5,000 tokens); langchain_*, headroom
             (`headroom proxy`'s default cache mode), headroom_token (its token mode),
             openclaw_context_pruning, lightmem2 (the paper's own code) (--peers):
             those products' own code;
             tokenpilot_global: reduction only; tokenpilot: + eviction
             every B = 3 turns; _B1/_B5/_Binf: other batches (inf: never);
             _immediate: evicts finished tasks without checking later use (the paper's ablation)"""


def _same_bytes(r: dict[str, Any]) -> str:
    return {True: "yes", False: "NO", None: "-"}[r.get("deterministic")]


def _row(r: dict[str, Any], change: str, columns: Sequence[str], share: str = "") -> list[str]:
    cells = {
        "of oracle": share,
        "method": r["method"],
        "cost $": f"{r['cost_usd']:.4f}",
        "hit M": f"{r['hit_tokens'] / 1e6:.3f}",
        "miss M": f"{r['miss_tokens'] / 1e6:.3f}",
        "write M": f"{r['write_tokens'] / 1e6:.3f}",
        "out M": f"{r['output_tokens'] / 1e6:.3f}",
        "hit rate": _pct(r["cache_hit_rate"]),
        "retention": _pct(r["retention"]),
        "all": _pct(r["retention_all"]),
        "recoverable": _pct(r["recoverable"]),
        "peak ctx": f"{r['peak_context_tokens']:,}",
        "breaks": str(r["prefix_breaks"]),
        "recalls": str(r["recalls_charged"]),
        "kind": r.get("kind", ""),
        "same": _same_bytes(r),
        "vs vanilla": change,
    }
    return [cells[c] for c in columns]


def table(
    results: Sequence[RunResult], title: str = "tokenpilot bench", *, columns: Sequence[str] = COLUMNS
) -> Table:
    """Method, cost, hit/miss/output tokens (M), hit rate, retention and the change against vanilla.

    `results` should share one trace set, mode and profile (see `print_table`)."""
    t = Table(title=title, show_lines=False, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in columns:
        t.add_column(col, justify="left" if col == "method" else "right", no_wrap=True)
    recs = [r.record() for r in results]
    base = next((r["cost_usd"] for r in recs if r["method"] == "vanilla"), None)
    best = next((r["cost_usd"] for r in recs if r["method"] == "oracle"), None)
    for r in recs:
        change = "" if not base or r["method"] == "vanilla" else f"{100 * (r['cost_usd'] / base - 1):+.1f}%"
        t.add_row(*_row(r, change, columns, oracle_share(base, best, r)))
    return t


def oracle_share(vanilla: float | None, oracle: float | None, r: dict[str, Any]) -> str:
    """(vanilla - this) / (vanilla - oracle): how much of what could be saved this saves."""
    if vanilla is None or oracle is None or r["method"] in ("vanilla", "oracle") or vanilla <= oracle:
        return ""
    return _pct((vanilla - r["cost_usd"]) / (vanilla - oracle))


def print_table(
    results: Sequence[RunResult],
    console: Console | None = None,
    title: str = "tokenpilot bench",
    *,
    wide: bool = False,
    legend: bool = False,
) -> None:
    """One table per trace set × mode × profile. The narrow one fits 100 columns;
    `wide` shows every column (about 160 wide)."""
    console = console or Console()
    columns = COLUMNS if wide else NARROW
    need = 165 if wide else 100
    if console.width < need and not console.is_terminal:  # piped or captured: no terminal to fit
        console.width = need
    groups: dict[tuple[str, str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.trace_set, r.mode, r.cache_profile), []).append(r)
    for (ts, mode, prof), runs in groups.items():
        console.print(table(runs, f"{title}\n{ts} · {mode} mode · {prof} cache", columns=columns))
        checked = [r for r in runs if r.deterministic is not None]
        if checked and not wide:  # the wide table has its own column
            differ = [r.method for r in checked if not r.deterministic]
            console.print(
                "same bytes on a second run with fresh methods: "
                + (f"NOT for {', '.join(differ)}" if differ else f"yes, all {len(checked)} methods"),
                highlight=False,
                markup=False,
            )
        for r in runs:
            for note in r.notes:
                console.print(note, highlight=False, markup=False)
    if legend:
        console.print(LEGEND, highlight=False, markup=False)


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
            "| method | kind | cost $ | vs vanilla | hit rate | retention | all | recoverable | peak ctx "
            "| breaks | recalls | same |"
        )
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in recs:
            change = (
                "" if not base or r["method"] == "vanilla" else f"{100 * (r['cost_usd'] / base - 1):+.1f}%"
            )
            out.append(
                f"| {r['method']} | {r.get('kind', '')} | {r['cost_usd']:.4f} | {change} | {_pct(r['cache_hit_rate'])} | {_pct(r['retention'])} "
                f"| {_pct(r['retention_all'])} | {_pct(r['recoverable'])} | {r['peak_context_tokens']:,} | {r['prefix_breaks']} "
                f"| {r['recalls_charged']} | {_same_bytes(r)} |"
            )
        out.append("")
    return "\n".join(out)


def write_json(results: Sequence[RunResult], path: str | Path) -> None:
    """One record per method × mode × profile × trace set (schema: README, `tokenpilot bench`)."""
    Path(path).write_text(json.dumps([r.record() for r in results], indent=2) + "\n")


def _styles(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """One distinct look per method: 20 colours, then line styles, so no two series share one.
    Vanilla is always black and solid, TokenPilot thick."""
    import matplotlib

    tab20 = list(matplotlib.colormaps["tab20"].colors)
    palette = tab20[0::2] + tab20[1::2]  # the strong half of tab20 first
    dashes = ["-", "--", "-.", ":"]
    out: dict[str, dict[str, Any]] = {}
    k = 0
    for name in names:
        if name == "vanilla":
            out[name] = {"color": "black", "linestyle": "-", "linewidth": 1.6}
            continue
        out[name] = {
            "color": palette[k % len(palette)],
            "linestyle": dashes[(k // len(palette)) % len(dashes)],
            "linewidth": 2.0 if name == "tokenpilot" else 1.0,
        }
        k += 1
    return out


def write_plots(results: Sequence[RunResult], outdir: str | Path) -> list[Path]:
    """Per-call context size (paper Fig. 3), per-task hit rate (Fig. 4), the B sweep with its
    retention (Fig. 6). Legends sit outside the axes, so they never cover the data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    groups: dict[tuple[str, str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.trace_set, r.mode, r.cache_profile), []).append(r)
    for (ts, mode, prof), runs in groups.items():
        stem = f"{_slug(ts)}_{mode}_{prof}"
        style = _styles([r.method for r in runs])
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for r in runs:
            ax.plot([c.prompt_tokens for c in r.calls], label=r.method, **style[r.method])
        ax.set(
            xlabel="model call",
            ylabel="prompt tokens",
            title=f"Context size per call — {ts} ({mode}, {prof})",
        )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        written.append(_save(fig, out / f"context_{stem}.png"))

        fig, ax = plt.subplots(figsize=(10, 4.5))
        width = 0.8 / max(len(runs), 1)
        n_tasks = 0
        for k, r in enumerate(runs):
            rates = _task_hit_rates(r)
            n_tasks = max(n_tasks, len(rates))
            ax.bar(
                [x + k * width for x in range(len(rates))],
                rates,
                width=width,
                label=r.method,
                color=style[r.method]["color"],
            )
        ax.set(
            xlabel="task",
            ylabel="cache hit rate",
            title=f"Hit rate per task — {ts} ({mode}, {prof})",
            ylim=(0, 1),
        )
        centre = 0.4 - width / 2
        ax.set_xticks([x + centre for x in range(n_tasks)], [str(x + 1) for x in range(n_tasks)])
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
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
            fig, ax = plt.subplots(figsize=(6.5, 4))
            labels = [{"tokenpilot": "B=3"}.get(n, n.replace("tokenpilot_B", "B=")) for n, _ in sweep]
            ax.plot(labels, [rec["cost_usd"] for _, rec in sweep], marker="o", color="tab:blue")
            ax.set(xlabel="estimator batch B", title=f"B sweep — {ts} ({mode}, {prof})")
            ax.set_ylabel("cost $", color="tab:blue")
            ret = ax.twinx()  # what each batch costs in fidelity, beside what it saves
            ret.plot(labels, [100 * rec["retention"] for _, rec in sweep], marker="s", color="tab:orange")
            ret.set_ylabel("retention %", color="tab:orange")
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
