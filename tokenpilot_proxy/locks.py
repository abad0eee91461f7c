"""One lock per session: the store's (across replicas and workers), else this process's own.

A call must never wait on a store that stopped answering: when the store cannot give its
lock (Redis down or stalled, or another replica kept the session busy for the whole
wait), the call is served under this process's lock, from this process's memory, so the
agent keeps running.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from tokenpilot.store.protocol import LockBusy, Store

log = logging.getLogger("tokenpilot.openclaw")


class SessionLocks:
    """`hold(sid)`: the session's lock, re-entrant within a thread (see the module docstring)."""

    def __init__(self, state: Store | None, on_store_down: Callable[[OSError], None]) -> None:
        self.state = state
        self.on_store_down = on_store_down  # said once per outage by the caller
        self._own: dict[str, threading.RLock] = {}
        self._fallback = threading.local()  # sessions this thread serves without the store's lock

    def own(self, sid: str) -> threading.RLock:
        """This process's lock of the session."""
        return self._own.setdefault(sid, threading.RLock())

    @contextlib.contextmanager
    def hold(self, sid: str) -> Iterator[None]:
        """The store's session lock, or this process's own when the store cannot give it.
        Nested calls in a thread that fell back take this process's lock too, without
        asking the store again."""
        fallback: set[str] | None = getattr(self._fallback, "sids", None)
        if fallback is None:
            fallback = self._fallback.sids = set()
        if sid in fallback:
            with self.own(sid):
                yield
            return
        lock = self.state.session_lock(sid) if self.state is not None else self.own(sid)
        try:
            lock.__enter__()
        except OSError as exc:
            if isinstance(exc, LockBusy):  # the store works: a live replica holds the session
                log.warning(
                    "tokenpilot: session %s: %s; serving this call from this process's memory", sid, exc
                )
            else:
                self.on_store_down(exc)
            fallback.add(sid)
            try:
                with self.own(sid):
                    yield
            finally:
                fallback.discard(sid)
            return
        try:
            yield
        finally:
            lock.__exit__(None, None, None)
