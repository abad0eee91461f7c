"""The shape every reduction pass has.

A pass is a small, frozen dataclass with documented defaults and one method,
`apply(text, ctx) -> text`. It is pure: the same text and context always give the
same output (no clock, no randomness, no session state), so a reduced tool result
can be frozen into history and rendered byte-identically forever (invariants I1, I2).
A pass that does not apply returns its input unchanged (the very same object).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

PREVIEW_HEAD = 600
PREVIEW_TAIL = 400

# The kinds of content a pass may accept (`ReductionPass.accepts`; `kinds.content_kind`
# tells which one an output is).
MARKUP = "markup"  # an HTML page or fragment
JSON = "json"  # a JSON document or JSON lines
DIFF = "diff"  # a unified diff (with or without a commit's header)
CODE = "code"  # a file's text, read to be quoted back in an edit
LISTING = "listing"  # search hits, file listings
LOG = "log"  # a log, a build or a test run, a command's output
PROSE = "prose"  # anything else: words
ALL_KINDS = frozenset({MARKUP, JSON, DIFF, CODE, LISTING, LOG, PROSE})
LINE_KINDS = ALL_KINDS - {MARKUP}
"""Text whose lines are what the agent reads: markup's lines are not (its text is)."""


@dataclass(frozen=True, slots=True)
class PassContext:
    """What a pass may know about the output it reduces.

    `artifact_id` names the stored original of the *whole* tool result, so that a
    pass that drops content can tell the model how to get it back.
    """

    tool_name: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    artifact_id: str = ""


@runtime_checkable
class ReductionPass(Protocol):
    name: str
    accepts: frozenset[str]
    """The content kinds this pass may run on; the pipeline runs it on no other."""

    def apply(self, text: str, ctx: PassContext) -> str: ...


def recall_hint(artifact_id: str) -> str:
    """The one sentence every reduced text carries: which id, and which tool."""
    return f'recall_artifact(artifact_id="{artifact_id}") returns the full original'


def preview(text: str, *, head: int, tail: int, artifact_id: str, what: str, line_range: bool = False) -> str:
    """First `head` and last `tail` chars around a marker that says what was cut.

    `what` describes the reason ("output truncated", "identical to an earlier read").
    The marker names the artifact id and how many chars were left out; with
    `line_range` (when `text` is the stored original) also the lines the cut touches,
    as a ready `recall_artifact` call. It depends only on its arguments, so it renders
    the same every time.
    """
    if len(text) <= head + tail:
        return text
    omitted = len(text) - head - tail
    where = ""
    if line_range:
        first = max(1, len(text[: head + 1].splitlines()))
        last = max(first, len(text[: len(text) - tail].splitlines()))
        where = (
            f'; lines {first}–{last} of the original: recall_artifact(artifact_id="{artifact_id}", '
            f"start_line={first}, end_line={last})"
        )
    marker = (
        f"\n[tokenpilot: {what}; {omitted:,} of {len(text):,} chars omitted here; "
        f"{recall_hint(artifact_id)} (optionally start_line/end_line or pattern){where}]\n"
    )
    return text[:head] + marker + text[len(text) - tail :]
