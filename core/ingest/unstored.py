"""What a message becomes when the store cannot keep its original (a full disk).

Reducing a tool output means pointing at its stored original; with no original there
is nothing to point at, and an id that does not exist must never be printed (I3). So
the message stays unreduced, except that the hard limit still holds: a tool output
longer than `hard_limit_chars` is cut, with a note saying the cut part cannot be
recalled. `TokenPilot` does not freeze this form: it retries the message at the next
call, and once the store works the message is reduced and stored as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def store_reason(exc: BaseException) -> str:
    """The failure in a few words, without file paths (the note is model-visible, I2)."""
    strerror = getattr(exc, "strerror", None)
    if isinstance(strerror, str) and strerror:
        return strerror
    return str(exc) or type(exc).__name__


def unstored_form(msg: Mapping[str, Any], limit: int, reason: str) -> dict[str, Any]:
    """`msg` as it may go upstream without the store: tool text cut to `limit` chars in all."""
    out = dict(msg)
    if msg.get("role") != "tool":
        return out  # the agent's own words and the user's are never cut
    content = msg.get("content")
    if isinstance(content, str):
        out["content"] = cut_to_limit(content, limit, reason)
    elif isinstance(content, list):
        budget = limit
        parts = []
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) and part.get("type") == "text" else None
            if isinstance(text, str):
                if len(text) > budget:
                    part = {**part, "text": cut_to_limit(text, budget, reason)}
                budget = max(budget - len(part["text"]), 0)
            parts.append(part)
        out["content"] = parts
    return out


def cut_to_limit(text: str, limit: int, reason: str) -> str:
    """`text` if it fits in `limit` chars, else its head and tail around a note, in `limit`.

    Below the note's own length (only for later parts of a multi-part output once the
    budget is spent) the note alone stands in for the text.
    """
    if len(text) <= limit:
        return text
    total = len(text)

    def note(omitted: int) -> str:
        return (
            f"\n[tokenpilot: {omitted:,} of {total:,} chars cut here to stay under the "
            f"{limit:,}-char limit; the original could not be stored ({reason}), so the cut "
            "part cannot be recalled]\n"
        )

    keep = max(limit - len(note(total)), 0)  # the note is never longer than with `total`
    head = keep * 3 // 5
    tail = keep - head
    return text[:head] + note(total - keep) + (text[total - tail :] if tail else "")
