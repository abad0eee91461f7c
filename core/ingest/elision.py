"""The caller's own rolling elision of old environment output, applied in batches.

Some agents shrink old tool output themselves, one message per call: SWE-agent's
`last_n_observations` replaces all but the last few observations with
`Old environment output: (N lines omitted)`, so every call rewrites one earlier message
and the provider re-reads everything after it uncached. Sent as it comes, that is one
cache break per call.

TokenPilot holds such an elision: while the only change to the history already seen is
that environment messages (tool results, recognised observations) came back shorter,
with the same role and tool-call ids, it keeps rendering their frozen form, which the
provider has cached, and applies every elision the caller made since in one pass at
the next batch boundary (every `batch_calls` calls). N breaks become about N/B. The
agent loses nothing it meant to keep: until then it sees more than it asked for, never
less, and after the boundary exactly what it sent (reduced as usual). Any other rewrite
(a compaction, dropped or reordered messages, edited words) is not held: it becomes the
new base at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..messages.observations import is_observation

log = logging.getLogger("tokenpilot")

DEFAULT_BATCH_CALLS = 3
"""When eviction is off (no batch B): the paper's B."""

SHORTER = 0.9
"""An elision is at most this share of what was ingested. `raw_tokens` is sampled past
6,000 chars (`tokens.estimate_tokens`, at most 4.2% off on the shared outputs), so a
caller's rewrite of about the same size (OpenClaw replaying its own truncation note) must
not pass for an elision by the estimate's error: it is a rewrite, the new base."""


class Seen(Protocol):
    """What TokenPilot remembers of a message it ingested (`session.Entry`)."""

    role: Any
    ids: Any
    raw_tokens: int


def elides(seen: Seen, msg: Any, msg_ids: Any, msg_tokens: int, previous_role: Any) -> bool:
    """Is `msg` the caller's shorter form of the environment message `seen`?

    A tool result with the same tool-call id, or a text-action agent's observation (a
    declared marker recognises the new form, right after an action), clearly smaller
    than what was ingested (`SHORTER`). Never a message with tool calls, never the person's words."""
    if not isinstance(msg, Mapping) or msg.get("role") != seen.role or msg.get("tool_calls"):
        return False
    if msg_tokens >= seen.raw_tokens * SHORTER:
        return False
    if seen.role == "tool":
        return isinstance(msg_ids, str) and msg_ids == seen.ids
    if seen.role == "user":
        return previous_role == "assistant" and is_observation(msg, {"role": "assistant"})
    return False


@dataclass(slots=True)
class HeldElisions:
    """One session's held elisions: since which call, and what was counted."""

    batch_calls: int = DEFAULT_BATCH_CALLS
    since: int | None = None  # the call that first held one of the current batch
    held: int = 0  # messages rendered in their frozen form at the last call
    held_calls: int = 0  # calls that rendered at least one held elision
    batches: int = 0  # times the held elisions were applied, each in one pass

    def due(self, call: int) -> bool:
        """Is this call a batch boundary for what is held?"""
        return self.since is not None and call - self.since >= max(1, self.batch_calls)

    def hold(self, count: int, call: int) -> None:
        if self.since is None:
            self.since = call
        self.held = count
        self.held_calls += 1

    def apply(self, count: int) -> None:
        """The caller's elisions go through now, all in this call's one break."""
        if count:
            self.batches += 1
            log.info("tokenpilot: applied %d elision(s) the caller made since call %s", count, self.since)
        self.since, self.held = None, 0

    def stats(self) -> dict[str, int]:
        return {"elisions_held_calls": self.held_calls, "elision_batches": self.batches}

    def to_dict(self) -> dict[str, Any]:
        """What another process needs to hold and apply at the same calls (B is config)."""
        return {
            "since": self.since,
            "held": self.held,
            "held_calls": self.held_calls,
            "batches": self.batches,
        }

    def load_dict(self, data: Mapping[str, Any]) -> None:
        since = data.get("since")
        self.since = int(since) if isinstance(since, int) else None
        self.held = int(data.get("held", 0))
        self.held_calls = int(data.get("held_calls", 0))
        self.batches = int(data.get("batches", 0))

    def clear(self) -> None:
        """A rewrite that is not an elision: nothing is held any more."""
        self.since, self.held = None, 0
