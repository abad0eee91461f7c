"""A per-session lock shared by the processes of one machine: `fcntl.flock` on a file.

The multi-process disk store (`store_disk.DiskStore(shared=True)`, what
`tokenpilot serve --workers N` uses) needs what the Redis store's lock gives replicas:
one writer per session at a time, across processes. A `flock` is released by the
kernel when its holder dies, so a killed worker never leaves a session locked; a
live holder that never lets go is waited for `wait_s`, then reported as a
`StoreError` (an `OSError`, as every store failure).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import StoreError
from .reentrant_lock import ReentrantLock

try:
    import fcntl
except ImportError:  # Windows: no flock; the shared disk store refuses to open there
    fcntl = None  # type: ignore[assignment]


class FileLock(ReentrantLock):
    """Re-entrant in a thread around an exclusive `flock` taken at depth 0."""

    def __init__(self, path: str | Path, *, wait_s: float = 30.0, what: str = "") -> None:
        if fcntl is None:
            raise StoreError(f"{path}: file locks need fcntl (POSIX)", "no file locks on this platform")
        super().__init__()
        self.path = Path(path)
        self.wait_s = wait_s
        self.what = what or str(path)
        self._fd: int | None = None

    def _take(self) -> None:
        self._fd = self._locked_fd()

    def _give(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor releases the flock

    def _locked_fd(self) -> int:
        """The locked descriptor; polls (1 ms, growing to 20 ms) so the wait has a bound."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError(
                f"{self.what}: cannot open the lock file {self.path}: {exc}", "lock failed"
            ) from exc
        deadline = time.monotonic() + self.wait_s
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreError(
                        f"{self.what}: the lock stayed taken by another live process for {self.wait_s:g} s",
                        "session lock busy",
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.02)
            except OSError as exc:
                os.close(fd)
                raise StoreError(f"{self.what}: cannot lock {self.path}: {exc}", "lock failed") from exc
