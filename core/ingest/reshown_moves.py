"""Lines an eviction moves: a fold in view that points at an output the plan hides.

A re-shown fold (`tokenpilot.ingest.reshown`) names lines of an earlier output. When the plan
evicts that output while the fold stays, the fold is rendered with those lines in place
of its marker, so the model still sees them. The cache breaks at the evicted output
anyway, and the fold comes after it, so this costs the lines' tokens and no other break.

`MovedLines` keeps the result per session: it depends only on the frozen history and
the plan's hidden set, so it is checked once per output while the plan stays the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .reshown import expand_hidden

__all__ = ["MovedLines"]


@dataclass(slots=True)
class MovedLines:
    """Outputs in view rendered with the lines of hidden outputs they point at."""

    hidden: frozenset[int] = frozenset()
    checked: int = 0  # entries checked under `hidden`
    last: Any = None  # the entry at `checked - 1`: another object means the history was rewritten
    texts: dict[int, str] = field(default_factory=dict)
    extra: dict[int, int] = field(default_factory=dict)  # tokens each moved text adds, once counted

    def texts_for(self, entries: Sequence[Any], hidden: frozenset[int]) -> dict[int, str]:
        """{entry index: text to render} for `entries` (each with `.frozen`) under `hidden`."""
        n = self.checked
        if hidden != self.hidden or n > len(entries) or (n and entries[n - 1] is not self.last):
            self.hidden, self.checked, self.last, self.texts, self.extra = hidden, 0, None, {}, {}
        if not hidden:
            return self.texts
        if self.checked < len(entries):
            frozen = [e.frozen for e in entries]
            self.texts.update(expand_hidden(frozen, hidden, self.checked))
            self.checked = len(entries)
            self.last = entries[-1]
        return self.texts

    def extra_tokens(self, entries: Sequence[Any], count: Callable[[Any], int]) -> int:
        """Tokens the moved texts add to their entries' (`count`: a message's tokens), as
        last returned by `texts_for`; each counted once."""
        total = 0
        for i, text in self.texts.items():
            if i not in self.extra:
                e = entries[i]
                self.extra[i] = count({**e.frozen, "content": text}) - e.tokens
            total += self.extra[i]
        return total
