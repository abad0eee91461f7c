"""Which sessions the proxy holds in memory, and which to evict from it.

With a state store every session's state is written through at each call, so a session
that went quiet can leave memory and be read back, transparently, at its next call:
memory then holds the recently used sessions only, not every session since start-up.
Two limits: idle time (`idle_s`) and a count (`max_sessions`, least recently used out
first). Without a state store nothing is evicted: memory is the only copy.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import islice


@dataclass(slots=True)
class Residency:
    """Last use of each session in memory, least recent first; and those evicted.
    Thread-safe: calls are served on worker threads, the sweep on another."""

    idle_s: float = 0.0  # evict after this long unused (0: never for idleness)
    max_sessions: int = 0  # at most this many in memory (0: no cap)
    _used: OrderedDict[str, float] = field(default_factory=OrderedDict)
    evicted: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def enabled(self) -> bool:
        return self.idle_s > 0 or self.max_sessions > 0

    def __len__(self) -> int:
        return len(self._used)

    def __contains__(self, sid: object) -> bool:
        return sid in self._used

    def touch(self, sid: str, now: float) -> None:
        """`sid` is in memory and was used at `now`."""
        with self._lock:
            self._used[sid] = now
            self._used.move_to_end(sid)
            self.evicted.discard(sid)

    def victims(self, now: float, *, spare: str | None = None) -> list[str]:
        """Sessions to evict now, least recently used first: those beyond the cap, then the
        idle ones. `spare` (the session being served) is never one."""
        out: list[str] = []
        with self._lock:
            used_by = list(self._used.items())
        over = len(used_by) - self.max_sessions if self.max_sessions > 0 else 0
        for sid, used in used_by:
            if sid == spare:
                continue
            if over > 0:
                out.append(sid)
                over -= 1
            elif self.idle_s > 0 and now - used > self.idle_s:
                out.append(sid)
            else:
                break  # the rest were used more recently
        return out

    def due(self, sid: str, now: float) -> bool:
        """Is `sid` still to evict (checked again under its lock: a call may have used it)?"""
        with self._lock:
            used = self._used.get(sid)
            if used is None:
                return False
            if self.idle_s > 0 and now - used > self.idle_s:
                return True
            over = len(self._used) - self.max_sessions if self.max_sessions > 0 else 0
            return over > 0 and sid in islice(self._used, over)

    def evict(self, sid: str) -> None:
        with self._lock:
            self._used.pop(sid, None)
            self.evicted.add(sid)

    def forget(self, sid: str) -> None:
        """Neither in memory nor evicted (the stored state is gone too)."""
        with self._lock:
            self._used.pop(sid, None)
            self.evicted.discard(sid)
