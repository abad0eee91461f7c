"""Token counts of a history's messages for the cost gate, remembered between batches.

At every batch boundary the gate weighs each possible cut: the tokens it evicts and
the tokens after it that would be sent again. Counting them with `message_tokens`
serialises and hashes every message after the cut, once per cut, at every batch: O(history)
work that set the latency of every third call. A history only grows between batches,
and its messages are the same objects from one call to the next (the frozen entries), so
a count is remembered by the message's identity and checked against the values the
message holds: a message object given other values is counted again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..tokens import message_tokens

Message = Mapping[str, Any]


def held_values(m: Message) -> tuple[Any, ...]:
    """The message's keys and values, as objects: kept with its count, they stay alive, so
    an `is` check against them later tells whether the message still holds them."""
    return tuple(m.items())


class MessageTokens:
    """`message_tokens` per message, remembered by identity (module docstring). Holds
    only the messages of the latest `counts` call, so it never outgrows one history."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Message, tuple[Any, ...], int]] = {}

    def counts(self, messages: Sequence[Message]) -> list[int]:
        """`message_tokens(m)` of each message, as `evict.render` would send it."""
        memo = self._by_id
        kept: dict[int, tuple[Message, tuple[Any, ...], int]] = {}
        out: list[int] = []
        for m in messages:
            key = id(m)
            hit = memo.get(key)
            values = held_values(m)
            # the same message holding the same values (a tuple compare, in C: an object
            # compares equal to itself at once, an equal new value counts the same)
            if hit is not None and hit[0] is m and hit[1] == values:
                n = hit[2]
            else:
                n = message_tokens(m if isinstance(m, dict) else dict(m))
            kept[key] = (m, values, n)
            out.append(n)
        self._by_id = kept
        return out

    def per_key(self, groups: Mapping[int, Sequence[Message]]) -> dict[int, int]:
        """Tokens of each group's messages (a plan's stubs per index), remembered as by
        `counts`: a stub is counted once while the plan keeps it."""
        counts = iter(self.counts([m for ms in groups.values() for m in ms]))
        return {i: sum(next(counts) for _ in ms) for i, ms in groups.items()}
