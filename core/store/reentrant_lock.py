"""The re-entrant shape the stores' session locks share.

A session lock is taken for real (a `flock`, a Redis key) once, at depth 0, and the
same thread may enter it again inside (the proxy's save within its prepare): a local
`RLock` orders the threads of this process, and only the outermost enter and exit
touch the shared lock.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class ReentrantLock(ABC):
    """`_take()` at the outermost enter, `_give()` at the outermost exit; a `_take()` that
    raises leaves the lock as it was."""

    def __init__(self) -> None:
        self._local = threading.RLock()
        self._depth = 0

    @abstractmethod
    def _take(self) -> None:
        """Take the shared lock (this thread holds the local one)."""

    @abstractmethod
    def _give(self) -> None:
        """Give the shared lock back (this thread still holds the local one)."""

    def __enter__(self) -> None:
        self._local.acquire()
        if self._depth == 0:
            try:
                self._take()
            except BaseException:
                self._local.release()
                raise
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        try:
            if self._depth == 0:
                self._give()
        finally:
            self._local.release()
