"""Task-state estimators: read a compact view of new turns, propose a semantic delta.

An estimator only *proposes*; `TaskRegistry.apply` decides. Three implementations:

- `OfflineEstimator` (default): deterministic heuristics, no model call.
- `LLMEstimator`: any OpenAI-compatible endpoint, strict parsing, one repair retry;
  every failure becomes "no change".
- `ImmediateEstimator`: the paper's ablation, evicting a task as soon as it is
  completed and the session moved on, without asking whether later work uses it.

The view is built from frozen history only, so the same history gives the same
view and, offline, the same delta (invariant I2).

This module is the protocol and the package's face for estimators; each part lives
in its own module: `estimator_refs` (references), `estimator_view` (the view),
`estimator_offline`, `estimator_llm`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .llm import EstimatorReplyError, LLMEstimator, parse_delta
from .offline import (
    BACK_REFERENCES,
    CONTINUATION_OPENERS,
    NEW_TASK_OVERLAP,
    SHORT_WORDS,
    ImmediateEstimator,
    OfflineEstimator,
    content_words,
    departs_from,
    is_continuation,
)
from .refs import (
    AMBIENT_NAMES,
    EXCERPT_CHARS,
    MAX_REFS_PER_TASK,
    MAX_REFS_PER_TURN,
    excerpt,
    extract_refs,
    prompt_refs,
)
from .view import (
    FAILED_RE,
    EstimatorView,
    ToolCallRecord,
    TurnRecord,
    build_view,
    empty_delta,
    records_for,
    task_summaries,
    turn_record,
)

__all__ = [
    "AMBIENT_NAMES",
    "BACK_REFERENCES",
    "CONTINUATION_OPENERS",
    "EXCERPT_CHARS",
    "FAILED_RE",
    "MAX_REFS_PER_TASK",
    "MAX_REFS_PER_TURN",
    "NEW_TASK_OVERLAP",
    "SHORT_WORDS",
    "Estimator",
    "EstimatorReplyError",
    "EstimatorView",
    "ImmediateEstimator",
    "LLMEstimator",
    "OfflineEstimator",
    "ToolCallRecord",
    "TurnRecord",
    "build_view",
    "content_words",
    "departs_from",
    "empty_delta",
    "excerpt",
    "extract_refs",
    "is_continuation",
    "parse_delta",
    "prompt_refs",
    "records_for",
    "task_summaries",
    "turn_record",
]


@runtime_checkable
class Estimator(Protocol):
    """Reads a view, returns a semantic delta (a dict in the paper's schema)."""

    def estimate(self, view: EstimatorView) -> dict[str, Any]: ...
