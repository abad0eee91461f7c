"""The embedded backend: the diskcache `ArtifactStore` and a folder of session files.

One process owns the sessions (`shared = False`): the lock is a thread lock, versions
are counted in memory, and nothing is re-read per request, so the single-process path
costs what it did before the store protocol existed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .artifacts import ArtifactStore, RecallResult
from .state_files import StateFiles
from .store import Artifacts, StateConflict


class DiskStore:
    """`Store` over an artifact store (usually an `ArtifactStore`) and an optional state folder."""

    shared = False

    def __init__(self, artifacts: Artifacts | str | Path, state_dir: str | Path | StateFiles | None) -> None:
        self.artifacts = artifacts if not isinstance(artifacts, (str, Path)) else ArtifactStore(artifacts)
        self.files = (
            state_dir if isinstance(state_dir, StateFiles) or state_dir is None else StateFiles(state_dir)
        )
        self._versions: dict[str, int] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()

    # -- artifacts: delegated ---------------------------------------------------
    def put(self, session_id: str, data: str | bytes) -> str:
        return self.artifacts.put(session_id, data)

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

    def open_session(self, session_id: str) -> None:
        self.artifacts.open_session(session_id)

    def close_session(self, session_id: str) -> None:
        self.artifacts.close_session(session_id)

    def prune(self, now: float | None = None) -> int:
        return self.artifacts.prune(now)

    def volume(self) -> int:
        return self.artifacts.volume()

    def close(self) -> None:
        self.artifacts.close()

    # -- state ------------------------------------------------------------------
    def state_version(self, session_id: str) -> int:
        return self._versions.get(session_id, 0)

    def load_state(self, session_id: str) -> tuple[int, dict[str, Any]] | None:
        data = self.files.load(session_id) if self.files is not None else None
        if data is None:
            return None
        return self._versions.setdefault(session_id, 1), data

    def save_state(self, session_id: str, data: Mapping[str, Any], *, expect: int | None = None) -> int:
        with self._guard:
            current = self._versions.get(session_id, 0)
            if expect is not None and expect != current:
                raise StateConflict(
                    f"session {session_id!r}: state version {current}, not {expect}", "state conflict"
                )
        if self.files is not None:
            self.files.save(session_id, data)
        with self._guard:
            self._versions[session_id] = self._versions.get(session_id, 0) + 1
            return self._versions[session_id]

    def load_states(self) -> Iterator[tuple[int, dict[str, Any]]]:
        if self.files is None:
            return
        for data in self.files.load_all():
            yield self._versions.setdefault(data["id"], 1), data

    def session_lock(self, session_id: str) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(session_id, threading.RLock())
