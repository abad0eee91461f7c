"""The oracle's chains: one method session's calls as the hindsight search sees them, the
turns it may evict, and the last call that needs each turn (`oracle.py` searches them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...messages.observations import is_observation
from ..cache_segments import message_segments, segments_tokens
from .method import Message
from .retention import Visibility

NONE = -1  # the eviction point "none yet": nothing stubbed


# ---------------------------------------------------------------------------
# turns and what needs them
# ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Unit:
    """Messages [start, end) of a session evicted together: one assistant turn."""

    start: int
    end: int


def units_of(messages: Sequence[Mapping[str, Any]]) -> list[Unit]:
    """Each assistant message with the tool outputs (or observations) that answer it."""
    out = []
    i = 0
    while i < len(messages):
        if messages[i].get("role") != "assistant":
            i += 1
            continue
        j = i + 1
        while j < len(messages) and (
            messages[j].get("role") == "tool" or is_observation(messages[j], messages[j - 1])
        ):
            j += 1
        out.append(Unit(i, j))
        i = j
    return out


def stub_message(unit: Unit) -> dict[str, Any]:
    return {"role": "user", "content": f"[evicted: messages {unit.start}..{unit.end - 1}]"}


def message_tokens_at(msg: Mapping[str, Any], position: int) -> int:
    return segments_tokens(message_segments(dict(msg), position))


@dataclass(slots=True)
class Call:
    """One call of a chain: its base request (before any eviction) as the cost model sees it."""

    messages: list[Message]  # the base render
    tools: list[dict[str, Any]]
    offset: int  # session index of prompt position p is p + offset (for positions >= first)
    first: int  # first position that maps to a session message of the window
    prefix_tokens: int  # hidden prefix + tool schemas
    prefix_key: tuple[str, ...]
    keys: list[tuple[str, ...]]  # per position, its segments' keys
    cum: list[int]  # cum[p]: tokens of positions < p
    timestamp: float | None
    ttl_s: float | None
    needs: set[str]
    static_end: int  # positions before it are under a fixed breakpoint (a system message)

    @property
    def tokens(self) -> int:
        return self.prefix_tokens + self.cum[-1]


@dataclass(slots=True)
class Chain:
    """The calls of one method session in replay order, its turns and when each dies."""

    calls: list[Call]
    units: list[Unit]
    stub_tokens: list[int]
    death: list[int] = field(default_factory=list)  # last call index that needs unit u (NONE: none)
    lag: int = 0  # a turn leaves no earlier than this many calls after its last need

    def position(self, c: int, u: int) -> tuple[int, int] | None:
        """Positions [a, b) of unit u in call c's prompt, or None when it is not all there."""
        call = self.calls[c]
        a, b = self.units[u].start - call.offset, self.units[u].end - call.offset
        if a < call.first or b > len(call.messages):
            return None
        return a, b

    def saving(self, c: int, u: int) -> int:
        pos = self.position(c, u)
        if pos is None:
            return 0
        call = self.calls[c]
        return call.cum[pos[1]] - call.cum[pos[0]] - self.stub_tokens[u]

    def dead_at(self, e: int) -> list[int]:
        """The turns evicted at point e: in call e's prompt, needed by no call from e on."""
        if e == NONE:
            return []
        return [
            u
            for u in range(len(self.units))
            if self.death[u] + self.lag < e and self.position(e, u) is not None
        ]


def assign_deaths(chain: Chain) -> None:
    """The last call needing each turn, with one holder per needed identifier."""
    vis = Visibility()
    holder: dict[str, int] = {}
    death = [NONE] * len(chain.units)
    for c, call in enumerate(chain.calls):
        present = [u for u in range(len(chain.units)) if chain.position(c, u) is not None]
        for u in present:
            if death[u] == NONE:
                death[u] = c  # every output is read once: the call it arrives for sees it
        if not call.needs:
            continue
        in_unit: set[int] = set()
        ids_of: dict[int, set[str]] = {}
        for u in present:
            a, b = chain.position(c, u)  # type: ignore[misc]
            in_unit.update(range(a, b))
            ids_of[u] = vis.of(call.messages[a:b])
        fixed = vis.of(m for p, m in enumerate(call.messages) if p not in in_unit)
        size = {u: chain.saving(c, u) for u in present}
        for t in sorted(call.needs - fixed):
            h = holder.get(t)
            if h is None or h not in ids_of or t not in ids_of[h]:
                holding = [u for u in present if t in ids_of[u]]
                if not holding:
                    continue  # not visible before any eviction: no eviction can keep it
                h = holder[t] = min(holding, key=lambda u: (size[u], u))
            death[h] = max(death[h], c)
    chain.death = death
