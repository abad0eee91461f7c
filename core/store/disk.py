"""The embedded backend: the diskcache `ArtifactStore` and a folder of session files.

By default one process owns the sessions (`shared = False`): the lock is a thread lock,
versions are counted in memory, and nothing is re-read per request, so the
single-process path costs what it did before the store protocol existed.

`shared=True` is for several processes on one folder (`tokenpilot serve --workers N`),
with the Redis store's contract: a per-session `flock` (`file_lock.FileLock`, released
by the kernel when its holder dies) and a version in each session's head
(`state_files`), so a process reloads a session another one advanced, and
`save_state(expect=...)` refuses to overwrite a newer version. diskcache itself is safe
across processes. Either way a save writes only the state's new chunks and its head.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .artifacts import ArtifactStore, RecallResult
from .file_lock import FileLock
from .protocol import Artifacts, StateConflict
from .state_files import StateFiles

log = logging.getLogger("tokenpilot")


class DiskStore:
    """`Store` over an artifact store (usually an `ArtifactStore`) and an optional state folder;
    `shared=True`: several processes on the same folders (see the module doc)."""

    def __init__(
        self,
        artifacts: Artifacts | str | Path,
        state_dir: str | Path | StateFiles | None,
        *,
        shared: bool = False,
        lock_wait_s: float = 30.0,
    ) -> None:
        self.artifacts = artifacts if not isinstance(artifacts, (str, Path)) else ArtifactStore(artifacts)
        self.files = (
            state_dir if isinstance(state_dir, StateFiles) or state_dir is None else StateFiles(state_dir)
        )
        if shared and self.files is None:
            raise ValueError("a disk store shared by processes needs a state folder")
        self.shared = shared
        self.lock_wait_s = lock_wait_s
        self._versions: dict[str, int] = {}
        self._locks: dict[str, threading.RLock | FileLock] = {}
        self._guard = threading.Lock()

    # -- artifacts: delegated ---------------------------------------------------
    def put(self, session_id: str, data: str | bytes) -> str:
        return self.artifacts.put(session_id, data)

    def put_many(self, session_id: str, items: Sequence[str | bytes]) -> list[str]:
        """`put` for each item in one write (`ArtifactStore.put_many`); one `put` each when
        a subclass overrides `put` or the artifacts' class has no `put_many`."""
        if type(self).put is not DiskStore.put or getattr(type(self.artifacts), "put_many", None) is None:
            return [self.put(session_id, d) for d in items]
        return self.artifacts.put_many(session_id, items)

    def get_bytes(self, session_id: str, artifact_id: str) -> bytes:
        return self.artifacts.get_bytes(session_id, artifact_id)

    def get(self, session_id: str, artifact_id: str) -> str:
        return self.artifacts.get(session_id, artifact_id)

    def artifact_ids(self, session_id: str) -> Iterator[str]:
        return self.artifacts.artifact_ids(session_id)

    def recall(
        self,
        session_id: str,
        artifact_id: str,
        start_line: int | None = None,
        end_line: int | None = None,
        pattern: str | None = None,
    ) -> RecallResult:
        return self.artifacts.recall(session_id, artifact_id, start_line, end_line, pattern)

    def sessions(self) -> list[tuple[str, float]]:
        listed = getattr(self.artifacts, "sessions", None)  # a custom Artifacts may list none
        return listed() if listed is not None else []

    def open_session(self, session_id: str) -> None:
        self.artifacts.open_session(session_id)

    def close_session(self, session_id: str) -> None:
        """Close the session's artifacts and collect its state journal's unreferenced chunks."""
        self.artifacts.close_session(session_id)
        if self.files is None:
            return
        try:
            with self.session_lock(session_id):
                self.files.compact(session_id)
        except (OSError, ValueError) as exc:  # a collection put off: the journal is still whole
            log.warning("tokenpilot: could not compact the state of session %r: %s", session_id, exc)

    def prune(self, now: float | None = None) -> int:
        return self.artifacts.prune(now)

    def volume(self) -> int:
        return self.artifacts.volume()

    def close(self) -> None:
        self.artifacts.close()

    # -- state ------------------------------------------------------------------
    def state_version(self, session_id: str) -> int:
        if self.shared:
            assert self.files is not None
            return self.files.version(session_id)
        return self._versions.get(session_id, 0)

    def load_state(self, session_id: str) -> tuple[int, dict[str, Any]] | None:
        if self.shared:  # under the lock, so the version and the state are of one save
            with self.session_lock(session_id):
                return self._load_shared(session_id)
        data = self.files.load(session_id) if self.files is not None else None
        if data is None:
            return None
        return self._versions.setdefault(session_id, 1), data

    def _load_shared(self, session_id: str) -> tuple[int, dict[str, Any]] | None:
        assert self.files is not None
        return self.files.load_versioned(session_id)

    def save_state(self, session_id: str, data: Mapping[str, Any], *, expect: int | None = None) -> int:
        if self.shared:
            return self._save_shared(session_id, data, expect)
        with self._guard:
            current = self._versions.get(session_id, 0)
            if expect is not None and expect != current:
                raise StateConflict(
                    f"session {session_id!r}: state version {current}, not {expect}", "state conflict"
                )
            version = current + 1
        if self.files is not None:
            self.files.save(session_id, data, version)
        with self._guard:
            self._versions[session_id] = self._versions.get(session_id, 0) + 1
            return self._versions[session_id]

    def _save_shared(self, session_id: str, data: Mapping[str, Any], expect: int | None) -> int:
        """Check the version, then write the state's new chunks and its head (which carries
        the new version), all under the file lock (re-entrant: the caller usually holds it
        already). A crash before the head is written leaves the old head and version whole."""
        assert self.files is not None
        with self.session_lock(session_id):
            current = self.files.version(session_id)
            if expect is not None and expect != current:
                raise StateConflict(
                    f"session {session_id!r}: stored state is at version {current}, not {expect}; "
                    "another process wrote it",
                    "state conflict",
                )
            self.files.save(session_id, data, current + 1)
            return current + 1

    def load_states(self, fields: Collection[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every stored session (`fields`: only those top-level keys, and "id"). Shared: read
        without the lock (a listing), each version before its state, so a version is never
        newer than the state it comes with."""
        if self.files is None:
            return
        for version, data in self.files.load_all_versioned(fields):
            yield (version if self.shared else self._versions.setdefault(data["id"], 1)), data

    def session_lock(self, session_id: str) -> threading.RLock | FileLock:
        """A thread lock; with `shared`, a file lock that holds across processes too."""
        with self._guard:
            lock = self._locks.get(session_id)
            if lock is None:
                if self.shared:
                    assert self.files is not None
                    lock = FileLock(
                        self.files.lock_file(session_id),
                        wait_s=self.lock_wait_s,
                        what=f"the lock of session {session_id!r}",
                    )
                else:
                    lock = threading.RLock()
                self._locks[session_id] = lock
            return lock
