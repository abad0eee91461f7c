"""Per-session figures of a bench run: a rule that helps one set on average can still
hurt one session (above vanilla, or below the retention floor); this table shows it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table

from .replay import RunResult


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One method on one session of one trace set, against vanilla on the same session."""

    trace_set: str
    session_id: str
    method: str
    calls: int
    cost_usd: float
    vs_vanilla: float | None  # cost / vanilla's cost on this session
    retention: float  # visible needs / needs (1.0 without needs)
    breaks: int
    recalls: int


def session_rows(results: Sequence[RunResult]) -> list[SessionRow]:
    """Rows per trace set × mode × profile × session × method, in the results' order."""
    vanilla: dict[tuple[str, str, str, str], float] = {}
    for r in results:
        if r.kind == "vanilla":
            for sid, cost in _costs(r).items():
                vanilla[(r.trace_set, r.mode, r.cache_profile, sid)] = cost
    rows = []
    for r in results:
        by: dict[str, list] = {}
        for c in r.calls:
            by.setdefault(c.session_id, []).append(c)
        for sid, calls in by.items():
            cost = sum(c.cost_usd for c in calls)
            base = vanilla.get((r.trace_set, r.mode, r.cache_profile, sid))
            needs = sum(c.needs for c in calls)
            rows.append(
                SessionRow(
                    trace_set=r.trace_set,
                    session_id=sid,
                    method=r.method,
                    calls=len(calls),
                    cost_usd=cost,
                    vs_vanilla=cost / base if base else None,
                    retention=sum(c.visible for c in calls) / needs if needs else 1.0,
                    breaks=sum(c.prefix_break for c in calls),
                    recalls=sum(c.recall_charged for c in calls),
                )
            )
    return rows


def _costs(r: RunResult) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in r.calls:
        out[c.session_id] = out.get(c.session_id, 0.0) + c.cost_usd
    return out


def print_sessions(results: Sequence[RunResult], console: Console | None = None) -> None:
    """One table per trace set: a row per session, a column group per method."""
    console = console or Console()
    if not console.is_terminal:  # piped or captured: session names in full
        console.width = max(console.width, 180)
    rows = session_rows(results)
    methods = list(dict.fromkeys(r.method for r in rows))
    for ts in dict.fromkeys(r.trace_set for r in rows):
        t = Table(title=f"per session · {ts} (cost vs vanilla, retention)", box=box.SIMPLE_HEAD)
        t.add_column("session", no_wrap=True)
        t.add_column("calls", justify="right")
        for m in methods:
            t.add_column(m, justify="right", no_wrap=True)
        cells: dict[str, dict[str, SessionRow]] = {}
        for r in rows:
            if r.trace_set == ts:
                cells.setdefault(r.session_id, {})[r.method] = r
        for sid, by in cells.items():
            first = next(iter(by.values()))
            row = [_short(sid), str(first.calls)]
            for m in methods:
                x = by.get(m)
                row.append("-" if x is None else f"{_ratio(x.vs_vanilla)}× {100 * x.retention:5.1f}%")
            t.add_row(*row)
        console.print(t)


def _short(sid: str, width: int = 110) -> str:
    """A session id that fits: the run folder's start (where runs differ), the file name whole."""
    if len(sid) <= width or "/" not in sid:
        return sid
    head, tail = sid.rsplit("/", 1)
    keep = max(width - len(tail) - 2, 8)
    return f"{head[:keep]}…/{tail}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
