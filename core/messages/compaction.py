"""Requests in which the caller asks the model to summarise the whole conversation.

Claude Code compacts its own history: near the window's end it sends the conversation
so far plus one user message asking for a detailed summary of it (with "Do NOT use any
tools"), then restarts from that summary. The summary is all the agent remembers of the
conversation afterwards, so it must be written from everything the conversation held:
a task TokenPilot evicted as finished would otherwise be summarised from its stub, and
no recall can fill the gap in a call that may not use tools. Such a request is rendered
with nothing evicted. Its prefix up to the first eviction is still read from the cache,
and the call after it starts from the caller's summary, a new history anyway.

Codex CLI's local compaction works the same way. The markers are declared here, one
per agent, and tested (Claude Code's on the shared recordings, Codex's through the
proxy's Responses conversion);
`Config.compaction_markers` adds others or (empty) turns the rule off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .turns import content_text

__all__ = ["COMPACTION_MARKERS", "ENDED_CAUSE", "SHOWN_CAUSE", "is_compaction_request"]

# The prefix-break causes this rule gives (`PrepareStats.prefix_break`): deliberate, as an
# eviction is.
SHOWN_CAUSE = "compaction request: the whole history shown for the summary"
ENDED_CAUSE = "after a compaction request: its evictions hidden again"

COMPACTION_MARKERS: tuple[str, ...] = (
    # Claude Code 2.x, auto-compaction and /compact (the shared recordings hold four)
    "Your task is to create a detailed summary of the conversation so far",
    # Codex CLI's local compaction (codex-rs `templates/compact/prompt.md`), sent as the
    # last user input of a Responses request
    "You are performing a CONTEXT CHECKPOINT COMPACTION",
)


def is_compaction_request(history: Sequence[Any], markers: Sequence[str]) -> bool:
    """The last message is a user message whose text, or one of whose text parts, starts
    with one of `markers`. (Through the Messages API Claude Code sends the request as the
    last text block of a user message that may open with hook reminders and tool results.)"""
    if not markers or not history:
        return False
    last = history[-1]
    if not isinstance(last, Mapping) or last.get("role") != "user":
        return False
    content = last.get("content")
    parts = content if isinstance(content, list) else [content]
    for part in parts:
        text = content_text([part] if isinstance(part, Mapping) else part).lstrip()
        if any(m and text.startswith(m) for m in markers):
            return True
    return False
