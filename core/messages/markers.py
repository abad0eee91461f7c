"""The caller's cache markers (`cache_control`): where it asks its provider to cache, not
what it says.

Clients that reach Anthropic through an OpenAI-style API (LiteLLM and the agents built on
it, OpenHands among them) mark the system prompt and the newest user or tool message on
every call, so a message carries a marker at one call and none at the next. Read as
content, that is a history the caller rewrote at every call: the message is taken in
again (a new archive, a new recall id in its reduced text, so the provider's cache misses
from there on) and the session's first message names another session. So the markers are
taken off before anything else reads the request (`strip_markers`) and put back on the
messages that carried them as they are sent (`with_marks`); a message the plan took out
of view sends none. Pure: the same messages give the same marks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MARKER_KEY = "cache_control"

__all__ = ["MARKER_KEY", "Mark", "strip_markers", "with_marks"]


@dataclass(frozen=True, slots=True)
class Mark:
    """One marker taken off a message: the content part that carried it (None: the
    message itself) and its value as the caller wrote it (a `ttl` stays)."""

    part: int | None
    value: Any


def strip_markers(messages: list[Any]) -> tuple[list[Any], dict[int, tuple[Mark, ...]]]:
    """The messages without the caller's cache markers, and per message index the marks
    taken off. A message without one is passed on as the same object; without any marker
    at all, the list itself is."""
    marks: dict[int, tuple[Mark, ...]] = {}
    out = messages
    for i, m in enumerate(messages):
        if type(m) is not dict and not isinstance(m, Mapping):
            continue  # not a message: the checks downstream say so
        content = m.get("content")
        found = MARKER_KEY in m
        if not found and type(content) is list:
            for p in content:
                if type(p) is dict and MARKER_KEY in p:
                    found = True
                    break
        if not found:
            continue
        if out is messages:
            out = list(messages)
        taken: list[Mark] = []
        clean = {k: v for k, v in m.items() if k != MARKER_KEY}
        if MARKER_KEY in m:
            taken.append(Mark(None, m[MARKER_KEY]))
        if isinstance(content, list):
            parts = []
            for j, p in enumerate(content):
                if isinstance(p, Mapping) and MARKER_KEY in p:
                    taken.append(Mark(j, p[MARKER_KEY]))
                    p = {k: v for k, v in p.items() if k != MARKER_KEY}
                parts.append(p)
            clean["content"] = parts
        out[i] = clean
        marks[i] = tuple(taken)
    return out, marks


def with_marks(message: Mapping[str, Any], marks: Sequence[Mark]) -> dict[str, Any]:
    """`message` as sent, with the caller's marks back: each on the part that carried it
    (a text its reduction made one string becomes one text part), on the message where
    the caller put it there. A mark with no text to sit on (no content, an empty text)
    is left off: providers refuse a marker on an empty block."""
    out = dict(message)
    content = out.get("content")
    for mark in marks:
        if mark.part is None:
            out[MARKER_KEY] = mark.value
            continue
        if isinstance(content, str) and content:
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            continue
        spots = [j for j, p in enumerate(content) if isinstance(p, Mapping) and p.get("text") != ""]
        if not spots:
            continue
        j = mark.part if mark.part in spots else spots[-1]
        content = list(content)
        content[j] = {**content[j], MARKER_KEY: mark.value}
    if content is not message.get("content"):
        out["content"] = content
    return out
