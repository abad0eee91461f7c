"""The `recall_artifact` tool's entry points: a recall scoped to a session, noted for the
ingestion gate (an original recalled often enough passes in full next time, G(m)), and
a raw tool call answered with text, never with an exception (the model wrote it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


def answer_recall_call(
    arguments: str | bytes | Mapping[str, Any],
    recall: Callable[[str, int | None, int | None, str | None], RecallResult],
) -> str:
    """The tool's text for a `recall_artifact` call's raw arguments: the recalled text,
    or what was wrong with the arguments, or that the store could not be read."""
    try:
        aid, start, end, pattern = recall_arguments(arguments)
    except ValueError as exc:
        return (
            f'[tokenpilot: invalid {RECALL_TOOL_NAME} arguments: {exc}. Expected {{"artifact_id": "art_…"}}]'
        )
    try:
        return recall(aid, start, end, pattern).for_model()
    except OSError as exc:  # the store's disk, not the model's arguments
        return f"[tokenpilot: the artifact store could not be read ({exc}); try again later]"
