"""The `recall_artifact` tool's entry points: a recall scoped to a session, noted for the
ingestion gate (an original recalled often enough passes in full next time, G(m)), and
a raw tool call answered with text, never with an exception (the model wrote it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..history.session import Session
from ..ingest.stabilize import RECALL_TOOL_NAME
from ..store.artifacts import RecallResult
from ..store.protocol import Artifacts
from .args import recall_arguments


def resolve_session(session_id: str | None, sessions: Mapping[str, Session]) -> str:
    """The session a recall is for: the one named, else the only one served."""
    if session_id is not None:
        return session_id
    if len(sessions) == 1:
        return next(iter(sessions))
    raise ValueError("session_id is required when this TokenPilot serves several sessions")


def recall_in_session(
    store: Artifacts,
    sessions: Mapping[str, Session],
    sid: str,
    artifact_id: str,
    start_line: int | None,
    end_line: int | None,
    pattern: str | None,
) -> RecallResult:
    """The original behind an artifact id in session `sid`; a hit is noted in the
    session's ingestion state. Never raises for bad ids."""
    result = store.recall(sid, artifact_id, start_line, end_line, pattern)
    if result.found and sid in sessions:
        s = sessions[sid]
        with s.lock:
            s.state.note_recall(result.artifact_id)
    return result


@dataclass(frozen=True, slots=True)
class RecallAnswer:
    """A `recall_artifact` call's answer: the tool's text, and whether it is an error (bad
    arguments, an unknown id, a range or pattern refused, the store unreadable), which an
    MCP client shows as a failed tool call. The text is the same either way."""

    text: str
    error: bool


def recall_answer(
    arguments: str | bytes | Mapping[str, Any],
    recall: Callable[[str, int | None, int | None, str | None], RecallResult],
    max_chars: int | None = None,
) -> RecallAnswer:
    """The answer to a `recall_artifact` call's raw arguments, never an exception (the
    model wrote them). A whole original longer than `max_chars` comes back as its first
    lines, with how to ask for the rest (`first_part`)."""
    try:
        aid, start, end, pattern = recall_arguments(arguments)
    except ValueError as exc:
        return RecallAnswer(
            f'[tokenpilot: invalid {RECALL_TOOL_NAME} arguments: {exc}. Expected {{"artifact_id": "art_…"}}]',
            True,
        )
    try:
        result = recall(aid, start, end, pattern)
    except OSError as exc:  # the store's disk or server, not the model's arguments
        return RecallAnswer(
            f"[tokenpilot: the artifact store could not be read ({exc}); try again later]", True
        )
    whole = start is None and end is None and not pattern
    if whole and max_chars is not None and len(result.text) > max_chars:
        return RecallAnswer(first_part(result, max_chars), False)
    return RecallAnswer(result.for_model(), not result.found or result.refused)


def answer_recall_call(
    arguments: str | bytes | Mapping[str, Any],
    recall: Callable[[str, int | None, int | None, str | None], RecallResult],
    max_chars: int | None = None,
) -> str:
    """The tool's text for a `recall_artifact` call's raw arguments (`recall_answer`)."""
    return recall_answer(arguments, recall, max_chars).text


def first_part(result: RecallResult, max_chars: int) -> str:
    """The whole original's leading lines within `max_chars` (at least one line, cut if a
    single line is longer), and the line to ask for next: a recall answer enters the model's
    context whole, and one that overflows the window helps nobody."""
    lines = result.text.splitlines(keepends=True)
    taken: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) > max_chars:
            break
        taken.append(line)
        size += len(line)
    shown = "".join(taken) if taken else lines[0][:max_chars]
    n = max(len(taken), 1)
    total = result.total_lines or len(lines)
    note = (
        f"[tokenpilot: lines 1-{n} of {total} ({len(shown):,} of {len(result.text):,} chars) of "
        f"{result.artifact_id}: the whole original is over the {max_chars:,}-char limit of one recall. "
        f"Ask for the rest by range (start_line={n + 1}, end_line=...) or with a pattern]"
    )
    return f"{note}\n{shown}"
