"""What `tokenpilot enable` changed, so that `disable` puts it back byte for byte.

Before a host's file is first touched, its bytes (or the fact that it did not exist)
go into a per-host folder beside a manifest. A second `enable` finds the manifest and
keeps the first backup: the backup is always of the user's own file, never of ours.
`restore` writes every file back as it was (mode included) and deletes what
enabling created; a file the user edited after enable gets only enable's change taken out
(`undo`). Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path


def default_state_root() -> Path:
    """`$TOKENPILOT_HOSTS_DIR`, else `$XDG_STATE_HOME/tokenpilot/hosts` (~/.local/state/...)."""
    env = os.environ.get("TOKENPILOT_HOSTS_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser() / "tokenpilot" / "hosts"


@dataclass
class Entry:
    """One file enabling touched: its path, whether it existed, and where its bytes are kept."""

    path: str
    existed: bool
    backup: str | None = None
    mode: int | None = None
    dirs: list[str] = field(default_factory=list)  # folders enabling creates for it, outermost first
    written: str | None = None  # a copy of what enable last wrote there (to see the user's edits since)


@dataclass
class Manifest:
    host: str
    entries: list[Entry] = field(default_factory=list)

    def paths(self) -> set[str]:
        return {e.path for e in self.entries}


class Backups:
    """The backup folder of one host (`<root>/<host>/`)."""

    def __init__(self, host: str, root: Path | None = None) -> None:
        self.host = host
        self.dir = (root or default_state_root()) / host
        self.manifest_path = self.dir / "manifest.json"

    def load(self) -> Manifest | None:
        if not self.manifest_path.exists():
            return None
        raw = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        return Manifest(raw["host"], [Entry(**e) for e in raw["entries"]])

    def _save(self, manifest: Manifest) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(manifest), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.manifest_path)

    def keep(self, paths: list[Path]) -> Manifest:
        """Back up each path not backed up yet (a second enable keeps the first copies)."""
        manifest = self.load() or Manifest(self.host)
        known = manifest.paths()
        for path in paths:
            key = str(path.absolute())
            if key in known:
                continue
            if path.exists():
                self.dir.mkdir(parents=True, exist_ok=True)
                copy = self.dir / f"{len(manifest.entries)}-{path.name}"
                shutil.copyfile(path, copy)
                mode = path.stat().st_mode & 0o7777
                manifest.entries.append(Entry(key, True, str(copy), mode))
            else:
                missing = [p for p in reversed(path.absolute().parents) if not p.exists()]
                manifest.entries.append(Entry(key, False, dirs=[str(p) for p in missing]))
            known.add(key)
            self._save(manifest)  # after each file: an interrupted enable can still be undone
        return manifest

    def note_written(self, path: Path, data: bytes) -> None:
        """Keep a copy of what enable wrote to `path`, so that `disable` can tell the user's
        later edits from enable's own change."""
        manifest = self.load()
        if manifest is None:
            return
        key = str(path.absolute())
        for i, e in enumerate(manifest.entries):
            if e.path == key:
                copy = self.dir / f"{i}-{path.name}.written"
                self.dir.mkdir(parents=True, exist_ok=True)
                copy.write_bytes(data)
                e.written = str(copy)
        self._save(manifest)

    def restore(self, merged: dict[str, bytes] | None = None) -> list[str]:
        """Put every file back as it was, except those in `merged` (path -> bytes: the user's
        own later edits with enable's change taken out), which get those bytes; returns what
        was done, one line each."""
        manifest = self.load()
        if manifest is None:
            return []
        merged = merged or {}
        done = []
        for e in reversed(manifest.entries):
            path = Path(e.path)
            if e.path in merged:
                tmp = path.with_name(path.name + ".tokenpilot.tmp")
                tmp.write_bytes(merged[e.path])
                if e.mode is not None:
                    os.chmod(tmp, e.mode)
                os.replace(tmp, path)
                done.append(f"took enable's change out of {path}, kept your later edits")
                continue
            if e.existed and e.backup is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(e.backup, path)
                if e.mode is not None:
                    os.chmod(path, e.mode)
                done.append(f"restored {path}")
            elif path.exists():
                path.unlink()
                done.append(f"removed {path}")
            for folder in reversed(e.dirs):  # innermost first; one the user has filled stays
                with contextlib.suppress(OSError):
                    Path(folder).rmdir()
        shutil.rmtree(self.dir)
        return done
