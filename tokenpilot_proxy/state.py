"""The proxy's sessions: their stats, and their state in memory and in the state store.

`SessionKeeper` is what every request path shares about a session: the session lock
(`locks`), the newest state another replica wrote (`refresh`), writing it back (`save`,
`flush`), reading an evicted session back (`ensure_resident`) and evicting idle ones
(`evict_idle`), and the per-session usage stats the endpoints, `/metrics` and the
dashboard read. It knows no HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tokenpilot import TokenPilot
from tokenpilot.errors import TokenPilotError
from tokenpilot.store.protocol import Store, StoreUnanswered
from tokenpilot_proxy.locks import SessionLocks
from tokenpilot_proxy.memtrim import malloc_trim
from tokenpilot_proxy.residency import Residency
from tokenpilot_proxy.sessions import SessionStats, derived_owner, merge_stats, recall_candidates

log = logging.getLogger("tokenpilot.openclaw")

STATS_FIELDS = ("id", "stats")
"""What a stats view reads of each stored state: its counters sit in the head, so a scrape
reads no session's history (it decoded every state whole, O(the fleet's state) per scrape)."""


class SessionKeeper:
    """Sessions' stats and state, kept in step with the state store (module docstring)."""

    def __init__(
        self,
        pilot: TokenPilot,
        state: Store | None,
        *,
        session_idle_s: float,
        max_sessions: int,
        on_store_error: Callable[[str], None],
    ) -> None:
        self.pilot, self.state = pilot, state
        self.on_store_error = on_store_error  # kind -> counted in /metrics
        self.stats: dict[str, SessionStats] = {}
        self.stats_base: dict[str, dict[str, Any]] = {}  # stats as last read from / written to the store
        self.dirty: set[str] = set()  # sessions touched since their last write
        self.last_stable: dict[str, list[Any]] = {}  # each session's last rendered stable messages
        self.last_seen: dict[str, float] = {}  # session -> time of its last call here
        self.locks = SessionLocks(state, self.note_store_down)
        # Sessions in memory by last use; idle ones are evicted (they reload from the state store).
        self.residency = Residency(
            session_idle_s if state is not None else 0.0, max_sessions if state is not None else 0
        )
        self._versions: dict[str, int] = {}  # the stored state version this process holds
        self._store_down = False  # the shared store failed (logged once until it works again)
        self._writer = uuid.uuid4().hex[:12]  # names this process's state writes (see `refresh`)
        self._writes = itertools.count(1)
        self._unconfirmed: dict[str, set[str]] = {}  # session -> writes a stalled store may apply late
        self._save_failed: set[str] = set()  # sessions whose last write failed (logged once)
        self._evicted_untrimmed = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recovery_flush: asyncio.Task[int] | None = None
        pilot.estimate_guard = self.estimate_guard

    # -- starting and stopping ------------------------------------------------------
    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve from `loop`: a store that answers again is written back on it."""
        self._loop = loop
        for store in {id(s): s for s in (self.state, self.pilot.store) if s is not None}.values():
            listen = getattr(store, "add_recovery_listener", None)
            if listen is not None:
                listen(self._store_answers_again)

    async def recovered(self) -> None:
        """Wait for a write-back the store's recovery started (cancelled, it would drop its sessions)."""
        if self._recovery_flush is not None:
            await self._recovery_flush

    def load_all(self) -> int:
        """Read every stored session (up to the in-memory cap) at start; how many were restored.

        Only a store this process alone uses: a replica of a shared store (Redis, the disk
        store of `--workers`) reads a session at its first use (`refresh`: stored version
        newer than none), and its stats views read the store, so start-up reads nothing
        however many sessions the fleet holds."""
        if self.state is None or self.state.shared:
            return 0
        n = 0
        try:
            for version, data in self.state.load_states():
                sid = data["id"]
                try:
                    cap = self.residency.max_sessions
                    if data.get("session") is not None and (cap <= 0 or len(self.residency) < cap):
                        session = self.pilot.import_session(data["session"])
                        if not self.state.shared and hasattr(session.lifecycle, "release_job"):
                            session.lifecycle.release_job()  # its claimant was this process, before a restart
                        self.residency.touch(sid, time.time())
                    elif data.get("session") is not None:  # beyond the cap: read at its next call
                        self.residency.evict(sid)
                    self.stats[sid] = SessionStats.from_dict(data.get("stats") or {})
                    self._versions[sid] = version
                    self.stats_base[sid] = self.stats[sid].to_dict()
                    n += 1
                except (KeyError, TypeError, ValueError, TokenPilotError) as exc:
                    log.warning("tokenpilot: could not restore session %s: %s", sid, exc)
        except OSError as exc:  # the shared store is down: sessions load on their next request
            self.note_store_down(exc)
        return n

    # -- the store ------------------------------------------------------------------
    def refresh(self, sid: str) -> None:
        """Under the session lock: take the stored state when another replica wrote a newer one.

        One version read per request; the state itself is read only when it moved. The
        single-process store (`shared` False) is never re-read.
        """
        if self.state is None or not self.state.shared or sid in self.residency.evicted:
            return  # an evicted session is read whole at its next use (`ensure_resident`)
        held = self._versions.get(sid, 0)
        version = self.state.state_version(sid)
        if version == held:
            return
        got = self.state.load_state(sid) if version > held else None
        if got is None:  # the store lost what this process holds: its next save writes it again
            self._versions[sid] = version
            return
        version, data = got
        mine = self._unconfirmed.pop(sid, set())
        if version == held + 1 and data.get("writer") in mine:
            # this process's own write, which a stalled store applied when it resumed: what
            # memory holds is as new or newer (calls served from memory since), so keep it
            self._versions[sid] = version
            self.dirty.add(sid)
            log.info("tokenpilot: session %s: a write the stalled store applied late was this process's", sid)
            return
        if data.get("session") is not None:
            self.pilot.import_session(data["session"])
            self.last_stable.pop(sid, None)
        stored = SessionStats.from_dict(data.get("stats") or {})
        self.stats[sid] = merge_stats(stored, self.stats.get(sid), self.stats_base.get(sid))
        self.stats_base[sid] = stored.to_dict()
        self._versions[sid] = version

    def refresh_or_note(self, sid: str) -> None:
        """`refresh`, going on with what memory holds when the store is down (said once)."""
        try:
            self.refresh(sid)
        except OSError as exc:
            self.note_store_down(exc)

    def note_store_down(self, exc: OSError) -> None:
        """Said once per outage: requests go on with what this process holds."""
        self.on_store_error("store_down")
        if not self._store_down:
            self._store_down = True
            log.error("tokenpilot: session store failed: %s; serving from this process's memory", exc)

    def _store_answers_again(self) -> None:
        """The store's breaker closed (called from its probe thread): write back now what
        was served from memory meanwhile, rather than at the next flush or call."""
        self._store_down = False
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        log.info("tokenpilot: session store answers again; writing back %d session(s)", len(self.dirty))
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._start_recovery_flush)

    def _start_recovery_flush(self) -> None:
        self._recovery_flush = asyncio.ensure_future(self.flush())

    async def flush(self) -> int:
        """Write the state of every session touched since the last flush (usage counters)."""
        if self.state is None:
            return 0
        dirty, self.dirty = self.dirty, set()
        written = 0
        for sid in sorted(dirty):
            if await asyncio.to_thread(self.save, sid):
                written += 1
            else:
                self.dirty.add(sid)  # kept for the next try
        return written

    def save(self, sid: str, *, refreshed: bool = False) -> bool:
        """Write one session's state now (atomic replace); a failure is kept for a retry.

        Saves of one session are serialised and each exports the state at its own
        moment, so the file on disk is never older than a save that already returned.
        A shared store is first re-read if another replica wrote since (`refreshed`: the
        caller just did), and refuses the write if one did meanwhile (`StateConflict`).
        """
        if self.state is None:
            return False
        with self.locks.hold(sid):
            try:
                if not refreshed:
                    self.refresh(sid)
                if sid in self.residency.evicted:
                    return self._save_stats_only(sid)
                session = self.pilot.export_session(sid) if sid in self.pilot.session_ids else None
                stats = self.stats.get(sid, SessionStats())
                writer = f"{self._writer}:{next(self._writes)}"
                data = {
                    "id": sid,
                    "version": 1,
                    "session": session,
                    "stats": stats.to_dict(),
                    "writer": writer,
                }
                expect = self._versions.get(sid, 0) if self.state.shared else None
                try:
                    self._versions[sid] = self.state.save_state(sid, data, expect=expect)
                except StoreUnanswered:  # sent, unanswered: a stalled Redis may apply it when it resumes
                    self._unconfirmed.setdefault(sid, set()).add(writer)
                    raise
                self._unconfirmed.pop(sid, None)  # a late one can no longer land: `expect` moved on
                self.stats_base[sid] = data["stats"]
                self._store_down = False
            except (OSError, TypeError, ValueError) as exc:
                self.on_store_error("state_save")
                if sid not in self._save_failed:
                    self._save_failed.add(sid)
                    log.error("tokenpilot: could not save session %s (will retry): %s", sid, exc)
                return False
        if sid in self._save_failed:
            self._save_failed.discard(sid)
            log.info("tokenpilot: session %s saved again", sid)
        return True

    def _save_stats_only(self, sid: str) -> bool:
        """Under the session lock: new usage of a session evicted from memory (an answer
        that arrived after the eviction), written beside its stored session, untouched."""
        assert self.state is not None
        got = self.state.load_state(sid)
        if got is None:  # the stored state is gone: nothing to add usage to
            self.residency.forget(sid)
            return True
        version, data = got
        stored = SessionStats.from_dict(data.get("stats") or {})
        stats = merge_stats(stored, self.stats.get(sid), self.stats_base.get(sid))
        out = {**data, "stats": stats.to_dict()}
        self._versions[sid] = self.state.save_state(sid, out, expect=version if self.state.shared else None)
        self.stats[sid] = stats
        self.stats_base[sid] = out["stats"]
        return True

    # -- sessions in memory ------------------------------------------------------------
    def ensure_resident(self, sid: str) -> None:
        """Under the session lock: read an evicted session back from the state store, so
        the call renders exactly what it would have had the session stayed in memory.
        `OSError` when the store cannot be read (the call then goes unmanaged)."""
        if self.state is None:
            return
        if sid in self.residency.evicted and sid not in self.pilot.session_ids:
            got = self.state.load_state(sid)
            if got is None:
                log.warning("tokenpilot: session %s: its stored state is gone; it starts over", sid)
            else:
                version, data = got
                if data.get("session") is not None:
                    self.pilot.import_session(data["session"])
                stored = SessionStats.from_dict(data.get("stats") or {})
                self.stats[sid] = merge_stats(stored, self.stats.get(sid), self.stats_base.get(sid))
                self.stats_base[sid] = stored.to_dict()
                self._versions[sid] = version
        self.note_resident(sid)

    def note_resident(self, sid: str) -> None:
        """`sid` was just used; tracked only once it holds state (a recall naming an unknown
        session creates nothing to track)."""
        if self.state is not None and sid in self.pilot.session_ids:
            self.residency.touch(sid, time.time())

    def evict(self, sid: str, now: float | None = None, *, force: bool = False) -> bool:
        """Move one session out of memory: saved first (kept if the save fails), then dropped.
        Only while still due (`force`: regardless); False when it stayed."""
        if self.state is None:
            return False
        with self.locks.hold(sid):
            if not force and not self.residency.due(sid, time.time() if now is None else now):
                return False  # used again meanwhile
            if sid not in self.pilot.session_ids:
                self.residency.forget(sid)
                return True
            if not self.save(sid) or not self.pilot.unload_session(sid):
                return False  # unsaved, an unstored original or an estimator run: stays for now
            self.residency.evict(sid)  # still dirty if it was: an answer in flight adds usage
            self.last_stable.pop(sid, None)
        return True

    def evict_idle(self, now: float | None = None, *, spare: str | None = None) -> int:
        """Evict the sessions idle too long or beyond the cap; how many left memory.

        Their many small objects go back to malloc, which keeps the pages: a trim once
        enough sessions left (every sweep that evicted, or every 64 beyond the cap)
        returns them to the system."""
        if not self.residency.enabled:
            return 0
        now = time.time() if now is None else now
        n = 0
        for sid in self.residency.victims(now, spare=spare):
            try:
                n += self.evict(sid, now)
            except OSError as exc:  # the store's lock (Redis down): try at the next sweep
                self.note_store_down(exc)
        self._evicted_untrimmed += n
        if self._evicted_untrimmed and (spare is None or self._evicted_untrimmed >= 64):
            self._evicted_untrimmed = 0
            malloc_trim()
        return n

    def prune(self, now: float | None = None) -> int:
        """Bring the store under its size limit without touching a live session: the
        leases of sessions this process served within the lease period are renewed
        first (a session that only prepares, storing nothing new, would otherwise age
        out), then the store drops idle sessions, oldest first. The number of artifacts
        removed; 0 when the store cannot be reached (logged)."""
        store = self.pilot.store
        now = time.time() if now is None else now
        lease_s = float(getattr(store, "lease_s", 24 * 3600))
        try:
            for sid, seen in list(self.last_seen.items()):
                if now - seen < lease_s:
                    store.open_session(sid)
                else:
                    self.last_seen.pop(sid, None)
            removed = store.prune(now)
        except OSError as exc:
            log.warning("tokenpilot: could not prune the artifact store: %s", exc)
            return 0
        if removed:
            log.info(
                "tokenpilot: pruned %d artifact(s) of idle sessions to stay under the size limit", removed
            )
        return removed

    # -- work inside a session ----------------------------------------------------------
    @contextlib.contextmanager
    def current(self, sid: str) -> Iterator[None]:
        """The session locked, read back if evicted and brought to the newest stored state."""
        with self.locks.hold(sid):
            self.ensure_resident(sid)
            self.refresh_or_note(sid)
            yield

    def in_session(self, sid: str, fn: Callable[[], Any]) -> Any:
        """`fn` under the session lock with the newest state, written back after (a shared
        store only: a recall or tool-result call changes state other replicas must see)."""
        if self.state is None or not self.state.shared:
            if self.state is not None:
                with self.locks.hold(sid):
                    self.ensure_resident(sid)  # a recall counts in its session's state
            out = fn()
            self.note_resident(sid)  # `reduce_tool_output` may have started the session
            return out
        with self.current(sid):
            out = fn()
            self.note_resident(sid)
            if sid in self.pilot.session_ids:
                self.save(sid, refreshed=True)
            return out

    def estimate_guard(self, sid: str, apply: Callable[[], None]) -> None:
        """A background estimator result joins the session's state as a call's changes do:
        under the store's session lock, on the newest state, written back at once, so
        whichever replica serves the next call applies it (the job it finishes was
        claimed in that state, so no other replica ran the batch)."""
        if self.state is None:
            apply()
            return
        with self.locks.hold(sid):
            self.refresh_or_note(sid)
            apply()
            if sid in self.pilot.session_ids and not self.save(sid, refreshed=True):
                self.dirty.add(sid)  # kept for the next flush

    # -- stats ------------------------------------------------------------------------------
    def count_call(self, sid: str) -> SessionStats:
        """One model call of the session (managed or not); its stats."""
        stats = self.stats.setdefault(sid, SessionStats())
        stats.calls += 1
        self.last_seen[sid] = time.time()
        return stats

    def note_recall(self, sid: str) -> None:
        """An original read back for the session's agent (counted for the dashboard and /metrics)."""
        stats = self.stats.setdefault(sid, SessionStats())
        stats.recalls += 1
        self.dirty.add(sid)

    def fleet_stats(self) -> dict[str, SessionStats]:
        """Every session's stats: with a shared store (Redis, or the disk store of
        `--workers`), all the store holds, whichever replica or worker served it, plus
        what this process counted since it last wrote; else this process's own."""
        if self.state is None or not self.state.shared:
            return dict(self.stats)
        out: dict[str, SessionStats] = {}
        try:
            for _version, data in self.state.load_states(STATS_FIELDS):
                sid = data.get("id")
                if not isinstance(sid, str):
                    continue
                try:
                    stored = SessionStats.from_dict(data.get("stats") or {})
                except (TypeError, ValueError):
                    continue
                out[sid] = merge_stats(stored, self.stats.get(sid), self.stats_base.get(sid))
        except OSError as exc:  # the store is down: what this process holds, said once
            self.note_store_down(exc)
        for sid, st in self.stats.items():  # not written yet (or the store failed)
            out.setdefault(sid, st)
        return out

    def recall_session(self, session: str, *, by_id: bool = False) -> str:
        """The session a recall's `session` names: a derived id as is; `by_id`, a known
        session's id exactly as `/tokenpilot/stats` lists it (a hashed one included, which
        read as a key would be hashed again and name no session); else the first known candidate."""
        if derived_owner(session)[0]:
            return session
        known = set(self.stats) | set(self.pilot.session_ids)
        if by_id and (session in known or self._stored(session)):
            return session
        candidates = recall_candidates(session)
        return next((sid for sid in candidates if sid in known or self._stored(sid)), candidates[0])

    def _stored(self, sid: str) -> bool:
        """Whether a shared store holds the session (another replica served it)."""
        if self.state is None or not self.state.shared:
            return False
        try:
            return self.state.state_version(sid) > 0
        except OSError:
            return False
