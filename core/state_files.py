"""One JSON file per session (an exported session plus its stats), written atomically.

The embedded backend's half for state (`store_disk.DiskStore`); moved here from the
OpenClaw proxy so the core can offer both backends without importing an integration.
Files are ASCII JSON: text the agent sent with lone surrogates is kept as `\\udXXX`
escapes, so every state can be written and read back as it was.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("tokenpilot")


class StateFiles:
    """A folder of session files, named by a hash of the session id (any id is a valid name)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.mkdir(parents=True, exist_ok=True)

    def file_for(self, session_id: str) -> Path:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
        return self.path / f"{digest[:32]}.json"

    def save(self, session_id: str, data: Mapping[str, Any]) -> None:
        self._replace(self.file_for(session_id), json.dumps(data, ensure_ascii=True, separators=(",", ":")))

    def _replace(self, target: Path, text: str) -> None:
        """Write `text` to `target` atomically (a temporary file, then a rename)."""
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".tmp-", suffix=target.suffix)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # -- versions and locks: what processes sharing the folder agree on ------------
    def lock_file(self, session_id: str) -> Path:
        return self.file_for(session_id).with_suffix(".lock")

    def version(self, session_id: str) -> int:
        """The session's stored version (a small file beside its state, written after it):
        0 when it has no state, 1 for a state written without one (one process, before)."""
        p = self.file_for(session_id)
        if not p.exists() and not p.with_suffix(".ver").exists():
            return 0
        return self._version_at(p)

    def save_version(self, session_id: str, version: int) -> None:
        self._replace(self.file_for(session_id).with_suffix(".ver"), str(int(version)))

    def load(self, session_id: str) -> dict[str, Any] | None:
        """One session's file, or None when it has none (or it cannot be read)."""
        p = self.file_for(session_id)
        if not p.exists():
            return None
        return self._read(p)

    def load_all(self) -> Iterator[dict[str, Any]]:
        """Every readable session file; unreadable ones are reported and skipped."""
        for p in sorted(self.path.glob("*.json")):
            data = self._read(p)
            if data is not None:
                yield data

    def load_all_versioned(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every readable session file with its version, read before the state: a save in
        between leaves the version older than the state, so a reader reloads it later
        (never the other way, which would hide a newer state behind its version)."""
        for p in sorted(self.path.glob("*.json")):
            version = self._version_at(p)
            data = self._read(p)
            if data is not None:
                yield max(version, 1), data

    @staticmethod
    def _version_at(p: Path) -> int:
        """The version beside state file `p`; 1 when missing (written by one process, before)
        or unreadable (torn by hand: the state itself is what counts)."""
        try:
            return int(p.with_suffix(".ver").read_text(encoding="ascii"))
        except (OSError, ValueError):
            return 1

    @staticmethod
    def _read(p: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("tokenpilot: skipping unreadable session state %s: %s", p, exc)
            return None
        if isinstance(data, dict) and isinstance(data.get("id"), str):
            return data
        log.warning("tokenpilot: skipping session state %s: not a TokenPilot session file", p)
        return None
