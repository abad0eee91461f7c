"""The store protocol: where originals and per-session state live, behind one interface.

Two backends implement it: `DiskStore` (`store_disk`: the diskcache `ArtifactStore` plus
one JSON file per session; embedded, one process) and `RedisStore` (`store_redis`: one
Redis shared by any number of proxy replicas). `TokenPilot` needs only the artifact half
(`Artifacts`, which a bare `ArtifactStore` satisfies); the proxy uses all of `Store`.

The protocol names no backend: `store_open` picks one from a spec (an object, a
directory, a `redis://` URL).

A backend with `shared = True` can be written by other processes at any time: its user
must take `session_lock`, reload a session whose `state_version` moved past the version
it holds, write back with `save_state(..., expect=held)`, then release.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from ..errors import StoreError

if TYPE_CHECKING:
    from .artifacts import RecallResult

REDIS_SCHEMES = ("redis", "rediss", "unix")


class StateConflict(StoreError):
    """`save_state` found a newer version than the one the writer held: another process
    wrote the session meanwhile (its lock had expired). Nothing was written."""


class StoreUnanswered(StoreError):
    """The store took the command but did not answer in time (a stalled server): the
    command may still be applied later, when the server resumes. A `save_state` that
    raised this may land then: its writer must not take that state for another's."""


class LockBusy(StoreError):
    """Another process held the session's lock, renewing it, for the whole wait: the
    store works, that process is still busy with the session."""


@runtime_checkable
class Artifacts(Protocol):
    """Originals by content hash, scoped to a session (what `TokenPilot` itself uses)."""

    def put(self, session_id: str, data: str | bytes) -> str: ...
    def get_bytes(self, session_id: str, artifact_id: str) -> bytes: ...
    def get(self, session_id: str, artifact_id: str) -> str: ...
    def artifact_ids(self, session_id: str) -> Iterator[str]: ...
    def recall(
        self,
        session_id: str,
        artifact_id: str,
        start_line: int | None = None,
        end_line: int | None = None,
        pattern: str | None = None,
    ) -> RecallResult: ...
    def open_session(self, session_id: str) -> None: ...
    def close_session(self, session_id: str) -> None: ...
    def prune(self, now: float | None = None) -> int: ...
    def volume(self) -> int: ...
    def close(self) -> None: ...


@runtime_checkable
class Store(Artifacts, Protocol):
    """Artifacts plus each session's state (an exported session and its stats) and a lock."""

    shared: bool

    def state_version(self, session_id: str) -> int:
        """The stored state's version (0: none); it grows by one at every `save_state`."""
        ...

    def load_state(self, session_id: str) -> tuple[int, dict[str, Any]] | None: ...

    def save_state(self, session_id: str, data: Mapping[str, Any], *, expect: int | None = None) -> int:
        """Write atomically; the new version. `StateConflict` when `expect` is not the current one."""
        ...

    def load_states(self, fields: Collection[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every stored (version, state); `fields`: only those top-level keys and "id" (a
        stats view reads the counters in each head, not each history)."""
        ...

    def sessions(self) -> list[tuple[str, float]]:
        """(session id, last write time) of the sessions with originals, the latest first."""
        ...

    def session_lock(self, session_id: str) -> AbstractContextManager[None]:
        """Re-entrant in a thread; across processes too when `shared`."""
        ...


def redact_store_url(url: str) -> str:
    """`url` without its password (`redis://user:***@host:port/0`), for errors and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:" if parts.username else ":"
    host = parts.hostname or ""
    netloc = f"{user}***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
