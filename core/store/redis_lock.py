"""Session locks on Redis that fail fast: a short TTL renewed by a heartbeat.

A lock is a random token set with NX and a TTL (`lock_ttl_s`, default 5 s). While its
holder works, one heartbeat thread per store renews every lock it holds each ttl/5, so
a replica killed or frozen while holding a session's lock loses it within one TTL, not a
minute later. A waiter that then takes the lock logs that the holder stopped renewing
it. A waiter whose holder keeps renewing for the whole `lock_wait_s` gets `LockBusy`:
the store works, another replica is still busy with that session. A holder renews for
at most `max(lock_wait_s, 2 × lock_ttl_s)`, so a thread stuck inside a session cannot
hold it fleet-wide for ever.

A lock command that timed out (a stalled Redis) may still be applied when the server
resumes, and a release that could not be sent leaves the lock behind: both tokens are
kept as orphans, and `drop_orphans` (run by the store's breaker once Redis answers
again) deletes each lock that still holds one, so no leftover blocks the session.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ..errors import StoreError
from .protocol import LockBusy, StoreUnanswered
from .reentrant_lock import ReentrantLock

log = logging.getLogger("tokenpilot")

POLL_S = 0.05  # a waiter's retry period
_SLACK_S = 0.01  # the error of "now + PTTL" as a lapse time (the reply's trip back)
_MAX_ORPHANS = 10_000  # each lapses within one TTL anyway; the bound only caps memory

# KEYS: lock. ARGV: token, ttl ms. {1} when taken, else {0, holder's token, its pttl ms}.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1} end
return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1])}
"""
# KEYS: lock. ARGV: token, ttl ms. 1 when renewed, 0 when the token no longer holds it.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# KEYS: lock. ARGV: token. 1 when deleted, 0 when the token no longer held it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

Failures = Callable[[str], AbstractContextManager[None]]


class _Holder:
    """What a waiter saw of the lock's holder: its token, when its lock lapses at the
    latest, and whether it was ever seen renewing."""

    def __init__(self) -> None:
        self.token: bytes | None = None
        self.lapses_at = float("inf")
        self.renewed = False

    def saw(self, token: bytes, pttl_ms: int, now: float) -> None:
        lapses_at = now + pttl_ms / 1000 if pttl_ms >= 0 else float("inf")
        if token == self.token and lapses_at > self.lapses_at + _SLACK_S:
            self.renewed = True
        elif token != self.token:
            self.token, self.renewed = token, False
        self.lapses_at = lapses_at

    def lapsed(self, now: float) -> bool:
        """The lock went because its TTL ran out, not because its holder released it: a
        released lock is free before the time its last seen TTL would have run out."""
        return self.token is not None and now + _SLACK_S >= self.lapses_at


class RedisLocks:
    """Every session lock of one `RedisStore`: taking, renewing, releasing, orphans."""

    def __init__(self, client: Any, failures: Failures, *, ttl_s: float, wait_s: float, url: str) -> None:
        self.ttl_s = ttl_s
        self.wait_s = wait_s
        self.max_hold_s = max(wait_s, 2 * ttl_s)
        self.url = url
        self._failures = failures
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._guard = threading.Lock()
        self._by_session: dict[str, SessionLock] = {}
        self._held: dict[SessionLock, tuple[str, float]] = {}  # lock -> (token, monotonic time taken)
        self._orphans: deque[tuple[str, str]] = deque(maxlen=_MAX_ORPHANS)
        self._beat: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.ttl_s * 1000))

    def lock(self, session_id: str, key: str) -> SessionLock:
        with self._guard:
            lock = self._by_session.get(session_id)
            if lock is None:
                lock = self._by_session[session_id] = SessionLock(self, session_id, key)
            return lock

    # -- taking and giving --------------------------------------------------------
    def take(self, lock: SessionLock) -> str:
        """Wait up to `wait_s` for the lock; its token. `LockBusy` when a live holder kept it."""
        token = uuid.uuid4().hex
        start = time.monotonic()
        holder = _Holder()
        while True:
            try:
                with self._failures("lock"):
                    got = self._acquire(keys=[lock.key], args=[token, self._ttl_ms])
            except StoreUnanswered:
                self._orphans.append((lock.key, token))  # the SET may land when Redis resumes
                raise
            now = time.monotonic()
            if int(got[0]) == 1:
                break
            holder.saw(bytes(got[1]), int(got[2]), now)
            if now - start >= self.wait_s:
                raise LockBusy(self._busy_message(lock, holder, now), "session lock busy")
            time.sleep(min(POLL_S, max(self.wait_s - (now - start), 0.001)))
        if holder.lapsed(now):
            log.warning(
                "tokenpilot: session %r: the replica holding its lock stopped renewing it (killed or "
                "frozen); the lock lapsed and this replica took it over after %.1f s",
                lock.session_id,
                now - start,
            )
        with self._guard:
            self._held[lock] = (token, now)
            if self._beat is None:
                self._beat = threading.Thread(
                    target=self._heartbeat, name="tokenpilot-lock-renewal", daemon=True
                )
                self._beat.start()
        return token

    def _busy_message(self, lock: SessionLock, holder: _Holder, now: float) -> str:
        if holder.renewed:
            why = "its holder kept renewing it: another replica is still working on that session"
        else:
            why = f"its holder is not renewing it; it lapses in {max(holder.lapses_at - now, 0):.1f} s"
        return (
            f"Redis store ({self.url}): the lock of session {lock.session_id!r} stayed taken for "
            f"{self.wait_s:g} s ({why})"
        )

    def give(self, lock: SessionLock, token: str) -> None:
        """Release the lock if it still holds `token`; a lapsed or unreachable lock is logged."""
        with self._guard:
            self._held.pop(lock, None)
        try:
            with self._failures("unlock"):
                released = int(self._release(keys=[lock.key], args=[token]))
        except StoreError as exc:
            self._orphans.append((lock.key, token))
            log.warning(
                "tokenpilot: session %r: could not release the Redis lock (%s); it lapses within "
                "%g s, or is dropped as soon as Redis answers again",
                lock.session_id,
                exc.strerror,
                self.ttl_s,
            )
            return
        if not released:
            log.warning(
                "tokenpilot: session %r: the Redis lock lapsed before it was released (not renewed "
                "in time); another replica may have written the session meanwhile, and this "
                "replica's save is then refused rather than overwrite it",
                lock.session_id,
            )

    # -- renewing -----------------------------------------------------------------
    def _heartbeat(self) -> None:
        """Renew every held lock each ttl/5 while any is held (then the thread ends)."""
        while not self._stop.wait(max(self.ttl_s / 5, 0.01)):
            with self._guard:
                held = list(self._held.items())
                if not held:
                    self._beat = None
                    return
            now = time.monotonic()
            for lock, (token, since) in held:
                if now - since > self.max_hold_s:
                    self._give_up(lock, token, now - since)
                    continue
                try:
                    with self._failures("renew lock"):
                        renewed = int(self._renew(keys=[lock.key], args=[token, self._ttl_ms]))
                except StoreError:
                    continue  # Redis is down or stalled: its release will say what became of it
                if not renewed:
                    with self._guard:
                        lost = self._held.get(lock, (None, 0.0))[0] == token
                        if lost:
                            del self._held[lock]
                    if lost:
                        log.warning(
                            "tokenpilot: session %r: lost its Redis lock while working (it lapsed "
                            "before a renewal reached Redis)",
                            lock.session_id,
                        )
        with self._guard:
            self._beat = None

    def _give_up(self, lock: SessionLock, token: str, held_s: float) -> None:
        with self._guard:
            if self._held.get(lock, (None, 0.0))[0] != token:
                return
            del self._held[lock]
        log.warning(
            "tokenpilot: session %r: its lock has been held for %.0f s (over the %g s limit); no "
            "longer renewing it, so other replicas can take the session",
            lock.session_id,
            held_s,
            self.max_hold_s,
        )

    # -- after a stall ------------------------------------------------------------
    def drop_orphans(self) -> int:
        """Delete each lock still holding a token of an unanswered or unsent command (Redis
        must answer: the breaker calls this only after its probe passed). The number
        deleted; a failure leaves the rest for the next try."""
        dropped = 0
        while self._orphans:
            key, token = self._orphans[0]
            dropped += int(self._release(keys=[key], args=[token]))
            self._orphans.popleft()
        return dropped

    def close(self) -> None:
        self._stop.set()


class SessionLock(ReentrantLock):
    """Re-entrant in a thread around the Redis lock taken at depth 0."""

    def __init__(self, locks: RedisLocks, session_id: str, key: str) -> None:
        super().__init__()
        self.locks = locks
        self.session_id = session_id
        self.key = key
        self._token: str | None = None

    def _take(self) -> None:
        self._token = self.locks.take(self)

    def _give(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            self.locks.give(self, token)
