"""`prepare`'s second stage: split off the system prompt and take in what is new.

All of a session's history work for one call, in its order (`take_in`), handing the render
stage a `Taken`: match the caller's history against the session's (`History.match`,
`hold_elisions`), check each new message's nesting before any state changes, update the
system prompt, forget what the caller rewrote, retry what the store refused, ingest the
rest (`History.ingest_new`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..messages.compaction import is_compaction_request
from ..messages.limits import check_depth
from .session import Session
from .sync import History
from .system_prompt import SystemPrompts


@dataclass(frozen=True, slots=True)
class Taken:
    """What taking in a call's messages did, for the stages after it."""

    history: list[Any]  # the caller's messages after its system prompt
    start: int  # the first of them ingested by this call (earlier ones render from their frozen form)
    rewritten: bool  # the caller changed messages ingested before
    recovered: bool  # messages the store refused before were ingested again
    reduced: int  # new messages whose content was reduced
    malformed: int  # new messages that passed through capped
    stored: list[str]  # artifact ids stored by this call
    unstored: int  # messages in the session still waiting for the store
    whole: bool  # the caller asks for a summary of everything: render with nothing evicted
    system_count: int = 0  # the caller's leading system messages (the request's index of history[0])


def take_in(
    hist: History, s: Session, messages: list[Any], system: SystemPrompts, warnings: list[str]
) -> Taken:
    """Split off the system prompt and take in what is new: match the history against
    the session's, check each new message's nesting (before any state changes), update
    the system prompt, forget what the caller rewrote, retry what the store refused,
    ingest the rest."""
    cfg = hist.config
    k = system.leading(messages)
    history = messages[k:]
    n = hist.hold_elisions(s, history, hist.match(s, history))
    for i in range(n, len(history)):  # refuse before any state changes; older ones passed
        check_depth(history[i], cfg.max_depth, k + i)
    system.update(s, messages[:k], warnings)
    rewritten = n < len(s.entries)
    if rewritten:
        hist.truncate(s, n)
    store_errors: list[OSError] = []
    n, before = hist.retry_unstored(s, n, store_errors)
    stored: list[str] = []
    reduced, malformed = hist.ingest_new(s, history, n, k, stored, store_errors, warnings)
    unstored = sum(1 for e in s.entries if e.unstored is not None)
    if store_errors:
        warnings.append(
            f"artifact store write failed ({store_errors[0]}): {unstored} message(s) sent without "
            f"reduction, tool outputs over {cfg.hard_limit_chars:,} chars cut with no recall handle; "
            "retried at the next call"
        )
    whole = is_compaction_request(history, cfg.compaction_markers)
    return Taken(history, n, rewritten, bool(before), reduced, malformed, stored, unstored, whole, k)
