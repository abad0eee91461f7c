"""A circuit breaker for a store that stops answering (a stalled Redis).

A store that refuses connections fails fast by itself. One that accepts them and never
answers (a frozen server, a black-holed network) costs its whole socket timeout on every
command, and one proxy call makes several: a stalled Redis once made every call wait
25 s. After one timeout the breaker opens: every command fails at once, as on a refusal,
and the caller serves from memory. A background thread probes the store; once it
answers, the breaker runs the store's reconciliation (dropping what the stalled commands
may have left behind, such as a lock), closes, and tells its listeners (the proxy writes
back the sessions it served from memory).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import StoreError

log = logging.getLogger("tokenpilot")


@dataclass
class Breaker:
    """Open after a timeout, closed again by a background probe (see module doc).

    `probe` raises while the store does not answer; `recover` runs once it does, before
    the breaker closes (if it raises, the breaker stays open and probes again).
    """

    name: str  # the store, for messages (its URL without the password)
    probe: Callable[[], None]
    recover: Callable[[], None]
    interval_s: float = 0.5
    _opened_at: float | None = None
    _cause: str = ""
    _reason: str = ""
    _thread: threading.Thread | None = None
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _listeners: list[Callable[[], None]] = field(default_factory=list)

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def add_listener(self, fn: Callable[[], None]) -> None:
        """`fn()` runs in the probe's thread each time the store answers again."""
        self._listeners.append(fn)

    def check(self, action: str) -> None:
        """`StoreError` at once while open: the command is not sent. Its `strerror` is the
        one the timeout gave, so a model-visible note stays the same all through (I2)."""
        opened = self._opened_at
        if opened is None:
            return
        raise StoreError(
            f"{self.name}: {action} skipped: it stopped answering "
            f"{time.monotonic() - opened:.1f} s ago ({self._cause}); used again once it answers",
            self._reason,
        )

    def trip(self, cause: str, reason: str) -> None:
        """Open (once per outage) and start probing."""
        with self._guard:
            if self._opened_at is None:
                self._opened_at = time.monotonic()
                self._cause, self._reason = cause, reason
                log.warning(
                    "tokenpilot: %s did not answer (%s); skipping it until it answers again "
                    "(probed every %g s)",
                    self.name,
                    cause,
                    self.interval_s,
                )
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="tokenpilot-store-probe", daemon=True)
                self._thread.start()

    def close(self) -> None:
        """Stop probing (the store is being closed)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.probe()
                self.recover()
            except Exception as exc:  # still stalled, or down: probe again
                log.debug("tokenpilot: %s still not answering: %s", self.name, exc)
                continue
            with self._guard:
                opened, self._opened_at, self._thread = self._opened_at, None, None
            down_s = time.monotonic() - opened if opened is not None else 0.0
            log.warning("tokenpilot: %s answers again after %.1f s; using it again", self.name, down_s)
            for fn in list(self._listeners):
                try:
                    fn()
                except Exception:  # a listener's bug must not stop the store being used
                    log.exception("tokenpilot: a store-recovery listener failed")
            return
        with self._guard:
            self._thread = None
