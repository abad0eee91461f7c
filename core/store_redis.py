"""The shared backend: originals and session state in one Redis, for proxy replicas.

Any replica can serve any request of any session: state is read and written under a
per-session Redis lock, and every write is one atomic Lua script, so a reader sees a
whole old state or a whole new one, never half of each.

Keys (`ns` is the namespace, `h` the hex of the session id's surrogatepass UTF-8, so
lone surrogates are keyable and no session id can be a key prefix of another's):
    ns:a:h:<artifact id>   an original (bytes), written once (SET NX)
    ns:as:h                the set of the session's artifact ids (listing never scans)
    ns:s:h                 hash {v: version, d: state JSON}
    ns:leases              sorted set h -> last activity (0: closed), as ArtifactStore's leases
    ns:volume              bytes of originals held
    ns:lock:h              the session lock (a token with a short TTL renewed while held;
                           only its owner releases it: `store_lock`)

Size bound: `prune` drops whole sessions that are not live (lease older than `lease_s`
or closed), oldest first, until the volume is under the limit; the lease is re-checked
inside the deleting script, so a session that became live meanwhile is kept. A dead
replica's lock lapses within `lock_ttl_s` (its heartbeat stopped); a writer whose lock
lapsed is stopped by `save_state(expect=...)`, which refuses to overwrite a newer version.

Liveness: a command waits at most `socket_timeout_s` (1 s). One timeout opens a circuit
breaker (`store_breaker`): commands then fail at once, as when Redis refuses, until a
background probe sees Redis answer; locks the stalled commands may have left are then
deleted, and recovery listeners run (the proxy writes back what it served from memory).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._canonical import ARTIFACT_PREFIX, artifact_id_for, from_bytes, to_bytes
from .artifacts import RecallResult, recall_from
from .errors import ArtifactNotFound, StoreError
from .store import StateConflict, StoreUnanswered, redact_store_url
from .store_breaker import Breaker
from .store_lock import RedisLocks, SessionLock

log = logging.getLogger("tokenpilot")

_ID_RE = re.compile(r"^" + ARTIFACT_PREFIX + r"[0-9a-f]{8,64}$")
_TOUCH_EVERY_S = 60  # as ArtifactStore: a lease is refreshed by writes at most once a minute

# KEYS: artifact, session's id set, volume, leases. ARGV: bytes, id, now, session hex,
# seconds between lease refreshes.
_PUT = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('SADD', KEYS[2], ARGV[2])
  redis.call('INCRBY', KEYS[3], string.len(ARGV[1]))
end
local last = redis.call('ZSCORE', KEYS[4], ARGV[4])
if (not last) or (tonumber(last) > 0 and tonumber(ARGV[3]) - tonumber(last) > tonumber(ARGV[5])) then
  redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
end
return 1
"""

# KEYS: state hash, leases. ARGV: JSON, expected version ('' for any), now, session hex.
# Returns the new version, or -(current + 1) when `expect` is not the current version.
_SAVE = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= cur then return -(cur + 1) end
cur = cur + 1
redis.call('HSET', KEYS[1], 'v', cur, 'd', ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return cur
"""

# KEYS: leases, session's id set, volume, state hash. ARGV: session hex, now, lease_s,
# artifact key prefix. Drops the session only if it is still not live; returns the number
# of artifacts removed, or -1 when the session was kept.
_PRUNE_SESSION = """
local t = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not t then return -1 end
t = tonumber(t)
if t ~= 0 and tonumber(ARGV[2]) - t <= tonumber(ARGV[3]) then return -1 end
local ids = redis.call('SMEMBERS', KEYS[2])
local freed = 0
for _, aid in ipairs(ids) do
  local k = ARGV[4] .. aid
  freed = freed + redis.call('STRLEN', k)
  redis.call('DEL', k)
end
redis.call('DEL', KEYS[2], KEYS[4])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DECRBY', KEYS[3], freed)
return #ids
"""


_OWN_QUERY = ("namespace", "lock_ttl", "lock_wait")  # ours; redis-py knows the others


def _split_own(url: str) -> tuple[str, dict[str, str]]:
    """`url` without the query parameters that are ours (redis-py does not know them), and them."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_QUERY}
    rest = urlencode([(k, v) for k, v in query if k not in _OWN_QUERY])
    return urlunsplit(parts._replace(query=rest)), own


def _seconds(own: dict[str, str], name: str, default: float, *, positive: bool) -> float:
    """A time from the URL (`?lock_ttl=5`), else `default`; `ValueError` when out of range."""
    raw = own.get(name)
    value = default if raw is None else float(raw)
    if not (value > 0 if positive else value >= 0) or value != value or value == float("inf"):
        raise ValueError(f"{name} must be a {'positive' if positive else 'non-negative'} number of seconds")
    return value


def _reason(exc: RedisError) -> str:
    """The failure in a few words, without the URL: model-visible in an unstored note (I2)."""
    if isinstance(exc, RedisTimeoutError):
        return "Redis timed out"
    if isinstance(exc, RedisConnectionError):
        return "Redis unreachable"
    if str(exc).startswith("OOM"):
        return "Redis out of memory"
    return "Redis error"


class RedisStore:
    """`Store` on Redis, shared by processes. `url` is `redis://[:password@]host:port/db`,
    optionally with `?namespace=NAME` (default "tokenpilot") to keep several deployments
    apart in one database, `lock_ttl=S` and `lock_wait=S` (seconds; they override the
    arguments of the same names), and redis-py's own `socket_timeout=S`.

    `lock_ttl_s`: how long a session lock outlives a holder that stopped renewing it (it
    is renewed every ttl/5 while held). `lock_wait_s`: how long a caller waits for a lock
    that another replica holds and renews, before `LockBusy`. `socket_timeout_s`: how
    long one command may stay unanswered before the store is skipped (see module doc).
    """

    shared = True

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "tokenpilot",
        size_limit_bytes: int = 4 * 2**30,
        lease_s: float = 24 * 3600,
        lock_ttl_s: float = 5.0,
        lock_wait_s: float = 30.0,
        socket_timeout_s: float = 1.0,
        probe_interval_s: float = 0.5,
    ) -> None:
        bare, own = _split_own(url)
        self.url = redact_store_url(url)
        self.namespace = own.get("namespace") or namespace
        self.size_limit_bytes = size_limit_bytes
        self.lease_s = lease_s
        try:
            self.lock_ttl_s = _seconds(own, "lock_ttl", lock_ttl_s, positive=True)
            self.lock_wait_s = _seconds(own, "lock_wait", lock_wait_s, positive=False)
            self._r = redis.Redis.from_url(
                bare, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s
            )
        except ValueError as exc:
            raise StoreError(f"bad Redis store URL {self.url}: {exc}", "bad Redis URL") from exc
        self._put = self._r.register_script(_PUT)
        self._save = self._r.register_script(_SAVE)
        self._prune_one = self._r.register_script(_PRUNE_SESSION)
        self._prune_lock = threading.Lock()
        self._breaker = Breaker(
            f"Redis store ({self.url})", self._probe, self._recover, interval_s=probe_interval_s
        )
        self._locks = RedisLocks(
            self._r, self._failures, ttl_s=self.lock_ttl_s, wait_s=self.lock_wait_s, url=self.url
        )

    # -- keys ---------------------------------------------------------------------
    @staticmethod
    def _hex(session_id: str) -> str:
        return to_bytes(session_id).hex()

    def _k(self, kind: str, session_id: str | None = None) -> str:
        return f"{self.namespace}:{kind}" + ("" if session_id is None else f":{self._hex(session_id)}")

    def _art_prefix(self, session_id: str) -> str:
        return self._k("a", session_id) + ":"

    @contextmanager
    def _failures(self, action: str) -> Iterator[None]:
        """Redis failures as `StoreError` naming the URL (never its password). While the
        breaker is open the command is not sent; a timeout opens it (`StoreUnanswered`:
        the command may still run when Redis resumes)."""
        self._breaker.check(action)
        try:
            yield
        except StoreError:
            raise
        except RedisTimeoutError as exc:
            self._breaker.trip(str(exc), _reason(exc))
            raise StoreUnanswered(f"Redis store {action} failed ({self.url}): {exc}", _reason(exc)) from exc
        except RedisError as exc:
            raise StoreError(f"Redis store {action} failed ({self.url}): {exc}", _reason(exc)) from exc

    def ping(self) -> None:
        """`StoreError` naming the URL when Redis does not answer."""
        with self._failures("connect"):
            self._r.ping()

    # -- liveness -------------------------------------------------------------------
    @property
    def available(self) -> bool:
        """False while the breaker skips Redis (it stopped answering)."""
        return not self._breaker.is_open

    def add_recovery_listener(self, fn: Callable[[], None]) -> None:
        """`fn()` runs (in a background thread) each time Redis answers again after a stall."""
        self._breaker.add_listener(fn)

    def _probe(self) -> None:
        """Two answers a moment apart: commands that the stall held in the server's socket
        buffers run as soon as it resumes, before the second answer, so `_recover` sees them."""
        self._r.ping()
        time.sleep(0.1)
        self._r.ping()

    def _recover(self) -> None:
        dropped = self._locks.drop_orphans()
        if dropped:
            log.info(
                "tokenpilot: dropped %d session lock(s) left in %s by stalled commands", dropped, self.url
            )

    # -- artifacts ----------------------------------------------------------------
    def put(self, session_id: str, data: str | bytes) -> str:
        """Store `data` for the session (atomically with its listing and lease); its id."""
        raw = to_bytes(data) if isinstance(data, str) else bytes(data)
        aid = artifact_id_for(raw)
        keys = [
            self._art_prefix(session_id) + aid,
            self._k("as", session_id),
            self._k("volume"),
            self._k("leases"),
        ]
        with self._failures("write"):
            self._put(keys=keys, args=[raw, aid, time.time(), self._hex(session_id), _TOUCH_EVERY_S])
        return aid

    def get_bytes(self, session_id: str, artifact_id: str) -> bytes:
        if not isinstance(artifact_id, str) or not _ID_RE.match(artifact_id.strip()):
            raise ArtifactNotFound(str(artifact_id), session_id)
        with self._failures("read"):
            raw = self._r.get(self._art_prefix(session_id) + artifact_id.strip())
        if raw is None:
            raise ArtifactNotFound(artifact_id, session_id)
        return bytes(raw)

    def get(self, session_id: str, artifact_id: str) -> str:
        return from_bytes(self.get_bytes(session_id, artifact_id))

    def __contains__(self, key: tuple[str, str]) -> bool:
        session_id, artifact_id = key
        with self._failures("read"):
            return bool(self._r.exists(self._art_prefix(session_id) + artifact_id))

    def artifact_ids(self, session_id: str) -> Iterator[str]:
        with self._failures("read"):
            members = self._r.smembers(self._k("as", session_id))
        for m in sorted(x.decode("ascii") for x in members):
            if _ID_RE.match(m):
                yield m

    def recall(
        self,
        session_id: str,
        artifact_id: str,
        start_line: int | None = None,
        end_line: int | None = None,
        pattern: str | None = None,
    ) -> RecallResult:
        """The same answers as `ArtifactStore.recall` (`recall_from`)."""
        return recall_from(self.get, session_id, artifact_id, start_line, end_line, pattern)

    def open_session(self, session_id: str) -> None:
        with self._failures("write"):
            self._r.zadd(self._k("leases"), {self._hex(session_id): time.time()})

    def close_session(self, session_id: str) -> None:
        with self._failures("write"):
            self._r.zadd(self._k("leases"), {self._hex(session_id): 0.0})

    def volume(self) -> int:
        with self._failures("read"):
            return int(self._r.get(self._k("volume")) or 0)

    def prune(self, now: float | None = None) -> int:
        """Drop sessions that are not live, oldest first, until under the limit (see module doc).

        Their artifacts and state go together: a session resumed after that starts afresh
        rather than pointing at originals that are gone. Live sessions are never touched.
        """
        with self._prune_lock, self._failures("prune"):
            if self.volume() <= self.size_limit_bytes:
                return 0
            now = time.time() if now is None else now
            dead = self._r.zrangebyscore(self._k("leases"), "-inf", now - self.lease_s)
            removed = 0
            for member in dead:
                h = member.decode("ascii")
                sid = from_bytes(bytes.fromhex(h))
                keys = [self._k("leases"), self._k("as", sid), self._k("volume"), self._k("s", sid)]
                n = int(self._prune_one(keys=keys, args=[h, now, self.lease_s, self._art_prefix(sid)]))
                removed += max(n, 0)
                if self.volume() <= self.size_limit_bytes:
                    break
            return removed

    def close(self) -> None:
        self._breaker.close()
        self._locks.close()
        self._r.close()

    # -- state --------------------------------------------------------------------
    def state_version(self, session_id: str) -> int:
        with self._failures("read"):
            return int(self._r.hget(self._k("s", session_id), "v") or 0)

    def load_state(self, session_id: str) -> tuple[int, dict[str, Any]] | None:
        with self._failures("read"):
            v, d = self._r.hmget(self._k("s", session_id), ["v", "d"])
        if v is None or d is None:
            return None
        return int(v), json.loads(d)

    def save_state(self, session_id: str, data: Mapping[str, Any], *, expect: int | None = None) -> int:
        """Write the state and bump its version in one script; `StateConflict` if `expect` is stale."""
        text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
        keys = [self._k("s", session_id), self._k("leases")]
        args = [text, "" if expect is None else int(expect), time.time(), self._hex(session_id)]
        with self._failures("write"):
            got = int(self._save(keys=keys, args=args))
        if got < 0:
            raise StateConflict(
                f"session {session_id!r}: stored state is at version {-got - 1}, not {expect}; "
                "another replica wrote it",
                "state conflict",
            )
        return got

    def load_states(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every session with stored state (sessions are listed by their leases)."""
        with self._failures("read"):
            members = self._r.zrange(self._k("leases"), 0, -1)
            pipe = self._r.pipeline(transaction=False)
            for m in members:
                pipe.hmget(f"{self.namespace}:s:{m.decode('ascii')}", ["v", "d"])
            rows = pipe.execute()
        for v, d in rows:
            if v is not None and d is not None:
                try:
                    yield int(v), json.loads(d)
                except ValueError as exc:
                    log.warning("tokenpilot: skipping unreadable session state in %s: %s", self.url, exc)

    def session_lock(self, session_id: str) -> SessionLock:
        return self._locks.lock(session_id, self._k("lock", session_id))
