"""Where an eviction keeps what it takes out of view: one session of an artifact store.

The lifecycle calls `archive(text) -> artifact_id` for each segment it evicts. Bound to
a store, the archive can also take all of one eviction's segments at once (`many`), which
the planner uses: one store write per eviction instead of one per segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SessionArchive:
    """`archive(text)` into `store` under `session_id`; `many(texts)` in one write where
    the store's class has `put_many`, else one `put` each."""

    store: Any
    session_id: str

    def __call__(self, text: str) -> str:
        return str(self.store.put(self.session_id, text))

    def many(self, texts: Sequence[str]) -> list[str]:
        # Looked up on the class: a wrapper that forwards unknown attributes to a store
        # (`__getattr__`) must not have its own `put` skipped by the inner store's put_many.
        if getattr(type(self.store), "put_many", None) is None:
            return [self(t) for t in texts]
        return list(self.store.put_many(self.session_id, texts))
