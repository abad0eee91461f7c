"""What one process knows is already in the Redis store, so it need not send it again.

Per session (by the hex of its id): the chunks stored at the version this process last
wrote or read (a save at that version sends only the others), and when this process last
listed the session in the index (a write re-lists it at most once a minute). Both are
bounded LRUs: a forgotten session only costs its next save all its chunks, or one more
index write; never a wrong state.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

KNOWN_SESSIONS = 1024  # sessions whose stored chunks are remembered
INDEXED_SESSIONS = 16 * KNOWN_SESSIONS  # sessions whose last index write is remembered


class Known:
    """The process's memory of the store; thread-safe."""

    def __init__(self) -> None:
        self._chunks: OrderedDict[str, tuple[int, set[str]]] = OrderedDict()  # h -> (version, chunks)
        self._indexed: OrderedDict[str, float] = OrderedDict()  # h -> when this process indexed it
        self._lock = threading.Lock()

    def chunks_at(self, h: str, version: int | None) -> set[str]:
        """The chunks known stored for `h` at `version` (none when it is another version)."""
        with self._lock:
            held = self._chunks.get(h)
        return held[1] if held is not None and version is not None and held[0] == version else set()

    def remember(self, h: str, version: int, chunks: set[str]) -> None:
        with self._lock:
            self._chunks[h] = (version, chunks)
            self._chunks.move_to_end(h)
            while len(self._chunks) > KNOWN_SESSIONS:
                self._chunks.popitem(last=False)

    def indexed_since(self, h: str, since: float) -> bool:
        """Did this process index `h` after `since`?"""
        with self._lock:
            seen = self._indexed.get(h)
            if seen is None or seen <= since:
                return False
            self._indexed.move_to_end(h)
            return True

    def note_indexed(self, h: str, at: float) -> None:
        with self._lock:
            self._indexed[h] = at
            self._indexed.move_to_end(h)
            while len(self._indexed) > INDEXED_SESSIONS:
                self._indexed.popitem(last=False)

    def forget(self, h: str) -> None:
        with self._lock:
            self._chunks.pop(h, None)
            self._indexed.pop(h, None)
