"""What a session's stats keep over time: a bounded series, break diagnoses, artifact ids.

The proxy calls `note_prepared` once per prepared call. Everything lands in the
session's `SessionStats`, which the proxy already saves with the session's state: the
dashboard draws from it, `tokenpilot doctor` reads it back from the state directory, and
replicas sharing a store see each other's. Every list is bounded whatever the session's
length: the series halves its resolution when full (its points are cumulative
snapshots, so dropping every other one keeps the curve and still spans the whole
session), and breaks and artifact ids keep their newest few.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from tokenpilot import Prepared
from tokenpilot.messages.model import tool_name
from tokenpilot_proxy.breaks import diagnose
from tokenpilot_proxy.sessions import SessionStats

SERIES_POINTS = 120
KEPT_BREAKS = 20
KEPT_ARTIFACTS = 20
MODEL_CHARS = 100  # a model name longer than this is cut (it is a label, not a key)
# what each point of `SessionStats.series` holds, in order (all cumulative but `t`)
POINT = (
    "t",
    "calls",
    "prompt_tokens",
    "cached_tokens",
    "tokens_sent",
    "tokens_raw",
    "evictions",
    "recalls",
    "prefix_breaks",
)


def note_prepared(
    stats: SessionStats,
    prepared: Prepared,
    prev_stable: Sequence[Any] | None,
    prev_tools: Sequence[str] | None,
    now: float | None = None,
) -> None:
    """Count one prepared call: tokens, artifacts, store refusals, a break with its diagnosis."""
    now = time.time() if now is None else now
    st = prepared.stats
    stats.tokens_raw += st.raw_tokens
    stats.tokens_sent += st.tokens
    if st.unstored:
        stats.store_errors += 1
    stats.recalls += st.recalled  # the agent's recalls through the MCP server (the proxy ran none)
    for aid in st.artifacts:
        if aid not in stats.artifacts:
            stats.artifacts.append(aid)
    del stats.artifacts[:-KEPT_ARTIFACTS]
    if st.prefix_break is not None:
        if st.prefix_break == "eviction":
            stats.evictions += 1
        stats.breaks.append(
            diagnose(
                st.prefix_break,
                prev_stable,
                prepared.stable_messages,
                at=st.prefix_break_at,
                prev_tools=prev_tools,
                tools=tool_names(prepared.tools),
                call=stats.calls,
                now=now,
            )
        )
        del stats.breaks[:-KEPT_BREAKS]
    add_point(stats, now)


def note_model(stats: SessionStats, model: Any) -> None:
    if isinstance(model, str) and model.strip():
        stats.model = model.strip()[:MODEL_CHARS]


def tool_names(tools: Sequence[Mapping[str, Any]] | None) -> list[str]:
    return [tool_name(t) for t in tools or ()]


def point(stats: SessionStats, now: float) -> list[float]:
    return [round(now, 3), *(int(getattr(stats, k)) for k in POINT[1:])]


def add_point(stats: SessionStats, now: float | None = None) -> None:
    """Append the session's current totals; halve the older points when the series is full."""
    stats.series.append(point(stats, time.time() if now is None else now))
    if len(stats.series) > SERIES_POINTS:
        stats.series[:] = stats.series[:-1:2] + stats.series[-1:]


def as_dicts(series: Sequence[Sequence[float]]) -> list[dict[str, float]]:
    """The series with named fields (points of another length, from a newer version, skipped)."""
    return [dict(zip(POINT, p)) for p in series if isinstance(p, (list, tuple)) and len(p) == len(POINT)]
