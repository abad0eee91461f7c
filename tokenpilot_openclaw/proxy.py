"""OpenAI-compatible HTTP proxy that runs every chat request through TokenPilot.

The agent (OpenClaw) talks to this proxy as if it were its provider. Each
`POST /v1/chat/completions` is prepared by `TokenPilot.prepare` for its session
(stabilised system prompt, reduced tool outputs, append-only history), forwarded to
the upstream, and its answer streamed back untouched; the provider's usage, cached
tokens included, is recorded per session. Originals behind reduced outputs are served
to the plugin's `recall_artifact` tool from `/tokenpilot/artifacts/{id}`.

The proxy is a translation layer: all context decisions are the core's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tokenpilot import ArtifactStore, Config, Prepared, TokenPilot
from tokenpilot.artifacts import default_store_dir
from tokenpilot.errors import MessageError, TokenPilotError
from tokenpilot.model_prices import TABLE, load_price_file
from tokenpilot.store import LockBusy, Store, StoreUnanswered, redact_store_url
from tokenpilot.store_disk import DiskStore
from tokenpilot.store_open import is_store_url, open_redis

from . import sse, timeline, wire
from .dashboard import Dashboard, browser_authorized
from .memtrim import BodyStalled, Trimmer, malloc_trim, read_body
from .metrics import ProxyMetrics
from .pools import PoolBusy, Pools
from .residency import Residency
from .serve_options import (
    DEFAULT_CLIENT_TIMEOUT_S,
    DEFAULT_PORT,
    DEFAULT_RECALL_QUEUE,
    DEFAULT_RECALL_WORKERS,
    DEFAULT_UPSTREAM_KEY_ENV,
    MB,
    default_state_dir,
)
from .sessions import (
    COUNTERS,
    NOT_TOTALS,
    SessionStats,
    credential_fingerprint,
    derived_owner,
    derived_session_id,
    merge_stats,
    query_session,
    recall_candidates,
    resolve_session_id,
    summarize,
)
from .upstream import (
    Upstream,
    UpstreamTimeout,
    UpstreamUnreachable,
    basic_auth,
    redact_url,
    response_headers,
    split_credentials,
    url_user,
)

log = logging.getLogger("tokenpilot.openclaw")


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Everything `tokenpilot serve` is told. Secrets are named by environment variable only."""

    upstream: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    upstream_key_env: str = DEFAULT_UPSTREAM_KEY_ENV
    auth_token_env: str | None = None
    store_dir: Path = field(default_factory=default_store_dir)
    state_dir: Path | None = field(default_factory=default_state_dir)
    max_body_bytes: int = 32 * MB
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    models: tuple[str, ...] = ()
    flush_interval_s: float = 30.0
    store_url: str | None = None  # redis://...: originals and state shared by replicas
    prune_interval_s: float = 600.0  # how often the store is brought under its size limit (0: never)
    list_sessions: bool = False  # per-session stats at /tokenpilot/stats without --auth-token-env
    upstream_password_env: str | None = None  # names the variable holding the upstream's Basic password
    store_lock_ttl_s: float = 5.0  # a session lock outlives a replica that stopped renewing it by this
    store_lock_wait_s: float = 30.0  # how long a call waits for a lock another replica holds and renews
    store_timeout_s: float = 1.0  # a Redis command unanswered this long: Redis is skipped until it answers
    workers: int = 1  # processes serving one port (`serve --workers`); > 1 shares the disk store
    reuse_port: bool = False  # bind with SO_REUSEPORT (each worker binds the port itself)
    client_timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S  # a client silent this long is closed
    max_connections: int | None = None  # open client connections; None: from the file limit
    recall_workers: int = DEFAULT_RECALL_WORKERS  # threads for recalls (slow: their own pool)
    recall_queue: int = DEFAULT_RECALL_QUEUE  # recalls that may wait for one; more: 503
    prices_file: Path | None = None  # JSON of model -> $ per million tokens, over the built-in table
    # Sessions leave memory (their state stays in the state store, read back at the next
    # call) once idle this long, or beyond this many, least recently used first. 0: never.
    # No effect without a state store (`--no-state`): memory is then the only copy.
    session_idle_s: float = 900.0
    max_sessions: int = 1000

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise ValueError(f"--upstream must be an http(s) URL, got {redact_url(self.upstream)!r}")
        if self.store_url is not None and not is_store_url(self.store_url):
            raise ValueError(
                f"--store must be a redis:// (or rediss://, unix://) URL, got {redact_store_url(self.store_url)!r}"
            )
        if self.max_body_bytes <= 0:
            raise ValueError("the request size limit must be positive")
        for name, value, least in (
            ("--lock-ttl", self.store_lock_ttl_s, 0.001),
            ("--lock-wait", self.store_lock_wait_s, 0.0),
            ("--store-timeout", self.store_timeout_s, 0.001),
        ):
            if not least <= value < float("inf"):
                raise ValueError(f"{name} must be a number of seconds {'>= 0' if least == 0 else '> 0'}")
        if self.workers < 1:
            raise ValueError(f"--workers must be at least 1, got {self.workers}")
        if self.workers > 1 and self.store_url is None and self.state_dir is None:
            raise ValueError(
                "--workers > 1 with --no-state would give each worker its own sessions: "
                "keep the state folder (shared by the workers) or give --store"
            )
        if self.client_timeout_s <= 0:
            raise ValueError("--client-timeout must be positive")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError("--max-connections must be at least 1")
        if self.recall_workers < 1 or self.recall_queue < 0:
            raise ValueError("--recall-workers must be at least 1 and --recall-queue at least 0")
        if self.session_idle_s < 0 or self.max_sessions < 0:
            raise ValueError("--session-idle and --max-sessions must be 0 (off) or positive")


class SetupError(RuntimeError):
    """The proxy cannot start as configured (a missing environment variable, a bad path)."""


def _secret_from_env(var: str, what: str) -> str | None:
    """`$var`, or None when unset or empty; `SetupError` naming the variable (never the value)
    when it holds a control character, which no HTTP header can carry."""
    value = os.environ.get(var) or None
    if value is not None and any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise SetupError(
            f"{var} ({what}) contains a control character such as a line break; "
            "set it to the bare value on one line"
        )
    return value


def read_secrets(settings: ProxySettings) -> tuple[str | None, str | None, str | None]:
    """(upstream API key, Basic auth from `--upstream-password-env` or None, the proxy's own
    bearer token) from the environment; `SetupError` when they contradict the settings.
    Also run by `serve --workers`' parent, so a missing secret is said once, before any
    worker starts."""
    key = _secret_from_env(settings.upstream_key_env, "the upstream API key")
    basic = None
    if settings.upstream_password_env:
        basic = _basic_auth_from_env(settings.upstream, settings.upstream_password_env)
    if key and (basic is not None or split_credentials(settings.upstream)[1]):
        where = (
            f"{settings.upstream_password_env} holds"
            if settings.upstream_password_env
            else "the upstream URL carries"
        )
        raise SetupError(
            f"{where} a password for the upstream and {settings.upstream_key_env} holds an API key: "
            f"choose one (unset {settings.upstream_key_env}, or drop the password)"
        )
    token = None
    if settings.auth_token_env:
        token = _secret_from_env(settings.auth_token_env, "the proxy's bearer token")
        if not token:
            raise SetupError(f"--auth-token-env names {settings.auth_token_env}, which is not set or empty")
    return key, basic, token


def _basic_auth_from_env(upstream: str, var: str) -> str:
    """Basic auth for the URL's user (or none) and the password in `$var`, so the password
    is kept out of the process list, where `--upstream http://user:pass@...` shows it."""
    user, has_password = url_user(upstream)
    if has_password:
        raise SetupError(
            f"--upstream-password-env names {var}, but the --upstream URL carries a password "
            "too: remove it from the URL (keep the user: http://user@host/v1)"
        )
    password = _secret_from_env(var, "the upstream password")
    if not password:
        raise SetupError(f"--upstream-password-env names {var}, which is not set or empty")
    return basic_auth(user, password)


# ---------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------
def json_error(
    status: int, message: str, *, type_: str, code: str | None = None, param: str | None = None
) -> web.Response:
    """An OpenAI-shaped error body, so agent SDKs surface the message as is."""
    err: dict[str, Any] = {"message": message, "type": type_, "code": code}
    if param is not None:
        err["param"] = param
    return web.json_response({"error": err}, status=status)


def internal_error_message(exc: BaseException) -> str:
    return f"internal error in the TokenPilot proxy ({type(exc).__name__}); its log has the details"


def internal_error(exc: BaseException) -> web.Response:
    """The answer to a bug of the proxy (never a client's fault: those are 400s): JSON naming
    the error's type, so an agent SDK shows it, and never aiohttp's text/plain page."""
    return json_error(500, internal_error_message(exc), type_="server_error", code="internal_error")


_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found",
    405: "invalid_request_error",
    408: "client_timeout",
    413: "request_too_large",
}


def busy_error(exc: PoolBusy) -> web.Response:
    """503 with Retry-After: a recall that found every worker busy and the queue full."""
    resp = json_error(503, str(exc), type_="server_error", code="proxy_busy")
    resp.headers["Retry-After"] = str(exc.retry_after_s)
    return resp


# ---------------------------------------------------------------------------
# The proxy
# ---------------------------------------------------------------------------
class Proxy:
    """TokenPilot, the upstream client and per-session stats; aiohttp handlers on top."""

    def __init__(
        self, settings: ProxySettings, *, config: Config | None = None, pilot: TokenPilot | None = None
    ) -> None:
        self.settings = settings
        self.pilot, self.state = _stores(settings, config, pilot)
        self.stats: dict[str, SessionStats] = {}
        self._versions: dict[str, int] = {}  # the stored state version this process holds
        self._stats_base: dict[str, dict[str, Any]] = {}  # stats as last read from / written to the store
        self._store_down = False  # the shared store failed (logged once until it works again)
        self._writer = uuid.uuid4().hex[:12]  # names this process's state writes (see `_refresh`)
        self._writes = itertools.count(1)
        self._unconfirmed: dict[str, set[str]] = {}  # session -> writes a stalled store may apply late
        self._fallback = threading.local()  # sessions this thread serves without the store's lock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recovery_flush: asyncio.Task[int] | None = None
        base_url, basic_auth = split_credentials(settings.upstream)
        self.upstream = Upstream(
            base_url,
            basic_auth=basic_auth,
            connect_timeout_s=settings.connect_timeout_s,
            read_timeout_s=settings.read_timeout_s,
        )
        self._auth_token: str | None = None
        self._dirty: set[str] = set()
        self._save_locks: dict[str, threading.RLock] = {}
        self._save_failed: set[str] = set()  # sessions whose last write failed (logged once)
        self._store_failing: set[str] = set()  # sessions with outputs the store refused (logged once)
        self._last_stable: dict[str, list[Any]] = {}
        self._last_tools: dict[str, list[str]] = {}  # tool names of the last call: what a break changed
        self.prices = load_price_file(settings.prices_file) if settings.prices_file else dict(TABLE)
        self.metrics = ProxyMetrics(self)
        self._flusher: asyncio.Task[None] | None = None
        self._pruner: asyncio.Task[None] | None = None
        self._last_seen: dict[str, float] = {}  # session -> time of its last call here
        self._started = time.time()
        self.pilot.estimate_guard = self._estimate_guard
        self.pools = Pools(recall_workers=settings.recall_workers, recall_queue=settings.recall_queue)
        self.busy: set[object] = set()  # connections (aiohttp protocols) with a request in progress
        # Sessions in memory by last use; idle ones are evicted (they reload from the state store).
        self.residency = Residency(
            settings.session_idle_s if self.state is not None else 0.0,
            settings.max_sessions if self.state is not None else 0,
        )
        self._evictor: asyncio.Task[None] | None = None
        self._evicted_untrimmed = 0
        self.trimmer = Trimmer()  # malloc_trim after huge bodies
        self._trims: set[asyncio.Task[None]] = set()

    # -- lifecycle --------------------------------------------------------------
    def resolve_secrets(self) -> None:
        """Read the upstream key and the proxy's own token from the environment (never logged)."""
        self.upstream.api_key, basic, token = read_secrets(self.settings)
        if basic is not None:
            self.upstream.basic_auth = basic
        if token:
            self._auth_token = token

    async def start(self) -> None:
        self.resolve_secrets()
        if url_user(self.settings.upstream)[1]:
            log.warning(
                "tokenpilot: the --upstream URL carries a password, which every local user can read in "
                "the process list; pass it in an environment variable with --upstream-password-env VAR"
            )
        self._loop = asyncio.get_running_loop()
        for store in {id(s): s for s in (self.state, self.pilot.store) if s is not None}.values():
            listen = getattr(store, "add_recovery_listener", None)
            if listen is not None:
                listen(self._store_answers_again)
        loaded = await asyncio.to_thread(self._load_state)
        await self.upstream.open()
        if self.settings.flush_interval_s > 0 and self.state is not None:
            self._flusher = asyncio.create_task(self._flush_periodically())
        if self.settings.prune_interval_s > 0:
            self._pruner = asyncio.create_task(self._prune_periodically())
        if self.residency.idle_s > 0:
            self._evictor = asyncio.create_task(self._evict_periodically())
        log.info(
            "tokenpilot: proxy ready, upstream %s, %d session(s) restored",
            redact_url(self.settings.upstream),
            loaded,
        )

    async def close(self) -> None:
        for task in (self._flusher, self._pruner, self._evictor):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._recovery_flush is not None:  # let it finish: cancelled, it would drop its sessions
            await self._recovery_flush
        await self.flush()
        await self.upstream.close()
        self.pools.close()

    def _load_state(self) -> int:
        if self.state is None:
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
                    self._stats_base[sid] = self.stats[sid].to_dict()
                    n += 1
                except (KeyError, TypeError, ValueError, TokenPilotError) as exc:
                    log.warning("tokenpilot: could not restore session %s: %s", sid, exc)
        except OSError as exc:  # the shared store is down: sessions load on their next request
            self._note_store_down(exc)
        return n

    def _refresh(self, sid: str) -> None:
        """Under the session lock: take the stored state when another replica wrote a newer one.

        One version read per request; the state itself is read only when it moved. The
        single-process store (`shared` False) is never re-read.
        """
        if self.state is None or not self.state.shared or sid in self.residency.evicted:
            return  # an evicted session is read whole at its next use (`_ensure_resident`)
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
            self._dirty.add(sid)
            log.info("tokenpilot: session %s: a write the stalled store applied late was this process's", sid)
            return
        if data.get("session") is not None:
            self.pilot.import_session(data["session"])
            self._last_stable.pop(sid, None)
        stored = SessionStats.from_dict(data.get("stats") or {})
        self.stats[sid] = merge_stats(stored, self.stats.get(sid), self._stats_base.get(sid))
        self._stats_base[sid] = stored.to_dict()
        self._versions[sid] = version

    def _note_store_down(self, exc: OSError) -> None:
        """Said once per outage: requests go on with what this process holds."""
        self.metrics.store_error("store_down")
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
        log.info("tokenpilot: session store answers again; writing back %d session(s)", len(self._dirty))
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._start_recovery_flush)

    def _start_recovery_flush(self) -> None:
        self._recovery_flush = asyncio.ensure_future(self.flush())

    async def flush(self) -> int:
        """Write the state of every session touched since the last flush (usage counters)."""
        if self.state is None:
            return 0
        dirty, self._dirty = self._dirty, set()
        written = 0
        for sid in sorted(dirty):
            if await asyncio.to_thread(self._save, sid):
                written += 1
            else:
                self._dirty.add(sid)  # kept for the next try
        return written

    def _save(self, sid: str, *, refreshed: bool = False) -> bool:
        """Write one session's state now (atomic replace); a failure is kept for a retry.

        Saves of one session are serialised and each exports the state at its own
        moment, so the file on disk is never older than a save that already returned.
        A shared store is first re-read if another replica wrote since (`refreshed`: the
        caller just did), and refuses the write if one did meanwhile (`StateConflict`).
        """
        if self.state is None:
            return False
        with self._session_lock(sid):
            try:
                if not refreshed:
                    self._refresh(sid)
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
                self._stats_base[sid] = data["stats"]
                self._store_down = False
            except (OSError, TypeError, ValueError) as exc:
                self.metrics.store_error("state_save")
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
        stats = merge_stats(stored, self.stats.get(sid), self._stats_base.get(sid))
        out = {**data, "stats": stats.to_dict()}
        self._versions[sid] = self.state.save_state(sid, out, expect=version if self.state.shared else None)
        self.stats[sid] = stats
        self._stats_base[sid] = out["stats"]
        return True

    # -- sessions in memory ------------------------------------------------------
    def _ensure_resident(self, sid: str) -> None:
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
                self.stats[sid] = merge_stats(stored, self.stats.get(sid), self._stats_base.get(sid))
                self._stats_base[sid] = stored.to_dict()
                self._versions[sid] = version
        self._note_resident(sid)

    def _note_resident(self, sid: str) -> None:
        """`sid` was just used; tracked only once it holds state (a recall naming an unknown
        session creates nothing to track)."""
        if self.state is not None and sid in self.pilot.session_ids:
            self.residency.touch(sid, time.time())

    def evict(self, sid: str, now: float | None = None, *, force: bool = False) -> bool:
        """Move one session out of memory: saved first (kept if the save fails), then dropped.
        Only while still due (`force`: regardless); False when it stayed."""
        if self.state is None:
            return False
        with self._session_lock(sid):
            if not force and not self.residency.due(sid, time.time() if now is None else now):
                return False  # used again meanwhile
            if sid not in self.pilot.session_ids:
                self.residency.forget(sid)
                return True
            if not self._save(sid) or not self.pilot.unload_session(sid):
                return False  # unsaved, an unstored original or an estimator run: stays for now
            self.residency.evict(sid)  # still dirty if it was: an answer in flight adds usage
            self._last_stable.pop(sid, None)
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
                self._note_store_down(exc)
        self._evicted_untrimmed += n
        if self._evicted_untrimmed and (spare is None or self._evicted_untrimmed >= 64):
            self._evicted_untrimmed = 0
            malloc_trim()
        return n

    async def _evict_periodically(self) -> None:
        every = max(min(self.residency.idle_s / 2, 60.0), 0.05)
        while True:
            await asyncio.sleep(every)
            await asyncio.to_thread(self.evict_idle)

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval_s)
            await self.flush()

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
            for sid, seen in list(self._last_seen.items()):
                if now - seen < lease_s:
                    store.open_session(sid)
                else:
                    self._last_seen.pop(sid, None)
            removed = store.prune(now)
        except OSError as exc:
            log.warning("tokenpilot: could not prune the artifact store: %s", exc)
            return 0
        if removed:
            log.info(
                "tokenpilot: pruned %d artifact(s) of idle sessions to stay under the size limit", removed
            )
        return removed

    async def _prune_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.prune_interval_s)
            await asyncio.to_thread(self.prune)

    # -- the app ------------------------------------------------------------------
    def app(self) -> web.Application:
        from .api_routes import ApiRoutes  # it builds on this module
        from .codex_wire import refuse_websocket

        api = ApiRoutes(self)
        app = web.Application(client_max_size=self.settings.max_body_bytes, middlewares=[self._middleware])
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/responses", api.responses)
        app.router.add_get("/v1/responses", refuse_websocket)  # Codex's WebSocket try: 426, use HTTP
        app.router.add_post("/v1/messages", api.messages)
        app.router.add_post("/v1/messages/count_tokens", api.count_tokens)
        app.router.add_get("/health", self.health)
        app.router.add_get("/tokenpilot/stats", self.stats_view)
        app.router.add_get("/tokenpilot/artifacts/{artifact_id}", self.artifact)
        app.router.add_post("/tokenpilot/tool-result", self.tool_result)
        app.router.add_get("/metrics", self.metrics.view)
        Dashboard(self).add_routes(app)
        app.on_startup.append(lambda _app: self.start())
        app.on_cleanup.append(lambda _app: self.close())
        return app

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Own bearer token (all but /health); every aiohttp error as a JSON body; the
        connection marked busy (see `connections.ConnectionGate`) while its request runs."""
        conn = request.protocol
        self.busy.add(conn)
        try:
            return await self._guarded(request, handler)
        finally:
            self.busy.discard(conn)

    async def _guarded(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """The bearer token (all but /health; the dashboard's cookie for a browser), and
        each answer's latency in `/metrics`."""
        if self._auth_token and request.path != "/health":
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(
                given.encode(), f"Bearer {self._auth_token}".encode()
            ) and not browser_authorized(request, self._auth_token):
                return json_error(
                    401,
                    "missing or wrong bearer token for the TokenPilot proxy",
                    type_="authentication_error",
                    code="invalid_proxy_token",
                )
        with self.metrics.timed(request) as timing:
            timing.status = (answer := await self._answer(request, handler)).status
        return answer

    async def _answer(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        huge = self.trimmer.huge(request.content_length)
        if huge:
            self.trimmer.begin()
        try:
            limit = self.settings.max_body_bytes
            if request.content_length is not None and request.content_length > limit:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
            return await handler(request)
        except BodyStalled:  # a handler's read_body: the client stopped sending its body
            return await self._client_timed_out(request)
        except web.HTTPException as exc:
            if exc.status == 413:
                limit = self.settings.max_body_bytes
                return json_error(
                    413,
                    f"request body larger than the proxy's limit of {limit:,} bytes ({limit / MB:g} MB)",
                    type_="request_too_large",
                    code="request_too_large",
                )
            if exc.status < 400:
                raise
            message = f"{request.method} {request.path}: {exc.reason}"
            return json_error(exc.status, message, type_=_STATUS_TYPES.get(exc.status, "error"))
        except Exception as exc:  # a bug of the proxy: said as JSON, logged once with its traceback
            log.error(
                "tokenpilot: internal error answering %s %s", request.method, request.path, exc_info=exc
            )
            return internal_error(exc)
        finally:
            if huge:  # once the response is out and the request (its body) released
                task = asyncio.get_running_loop().create_task(self._trim_after())
                self._trims.add(task)
                task.add_done_callback(self._trims.discard)

    async def _trim_after(self) -> None:
        await asyncio.sleep(0.05)  # let aiohttp drop the request, whose body it caches
        await asyncio.to_thread(self.trimmer.end)

    async def _client_timed_out(self, request: web.Request) -> web.StreamResponse:
        """408 to a client that stopped sending its body, and the connection closed
        (not drained: it may never send the rest)."""
        log.info("tokenpilot: %s %s: the client sent no body for %g s; closed",
                 request.method, request.path, self.settings.client_timeout_s)  # fmt: skip
        resp = json_error(
            408,
            f"the request body stalled: nothing received for {self.settings.client_timeout_s:g} s",
            type_="client_timeout",
            code="client_timeout",
        )
        resp.force_close()
        await resp.prepare(request)
        await resp.write_eof()
        if request.transport is not None:
            request.transport.close()  # after the answer is written: the transport flushes first
        return resp

    # -- chat completions -------------------------------------------------------
    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
        # outside the slot: a slow sender holds none
        raw = await read_body(request, limit, self.settings.client_timeout_s)
        async with self.trimmer.slot(len(raw)):  # huge bodies parsed and prepared a few at a time
            try:  # any Content-Type: OpenAI's SDKs send JSON, and so does a bare `curl -d`
                body = await self.pools.prepare(functools.partial(_chat_body, raw))
            except wire.BadRequest as exc:
                return json_error(
                    400, str(exc), type_="invalid_request_error", code=exc.code, param=exc.param
                )
            del raw  # parsed: a huge body's bytes go now, not after the upstream's answer

            history, per_call = wire.split_per_call(body["messages"])
            sid = resolve_session_id(body, request.headers)
            prepared: Prepared | None = None
            try:
                prepared = await self.pools.prepare(
                    functools.partial(self._prepare, history, body.get("tools"), sid, request.headers)
                )
            except MessageError as exc:
                return json_error(400, str(exc), type_="invalid_request_error", param="messages")
            except Exception:  # a TokenPilot bug must not stop the agent: forward the request as it came
                log.exception(
                    "tokenpilot: prepare failed for session %s; forwarding the request unchanged", sid
                )
        if prepared is None:  # counted here; a prepared call was counted (and saved) by `_prepare`
            sid = sid or "unidentified"
            self._count_call(sid)
        else:
            sid = prepared.session_id
        stats = self.stats[sid]
        timeline.note_model(stats, body.get("model"))
        self._dirty.add(sid)

        out = wire.upstream_body(body, prepared, per_call, sid)
        stream, wants_usage = body.get("stream") is True, wire.client_wants_usage(body)
        del body, history, per_call, prepared  # the client's messages: `out` holds what goes on
        headers = self.upstream.headers(request.headers, forward_authorization=self._auth_token is None)
        if stream:
            return await self._stream(request, out, headers, stats, wants_usage)
        return await self._complete(out, headers, stats)

    def _prepare(
        self, history: list[Any], tools: Any, sid: str | None, headers: Mapping[str, str]
    ) -> Prepared:
        """TokenPilot's rendering, its state written through before the upstream sees it:
        whatever a provider has cached of this session, a restart (even after kill -9)
        renders again. One worker-thread hop for all of it, so saves never queue behind
        other requests' prepares. A failed save stays in `_dirty` for the next flush."""
        if sid is None:
            sid = self._derive_session_id(history, headers)
        with self._session_lock(sid):  # across replicas: load newer state, prepare, write back
            self._ensure_resident(sid)
            self._refresh_or_note(sid)
            with self.metrics.preparing():
                prepared = self.pilot.prepare(history, tools, session_id=sid)
            self._note_resident(sid)
            self._note_prepared(prepared.session_id, prepared, self._count_call(prepared.session_id))
            self._save(prepared.session_id, refreshed=True)
        if self.residency.max_sessions and len(self.residency) > self.residency.max_sessions:
            self.evict_idle(spare=sid)  # beyond the cap: the least recently used leave
        return prepared

    def _refresh_or_note(self, sid: str) -> None:
        try:
            self._refresh(sid)
        except OSError as exc:
            self._note_store_down(exc)

    def _lock_of(self, sid: str) -> threading.RLock:
        return self._save_locks.setdefault(sid, threading.RLock())

    @contextlib.contextmanager
    def _session_lock(self, sid: str) -> Iterator[None]:
        """The store's session lock (across processes for a shared store); when the store
        cannot give it (Redis down or stalled, or another replica kept the session busy
        for the whole wait), this process's own, so the agent keeps running. Nested calls
        in that thread then take this process's lock too, without asking the store again."""
        fallback: set[str] | None = getattr(self._fallback, "sids", None)
        if fallback is None:
            fallback = self._fallback.sids = set()
        if sid in fallback:
            with self._lock_of(sid):
                yield
            return
        lock = self.state.session_lock(sid) if self.state is not None else self._lock_of(sid)
        try:
            lock.__enter__()
        except OSError as exc:
            if isinstance(exc, LockBusy):  # the store works: a live replica holds the session
                log.warning(
                    "tokenpilot: session %s: %s; serving this call from this process's memory", sid, exc
                )
            else:
                self._note_store_down(exc)
            fallback.add(sid)
            try:
                with self._lock_of(sid):
                    yield
            finally:
                fallback.discard(sid)
            return
        try:
            yield
        finally:
            lock.__exit__(None, None, None)

    def _in_session(self, sid: str, fn: Callable[[], Any]) -> Any:
        """`fn` under the session lock with the newest state, written back after (a shared
        store only: a recall or tool-result call changes state other replicas must see)."""
        if self.state is None or not self.state.shared:
            if self.state is not None:
                with self._session_lock(sid):
                    self._ensure_resident(sid)  # a recall counts in its session's state
            out = fn()
            self._note_resident(sid)  # `reduce_tool_output` may have started the session
            return out
        with self._session_lock(sid):
            self._ensure_resident(sid)
            self._refresh_or_note(sid)
            out = fn()
            self._note_resident(sid)
            if sid in self.pilot.session_ids:
                self._save(sid, refreshed=True)
            return out

    def _estimate_guard(self, sid: str, apply: Callable[[], None]) -> None:
        """A background estimator result joins the session's state as a call's changes do:
        under the store's session lock, on the newest state, written back at once, so
        whichever replica serves the next call applies it (the job it finishes was
        claimed in that state, so no other replica ran the batch)."""
        if self.state is None:
            apply()
            return
        with self._session_lock(sid):
            self._refresh_or_note(sid)
            apply()
            if sid in self.pilot.session_ids and not self._save(sid, refreshed=True):
                self._dirty.add(sid)  # kept for the next flush

    def _count_call(self, sid: str) -> SessionStats:
        stats = self.stats.setdefault(sid, SessionStats())
        stats.calls += 1
        self._last_seen[sid] = time.time()
        return stats

    def _derive_session_id(self, history: list[Any], headers: Mapping[str, str]) -> str:
        """The id of a request without key or session header: its conversation's start and caller."""
        return derived_session_id(self.pilot.derive_session_id(history), credential_fingerprint(headers))

    def _note_store(self, sid: str, unstored: int, warnings: tuple[str, ...]) -> None:
        """A full disk is said once per session (the request still goes, unreduced), and
        once more when the session's outputs are stored again; not once per message."""
        if unstored and sid not in self._store_failing:
            self._store_failing.add(sid)
            why = next((w for w in warnings if w.startswith("artifact store write failed")), "")
            log.error("tokenpilot: session %s: %s", sid, why or f"{unstored} message(s) not stored")
        elif not unstored and sid in self._store_failing:
            self._store_failing.discard(sid)
            log.info(
                "tokenpilot: session %s: the artifact store works again; outputs reduced and stored", sid
            )

    def _note_prepared(self, sid: str, prepared: Prepared, stats: SessionStats) -> None:
        st = prepared.stats
        stats.raw_tokens, stats.sent_tokens = st.raw_tokens, st.tokens
        stats.tokens_saved += st.saved_tokens
        stats.prefix_breaks = max(stats.prefix_breaks, st.prefix_breaks)
        self._note_store(sid, st.unstored, st.warnings)
        prev = self._last_stable.get(sid)
        self._last_stable[sid] = prepared.stable_messages
        prev_tools = self._last_tools.get(sid)
        self._last_tools[sid] = timeline.tool_names(prepared.tools)
        timeline.note_prepared(stats, prepared, prev, prev_tools)
        if st.prefix_break is None:
            return
        stats.last_prefix_break = st.prefix_break
        stats.last_prefix_break_detail = wire.first_difference(
            prev, prepared.stable_messages, at=st.prefix_break_at
        )
        if st.prefix_break == "eviction":
            log.info("tokenpilot: session %s: prefix re-rendered by an eviction", sid)
            return
        log.warning(
            "tokenpilot: session %s: cached prefix broken (%s); %s",
            sid,
            st.prefix_break,
            stats.last_prefix_break_detail,
        )

    async def _complete(
        self, out: dict[str, Any], headers: dict[str, str], stats: SessionStats
    ) -> web.Response:
        resp = await self._send(out, headers, stats)
        if isinstance(resp, web.Response):
            return resp
        try:
            return await self._relay_whole(resp, stats)
        finally:
            resp.release()

    async def _send(
        self,
        out: dict[str, Any],
        headers: dict[str, str],
        stats: SessionStats,
        path: str = "/chat/completions",
    ) -> aiohttp.ClientResponse | web.Response:
        """POST the managed request upstream; a timeout or refusal becomes a 504/502 answer."""
        try:
            return await self.upstream.request("POST", path, headers=headers, data=wire.encode(out))
        except UpstreamTimeout as exc:
            stats.errors += 1
            return json_error(504, str(exc), type_="upstream_timeout", code="upstream_timeout")
        except UpstreamUnreachable as exc:
            stats.errors += 1
            return json_error(502, str(exc), type_="upstream_error", code="upstream_unreachable")

    async def _relay_whole(self, resp: aiohttp.ClientResponse, stats: SessionStats) -> web.Response:
        """A whole upstream answer (errors included) returned as it came; usage recorded."""
        try:
            payload = await resp.read()
        except asyncio.TimeoutError:
            stats.errors += 1
            msg = f"upstream sent nothing for {self.settings.read_timeout_s:g} s"
            return json_error(504, msg, type_="upstream_timeout", code="upstream_timeout")
        except aiohttp.ClientError as exc:
            stats.errors += 1
            return json_error(
                502, f"upstream response broken: {exc}", type_="upstream_error", code="upstream_broken"
            )
        if resp.status != 200:
            stats.errors += 1
            return web.Response(status=resp.status, body=payload, headers=response_headers(resp))
        try:
            obj = wire.loads_bounded(payload, wire.MAX_UPSTREAM_JSON_DEPTH)
        except wire.TooDeep:
            stats.errors += 1
            msg = (
                f"upstream answered 200 with JSON nested deeper than the proxy reads "
                f"({wire.MAX_UPSTREAM_JSON_DEPTH} levels; {len(payload)} bytes)"
            )
            return json_error(502, msg, type_="upstream_error", code="upstream_bad_response")
        except ValueError:  # UnicodeDecodeError included
            stats.errors += 1
            msg = f"upstream answered 200 with a body that is not JSON ({len(payload)} bytes)"
            return json_error(502, msg, type_="upstream_error", code="upstream_bad_response")
        if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
            stats.record_usage(obj["usage"])
        return web.Response(status=resp.status, body=payload, headers=response_headers(resp))

    async def _stream(
        self,
        request: web.Request,
        out: dict[str, Any],
        headers: dict[str, str],
        stats: SessionStats,
        wants_usage: bool,
    ) -> web.StreamResponse:
        resp = await self._send(out, {**headers, "Accept": "text/event-stream"}, stats)
        if isinstance(resp, web.Response):
            return resp
        try:
            if resp.status != 200 or not resp.headers.get("Content-Type", "").startswith("text/event-stream"):
                return await self._relay_whole(resp, stats)
            extra = {k: v for k, v in response_headers(resp).items() if k != "Content-Type"}
            client = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **extra}
            )
            await client.prepare(request)
            try:
                await self._relay_events(resp, client, stats, wants_usage)
            except ConnectionResetError:
                log.info("tokenpilot: client went away during a stream")
            except Exception as exc:  # a proxy bug mid-stream: the stream still ends with an error event
                stats.errors += 1
                log.error("tokenpilot: internal error during a chat stream", exc_info=exc)
                with contextlib.suppress(ConnectionError):
                    await client.write(sse.error_event(internal_error_message(exc), code="internal_error",
                                                       type_="server_error"))  # fmt: skip
            return client
        finally:
            resp.release()

    async def _relay_events(
        self, resp: aiohttp.ClientResponse, client: web.StreamResponse, stats: SessionStats, wants_usage: bool
    ) -> None:
        """Pass events through one by one; end a broken stream with an error event."""
        splitter = sse.SSESplitter()
        done = finished = False
        try:
            async for chunk in _upstream_chunks(resp, self.settings.read_timeout_s):
                for event in splitter.feed(chunk):
                    data = sse.event_data(event)
                    if data == sse.DONE:
                        done = True
                    elif data is not None and b'"usage"' in event:
                        obj = sse.parse_chunk(data)
                        if obj is not None and isinstance(obj.get("usage"), dict):
                            stats.record_usage(obj["usage"])
                            if not wants_usage and not obj.get("choices"):
                                continue  # the client did not ask for the usage-only chunk
                    finished = finished or sse.has_finish_reason(event)
                    await client.write(event)
        except _StreamBroken as exc:
            stats.errors += 1
            await client.write(sse.error_event(str(exc), code=exc.code))
            return
        if not done and not finished:
            stats.errors += 1
            msg = "upstream closed the stream before it finished"
            await client.write(sse.error_event(msg, code="upstream_stream_interrupted"))
            return
        await client.write_eof()

    # -- other endpoints -------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        if self.settings.models:
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "tokenpilot"}
                for m in self.settings.models
            ]
            return web.json_response({"object": "list", "data": data})
        headers = self.upstream.headers(request.headers, forward_authorization=self._auth_token is None)
        try:
            resp = await self.upstream.request("GET", "/models", headers=headers)
            try:
                payload = await resp.read()
            finally:
                resp.release()
        except (UpstreamTimeout, asyncio.TimeoutError) as exc:
            return json_error(
                504, str(exc) or "upstream timed out", type_="upstream_timeout", code="upstream_timeout"
            )
        except (UpstreamUnreachable, aiohttp.ClientError) as exc:
            return json_error(502, str(exc), type_="upstream_error", code="upstream_unreachable")
        return web.Response(status=resp.status, body=payload, headers=response_headers(resp))

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "sessions": len(self.stats),
                "in_memory": len(self.pilot.session_ids),  # the rest wait in the state store
                "uptime_s": round(time.time() - self._started, 1),
                "pid": os.getpid(),  # which worker of `serve --workers` answered
            }
        )

    def fleet_stats(self) -> dict[str, SessionStats]:
        """Every session's stats: with a shared store (Redis, or the disk store of
        `--workers`), all the store holds, whichever replica or worker served it, plus
        what this process counted since it last wrote; else this process's own."""
        if self.state is None or not self.state.shared:
            return dict(self.stats)
        out: dict[str, SessionStats] = {}
        try:
            for _version, data in self.state.load_states():
                sid = data.get("id")
                if not isinstance(sid, str):
                    continue
                try:
                    stored = SessionStats.from_dict(data.get("stats") or {})
                except (TypeError, ValueError):
                    continue
                out[sid] = merge_stats(stored, self.stats.get(sid), self._stats_base.get(sid))
        except OSError as exc:  # the store is down: what this process holds, said once
            self._note_store_down(exc)
        for sid, st in self.stats.items():  # not written yet (or the store failed)
            out.setdefault(sid, st)
        return out

    async def stats_view(self, request: web.Request) -> web.Response:
        """Usage totals and a summary; the per-session stats, keyed by session id, only
        behind `--auth-token-env` or with `--list-sessions`: a session's id is all a recall
        needs, so listing ids to any local caller would hand out every session's originals."""
        fleet = await asyncio.to_thread(self.fleet_stats)
        # the time series stays out (the dashboard draws it): 120 points a session would weigh here
        sessions = {
            sid: {k: v for k, v in st.to_dict().items() if k != "series"} for sid, st in sorted(fleet.items())
        }
        totals = SessionStats()
        for st in fleet.values():
            for name in (*COUNTERS, "prefix_breaks"):
                setattr(totals, name, getattr(totals, name) + getattr(st, name))
        tot = {k: v for k, v in totals.to_dict().items() if not k.startswith("last_") and k not in NOT_TOTALS}
        listed = self._auth_token is not None or self.settings.list_sessions
        body: dict[str, Any] = {"summary": summarize(sessions), "totals": tot, "sessions_listed": listed}
        if listed:
            body["sessions"] = sessions
        return web.json_response({**body, "uptime_s": round(time.time() - self._started, 1)})

    async def artifact(self, request: web.Request) -> web.Response:
        """The original behind an artifact id, for the session that owns it only."""
        q = request.query
        session = query_session(request.rel_url.raw_query_string)
        session = (q.get("session", "") if session is None else session).strip()
        if not session:
            return json_error(
                400,
                "the 'session' query parameter is required",
                type_="invalid_request_error",
                param="session",
            )
        lines: dict[str, int | None] = {}
        for name in ("start_line", "end_line"):
            value = q.get(name)
            try:
                lines[name] = int(value) if value not in (None, "") else None
            except ValueError:
                return json_error(
                    400,
                    f"'{name}' must be an integer, got {value!r}",
                    type_="invalid_request_error",
                    param=name,
                )
        pattern = q.get("pattern") or None
        sid = self._recall_session(session, by_id=True)
        if (refused := _foreign_derived(sid, request.headers)) is not None:
            return refused
        aid = request.match_info["artifact_id"]
        try:
            result = await self.pools.recall.run(
                lambda: self._in_session(
                    sid,
                    lambda: self.pilot.recall(
                        aid, lines["start_line"], lines["end_line"], pattern, session_id=sid
                    ),
                )
            )
        except PoolBusy as exc:  # every recall worker busy, the queue full: come back later
            return busy_error(exc)
        except OSError as exc:  # the store (Redis) is down: say so, the agent may retry
            self.metrics.store_error("artifact_read")
            log.error("tokenpilot: session %s: could not read artifact %s: %s", sid, aid[:40], exc)
            return json_error(503, f"the artifact store cannot be read: {exc}", type_="server_error",
                              code="store_unavailable")  # fmt: skip
        body = {
            "artifact_id": result.artifact_id,
            "session": sid,
            "found": result.found,
            "text": result.text,
            "note": result.note,
            "total_lines": result.total_lines,
            "content": result.for_model(),
        }
        if not result.found:
            body["error"] = {"message": result.note, "type": "not_found", "code": "artifact_not_found"}
            return web.json_response(body, status=404)
        self.note_recall(sid)
        return web.json_response(body)

    def note_recall(self, sid: str) -> None:
        """An original read back for the session's agent (counted for the dashboard and /metrics)."""
        stats = self.stats.setdefault(sid, SessionStats())
        stats.recalls += 1
        self._dirty.add(sid)

    async def tool_result(self, request: web.Request) -> web.Response:
        """Reduce a tool output before the host keeps it (the plugin's tool-result middleware).

        Body: `{"session": <OpenClaw sessionId>, "tool": name, "arguments": object or str,
        "text": the whole output}`. Answers `{"reduced", "content", "artifact_id"}`; the host
        stores `content` in place of the output, so its replays never differ from the live
        call, and the original it had not cut yet is what `recall_artifact` returns.
        """
        try:
            body = wire.parse_body(
                await read_body(request, self.settings.max_body_bytes, self.settings.client_timeout_s)
            )
        except wire.BadRequest as exc:
            return json_error(400, str(exc), type_="invalid_request_error", code=exc.code)
        if not isinstance(body, dict):
            return json_error(400, "the body must be a JSON object", type_="invalid_request_error")
        session, text, tool = body.get("session"), body.get("text"), body.get("tool", "")
        for name, value in (("session", session), ("text", text), ("tool", tool)):
            if not isinstance(value, str) or (name == "session" and not value.strip()):
                return json_error(
                    400, f"'{name}' must be a non-empty string" if name == "session" else f"'{name}' must be a string",
                    type_="invalid_request_error", param=name,
                )  # fmt: skip
        args = body.get("arguments")
        arguments = (
            args if isinstance(args, str) else json.dumps(args if args is not None else {}, sort_keys=True)
        )
        sid = self._recall_session(session)
        if (refused := _foreign_derived(sid, request.headers)) is not None:
            return refused
        try:
            got = await self.pools.prepare(
                lambda: self._in_session(
                    sid, lambda: self.pilot.reduce_tool_output(text, tool, arguments, session_id=sid)
                )
            )
        except OSError as exc:  # a full disk: the host keeps its own handling of the output
            log.error("tokenpilot: session %s: could not store a tool output: %s", sid, exc)
            return json_error(503, f"the artifact store cannot keep the output: {exc}", type_="server_error",
                              code="store_unavailable")  # fmt: skip
        self._dirty.add(sid)
        return web.json_response(
            {
                "session": sid,
                "reduced": got.artifact_id is not None,
                "content": got.text,
                "artifact_id": got.artifact_id,
            }
        )

    def _recall_session(self, session: str, *, by_id: bool = False) -> str:
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


def _stores(
    settings: ProxySettings, config: Config | None, pilot: TokenPilot | None
) -> tuple[TokenPilot, Store | None]:
    """The pilot and where session state goes: the `--store` URL for both (shared by
    replicas), else the store directory and the state directory of this machine."""
    if settings.store_url:
        shared = open_redis(
            settings.store_url,
            lock_ttl_s=settings.store_lock_ttl_s,
            lock_wait_s=settings.store_lock_wait_s,
            socket_timeout_s=settings.store_timeout_s,
        )
        pilot = pilot or TokenPilot(config, store=shared)
        return pilot, (shared if settings.state_dir is not None else None)
    pilot = pilot or TokenPilot(config, store=ArtifactStore(Path(settings.store_dir).expanduser()))
    if isinstance(pilot.store, Store) and pilot.store.shared:
        return pilot, pilot.store
    if settings.state_dir is None:
        return pilot, None
    # several workers on one folder: file locks and stored versions, as replicas on Redis
    return pilot, DiskStore(pilot.store, settings.state_dir, shared=settings.workers > 1)


def _foreign_derived(sid: str, headers: Mapping[str, str]) -> web.Response | None:
    """A 403 when `sid` is a derived session of other credentials (its artifacts are theirs)."""
    owned, owner = derived_owner(sid)
    if not owned or owner == credential_fingerprint(headers):
        return None
    return json_error(
        403,
        f"session {sid} was derived from a conversation sent with other credentials: its "
        "artifacts go only to a caller with the same Authorization / x-api-key header",
        type_="permission_error",
        code="session_forbidden",
        param="session",
    )


def _chat_body(raw: bytes) -> dict[str, Any]:
    """Parse and check a chat request body (off the event loop: a big body takes a while)."""
    return wire.check_chat_body(wire.parse_body(raw))


class _StreamBroken(Exception):
    """The upstream stream stopped early; `code` tells the client why."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


async def _upstream_chunks(resp: aiohttp.ClientResponse, read_timeout_s: float) -> AsyncIterator[bytes]:
    """The upstream body as it arrives; read failures become `_StreamBroken` (client write errors do not)."""
    try:
        async for chunk in resp.content.iter_any():
            yield chunk
    except asyncio.TimeoutError as exc:
        raise _StreamBroken(
            f"upstream sent nothing for {read_timeout_s:g} s; stream ended by the TokenPilot proxy",
            "upstream_timeout",
        ) from exc
    except (aiohttp.ClientError, ConnectionError) as exc:
        raise _StreamBroken(f"upstream stream interrupted: {exc}", "upstream_stream_interrupted") from exc
