"""The shared backend: originals and session state in one Redis, for proxy replicas.

Any replica can serve any request of any session: state is read and written under a
per-session Redis lock, and every write is one atomic Lua script, so a reader sees a
whole old state or a whole new one, never half of each.

Keys (`ns` is the namespace, `h` the hex of the session id's surrogatepass UTF-8, so
lone surrogates are keyable and no session id can be a key prefix of another's). Every
key of one session carries the hash tag `{h}`, so each script touches one slot and the
store runs on a Redis Cluster (`?cluster=1`) as on one server:
    ns:a:{h}:<artifact id>  an original (bytes), written once (SET NX)
    ns:as:{h}               the set of the session's artifact ids (listing never scans)
    ns:s:{h}                the state's head: hash {v: version, d: head JSON} (`journal`)
    ns:j:{h}                the state's chunks: hash digest -> JSON, each written once
    ns:l:{h}                the session's lease: last activity (0: closed)
    ns:lock:{h}             the session lock (a token with a short TTL renewed while held;
                            only its owner releases it: `store_lock`)
    ns:leases               sorted set h -> last activity: the index of sessions (listing,
                            prune candidates); a hint, each lease is re-checked in its slot
    ns:volume               bytes of originals held
A state is saved as its new chunks and its head in one script (with the version check),
so a reader sees a whole old state or a whole new one; a save sends only the chunks this
process has not seen in the store at the version it holds, a read fetches those it does not
hold parsed (the others checked by name: `journal.Read`). Chunks no head reaches are
collected when the chunk hash holds twice the live ones, and when the session is closed.
The two global keys are updated by separate commands after a session's script (a crash
in between can leave `volume` short by one original); a session is indexed before its
first write, so none is ever unlisted. States written before the journal and the hash
tags (`ns:s:h`, `ns:a:h:*`, `ns:as:h`) still load on a single server; their next save
writes the new keys.

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
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._canonical import ARTIFACT_PREFIX, artifact_id_for, from_bytes, to_bytes
from ..errors import ArtifactNotFound, StoreError
from . import journal
from .artifacts import RecallResult, recall_from
from .breaker import Breaker
from .protocol import StateConflict, StoreUnanswered, redact_store_url
from .redis_known import Known
from .redis_lock import RedisLocks, SessionLock
from .redis_scripts import COLLECT, PRUNE_SESSION, PUT, READ, SAVE
from .redis_url import flag, seconds, split_own

log = logging.getLogger("tokenpilot")

_ID_RE = re.compile(r"^" + ARTIFACT_PREFIX + r"[0-9a-f]{8,64}$")
_TOUCH_EVERY_S = 60  # as ArtifactStore: a lease is refreshed by writes at most once a minute
_MANY_PER_SCRIPT = 64  # artifacts per `put_many` script: a bounded argument list per call

_COLLECT_SLACK = 64  # chunks beyond twice the live ones before a save collects


def _reason(exc: RedisError | RedisClusterException) -> str:
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
    arguments of the same names), `cluster=1` for a Redis Cluster (the URL names any of
    its nodes; redis-py's `RedisCluster` finds the others), and redis-py's own
    `socket_timeout=S`.

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
        bare, own = split_own(url)
        self.url = redact_store_url(url)
        self.namespace = own.get("namespace") or namespace
        self.size_limit_bytes = size_limit_bytes
        self.lease_s = lease_s
        try:
            self.lock_ttl_s = seconds(own, "lock_ttl", lock_ttl_s, positive=True)
            self.lock_wait_s = seconds(own, "lock_wait", lock_wait_s, positive=False)
            self.cluster = flag(own, "cluster")
            client_cls: Any = RedisCluster if self.cluster else redis.Redis
            self._r = client_cls.from_url(
                bare, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s
            )
        except (ValueError, RedisClusterException) as exc:
            raise StoreError(f"bad Redis store URL {self.url}: {exc}", "bad Redis URL") from exc
        scripts = (self._r.register_script(x) for x in (PUT, SAVE, PRUNE_SESSION, COLLECT, READ))
        self._put, self._save, self._prune_one, self._collect, self._read = scripts
        self._known = Known()
        self.bytes_written = 0  # state bytes sent (heads and chunks), for benchmarks
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
        """A key; a session's keys carry the hash tag `{h}` (one slot per session)."""
        return f"{self.namespace}:{kind}" + ("" if session_id is None else f":{{{self._hex(session_id)}}}")

    def _art_prefix(self, session_id: str) -> str:
        return self._k("a", session_id) + ":"

    def _old(self, kind: str, session_id: str) -> str | None:
        """A key of the layout before hash tags (`ns:kind:h`), read on a single server only."""
        return None if self.cluster else f"{self.namespace}:{kind}:{self._hex(session_id)}"

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
        except (RedisError, RedisClusterException) as exc:
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
        return self._put_items(session_id, [data])[0]

    def put_many(self, session_id: str, items: Sequence[str | bytes]) -> list[str]:
        """`put` for each item, in one script per `_MANY_PER_SCRIPT` items (an eviction
        archives a few dozen segments at once: one round trip instead of one each); their
        ids, in order. A subclass that overrides `put` gets its `put` per item."""
        if type(self).put is not RedisStore.put:
            return [self.put(session_id, d) for d in items]
        return self._put_items(session_id, items)

    def _put_items(self, session_id: str, items: Sequence[str | bytes]) -> list[str]:
        """Each item stored, listed and counted once, atomically per script; their ids."""
        raws = [to_bytes(d) if isinstance(d, str) else bytes(d) for d in items]
        ids = [artifact_id_for(raw) for raw in raws]
        prefix = self._art_prefix(session_id)
        fixed = [self._k("as", session_id), self._k("l", session_id)]
        for at in range(0, len(raws), _MANY_PER_SCRIPT):
            part = range(at, min(at + _MANY_PER_SCRIPT, len(raws)))
            now = time.time()
            args: list[Any] = [now, _TOUCH_EVERY_S]
            for i in part:
                args += [raws[i], ids[i]]
            with self._failures("write"):
                self._index(session_id, now)
                added, touched = self._put(keys=fixed + [prefix + ids[i] for i in part], args=args)
                self._account(session_id, int(added), now if touched else None)
        return ids

    def _index(self, session_id: str, now: float) -> None:
        """List the session in `ns:leases` before its first write from this process (NX:
        an existing score stays), so no crash leaves data that no listing finds."""
        h = self._hex(session_id)
        if self._known.indexed_since(h, now - _TOUCH_EVERY_S):
            return
        self._r.zadd(self._k("leases"), {h: now}, nx=True)
        self._known.note_indexed(h, now)

    def _account(self, session_id: str, added: int, touched: float | None) -> None:
        """The global keys after a session's script: the volume, the index's activity."""
        if not added and touched is None:
            return
        pipe = self._r.pipeline(transaction=False)
        if added:
            pipe.incrby(self._k("volume"), added)
        if touched is not None:
            pipe.zadd(self._k("leases"), {self._hex(session_id): touched})
        pipe.execute()

    def get_bytes(self, session_id: str, artifact_id: str) -> bytes:
        if not isinstance(artifact_id, str) or not _ID_RE.match(artifact_id.strip()):
            raise ArtifactNotFound(str(artifact_id), session_id)
        with self._failures("read"):
            raw = self._r.get(self._art_prefix(session_id) + artifact_id.strip())
            old = self._old("a", session_id)
            if raw is None and old is not None:  # stored before the hash tags
                raw = self._r.get(f"{old}:{artifact_id.strip()}")
        if raw is None:
            raise ArtifactNotFound(artifact_id, session_id)
        return bytes(raw)

    def get(self, session_id: str, artifact_id: str) -> str:
        return from_bytes(self.get_bytes(session_id, artifact_id))

    def __contains__(self, key: tuple[str, str]) -> bool:
        session_id, artifact_id = key
        old = self._old("a", session_id)
        with self._failures("read"):
            if self._r.exists(self._art_prefix(session_id) + artifact_id):
                return True
            return old is not None and bool(self._r.exists(f"{old}:{artifact_id}"))

    def artifact_ids(self, session_id: str) -> Iterator[str]:
        old = self._old("as", session_id)
        with self._failures("read"):
            members = self._r.smembers(self._k("as", session_id))
            if old is not None:
                members |= self._r.smembers(old)
        for m in sorted(x.decode("ascii") for x in members):
            if _ID_RE.match(m):
                yield m

    def sessions(self) -> list[tuple[str, float]]:
        """(session id, last write time) from the index `ns:leases`, the latest first."""
        with self._failures("read"):
            rows = self._r.zrange(self._k("leases"), 0, -1, withscores=True)
        found = [(from_bytes(bytes.fromhex(h.decode("ascii"))), float(t)) for h, t in rows]
        return sorted(found, key=lambda st: (-st[1], st[0]))

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
        self._lease(session_id, time.time())

    def close_session(self, session_id: str) -> None:
        """Mark the session closed (prunable) and collect its state's unreferenced chunks."""
        self._lease(session_id, 0.0)
        try:
            self._collect_all(session_id)
        except (StoreError, ValueError) as exc:  # put off: the chunks are still all there
            log.warning("tokenpilot: could not collect the state of session %r: %s", session_id, exc)

    def _lease(self, session_id: str, at: float) -> None:
        """The session's own lease (what prune re-checks), then its entry in the index."""
        with self._failures("write"):
            pipe = self._r.pipeline(transaction=False)
            pipe.set(self._k("l", session_id), at)
            pipe.zadd(self._k("leases"), {self._hex(session_id): at})
            pipe.execute()

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
                keys = [self._k("as", sid), self._k("s", sid), self._k("j", sid), self._k("l", sid)]
                args: list[Any] = [h, now, self.lease_s, self._art_prefix(sid)]
                old_set, old_state, old_art = self._old("as", sid), self._old("s", sid), self._old("a", sid)
                if old_set is not None and old_state is not None and old_art is not None:
                    keys += [old_set, old_state, self._k("leases")]  # the layout before hash tags
                    args.append(old_art + ":")
                n, freed = (int(x) for x in self._prune_one(keys=keys, args=args))
                if n < 0:
                    continue
                pipe = self._r.pipeline(transaction=False)
                pipe.decrby(self._k("volume"), freed)
                pipe.zrem(self._k("leases"), h)
                pipe.execute()
                self._known.forget(h)
                removed += n
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
            v = self._r.hget(self._k("s", session_id), "v")
            old = self._old("s", session_id)
            if v is None and old is not None:
                v = self._r.hget(old, "v")
        return int(v or 0)

    def load_state(self, session_id: str) -> tuple[int, dict[str, Any]] | None:
        """The head, then the chunks it reaches (one round trip per level of references)."""
        with self._failures("read"):
            v, d = self._r.hmget(self._k("s", session_id), ["v", "d"])
            old = self._old("s", session_id)
            if (v is None or d is None) and old is not None:  # written before the journal
                v, d = self._r.hmget(old, ["v", "d"])
            if v is None or d is None:
                return None
            return self._decode(session_id, int(v), d)

    def _decode(
        self, session_id: str, version: int, d: bytes, fields: Collection[str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """A stored document as (version, state): a journal head is joined with its chunks
        (remembered as stored), a state of the old layout is taken whole. `fields`: only
        those keys and the chunks they reach (not remembered: a save counts on whole heads)."""
        head = json.loads(d)
        if not journal.is_head(head):
            return version, journal.picked(head, fields)
        key = self._k("j", session_id)

        def read(wanted: list[str], held: list[str]) -> tuple[dict[str, str], list[str]]:
            texts, lost = self._read(keys=[key], args=[len(wanted), *wanted, *held])
            got = zip(wanted, texts, strict=True)
            return {dg: t.decode("ascii") for dg, t in got if t is not None}, [x.decode() for x in lost]

        state, reached = journal.join(head, lambda ds: read(ds, [])[0], fields, read)
        if fields is None:
            self._known.remember(self._hex(session_id), version, reached)
        return version, state

    def save_state(self, session_id: str, data: Mapping[str, Any], *, expect: int | None = None) -> int:
        """Write the state's new chunks and its head, and bump its version, in one script;
        `StateConflict` if `expect` is stale (nothing is written then).

        Only chunks this process has not seen stored at version `expect` are sent: chunks
        the head at that version reaches stay until a head at a later version replaces it
        (collection checks the version), so a save at `expect` can count on them."""
        h = self._hex(session_id)
        cut = journal.split(data)
        new = cut.new_chunks(self._known.chunks_at(h, expect))
        keys = [self._k("s", session_id), self._k("j", session_id), self._k("l", session_id)]
        old = self._old("s", session_id)
        if old is not None:
            keys.append(old)
        now = time.time()
        args: list[Any] = [cut.head(), "" if expect is None else int(expect), now]
        for dg, text in new.items():
            args += [dg, text]
        with self._failures("write"):
            self._index(session_id, now)
            got = [int(x) for x in self._save(keys=keys, args=args)]
        if got[0] < 0:
            raise StateConflict(
                f"session {session_id!r}: stored state is at version {-got[0] - 1}, not {expect}; "
                "another replica wrote it",
                "state conflict",
            )
        self.bytes_written += len(args[0]) + sum(len(dg) + len(t) for dg, t in new.items())
        version, held_chunks = got
        self._known.remember(h, version, set(cut.chunks))
        if held_chunks > 2 * len(cut.chunks) + _COLLECT_SLACK:
            self._collect_chunks(session_id, version, cut.chunks)
        return version

    def _collect_chunks(self, session_id: str, version: int, live: Iterator[str] | Mapping[str, str]) -> int:
        """Delete the session's chunks that the head at `version` does not reach (nothing if
        the head moved on meanwhile); the number deleted, or -1."""
        keys = [self._k("s", session_id), self._k("j", session_id)]
        with self._failures("write"):
            return int(self._collect(keys=keys, args=[version, *live]))

    def _collect_all(self, session_id: str) -> int:
        """Collect against the stored head, whatever this process holds of it."""
        with self._failures("read"):
            v, d = self._r.hmget(self._k("s", session_id), ["v", "d"])
        if v is None or d is None:
            return 0
        head = json.loads(d)
        if not journal.is_head(head):
            return 0
        key = self._k("j", session_id)

        def fetch(digests: list[str]) -> dict[str, str]:
            with self._failures("read"):
                texts = self._r.hmget(key, digests)
            return {dg: t.decode("ascii") for dg, t in zip(digests, texts, strict=True) if t is not None}

        return self._collect_chunks(session_id, int(v), journal.reachable(head, fetch))

    def load_states(self, fields: Collection[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every session with stored state (sessions are listed by the index `ns:leases`);
        `fields`: only those top-level keys of each (`journal.join`)."""
        with self._failures("read"):
            members = [m.decode("ascii") for m in self._r.zrange(self._k("leases"), 0, -1)]
            pipe = self._r.pipeline(transaction=False)
            for h in members:
                pipe.hmget(f"{self.namespace}:s:{{{h}}}", ["v", "d"])
                if not self.cluster:
                    pipe.hmget(f"{self.namespace}:s:{h}", ["v", "d"])
            rows = pipe.execute()
        step = 1 if self.cluster else 2
        for i, h in enumerate(members):
            v, d = rows[i * step]
            if (v is None or d is None) and step == 2:
                v, d = rows[i * step + 1]
            if v is None or d is None:
                continue
            try:
                sid = from_bytes(bytes.fromhex(h))
                with self._failures("read"):
                    got = self._decode(sid, int(v), d, None if fields is None else {"id", *fields})
            except ValueError as exc:
                log.warning("tokenpilot: skipping unreadable session state in %s: %s", self.url, exc)
                continue
            yield got

    def session_lock(self, session_id: str) -> SessionLock:
        return self._locks.lock(session_id, self._k("lock", session_id))
