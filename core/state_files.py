"""Session state in a folder: per session, a head file and an append-only journal of chunks.

The embedded backend's half for state (`store_disk.DiskStore`). A save cuts the state
into content-addressed chunks and a small head (`journal`), appends the chunks the
journal does not hold yet to `<name>.<gen>.jnl` (one line each: digest, space, ASCII
JSON), then replaces `<name>.json` with the head (a temporary file, then a rename). The
head names the journal generation and the length it covers, and carries the version:

- a crash after the appends and before the rename leaves the old head, which covers
  only what it wrote; the next save cuts the journal back to that length first;
- the journal grows only by what is new; when it holds more than twice what the head
  reaches (plus `_SLACK` bytes), the next save writes a fresh generation with only the
  live chunks, points the head at it, and removes the old one, so it stays bounded.
  Closing a session compacts its journal the same way.

Files are ASCII JSON: text the agent sent with lone surrogates is kept as `\\udXXX`
escapes. A folder written before the journal (one whole state per `<name>.json`, its
version in `<name>.ver`) still loads; its next save writes the new layout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import journal

log = logging.getLogger("tokenpilot")

_SLACK = 256 * 1024  # journal bytes beyond twice the live ones that a session may carry
_READ_TRIES = 3  # a reader without the lock retries when a compaction moved the journal


@dataclass
class _Tail:
    """What this process knows of a session's journal: the head's generation and covered
    length when it last read or wrote them, and the chunks that part holds."""

    gen: int
    length: int
    known: set[str] = field(default_factory=set)
    fresh: bool = False  # no head yet (none, or a state of the old layout beside a `.ver`)


class StateFiles:
    """A folder of session files, named by a hash of the session id (any id is a valid name)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.mkdir(parents=True, exist_ok=True)
        self._tails: dict[str, _Tail] = {}
        self._guard = threading.Lock()
        self._stripes = [threading.Lock() for _ in range(16)]
        self.bytes_written = 0  # chunks and heads, for benchmarks

    def file_for(self, session_id: str) -> Path:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
        return self.path / f"{digest[:32]}.json"

    @staticmethod
    def _journal_at(head_file: Path, gen: int) -> Path:
        return head_file.with_name(f"{head_file.stem}.{gen}.jnl")

    # -- writing ------------------------------------------------------------------
    def save(self, session_id: str, data: Mapping[str, Any], version: int | None = None) -> None:
        """Write `data` as the session's state: new chunks first, the head last (see module
        doc). The caller serialises saves of one session (its session lock); `version` is
        kept in the head for processes that share the folder."""
        target = self.file_for(session_id)
        with self._stripe(target):
            self._save(target, data, version)

    def _stripe(self, target: Path) -> threading.Lock:
        """One of a few thread locks: saves of one session never interleave their appends,
        even from callers that do not take the session lock."""
        return self._stripes[hash(target.name) % len(self._stripes)]

    def _save(self, target: Path, data: Mapping[str, Any], version: int | None) -> None:
        tail = self._tail(target)  # the stripe lock keeps it current for this session
        meta: dict[str, Any] = {} if version is None else {"v": int(version)}
        cut = journal.split(data)
        live_bytes = sum(len(d) + len(t) + 2 for d, t in cut.chunks.items())
        new = cut.new_chunks(tail.known)
        grown = tail.length + sum(len(d) + len(t) + 2 for d, t in new.items())
        old_gen = None
        if grown > 2 * live_bytes + _SLACK:  # compact: a fresh generation with only live chunks
            old_gen, tail = tail.gen, _Tail(tail.gen + 1, 0)
            new = cut.chunks
        legacy = tail.fresh
        tail = self._append(target, tail, new)
        meta.update(gen=tail.gen, len=tail.length)
        head = cut.head(meta)
        self._replace(target, head)
        self.bytes_written += len(head)
        tail.known = set(cut.chunks) if old_gen is not None else tail.known | set(new)
        with self._guard:
            self._tails[str(target)] = tail
        if legacy:  # the old layout's version file: the head has the version now
            with contextlib.suppress(OSError):
                target.with_suffix(".ver").unlink()
        if old_gen is not None:
            with contextlib.suppress(OSError):
                self._journal_at(target, old_gen).unlink()

    def _tail(self, target: Path) -> _Tail:
        """The journal as the head on disk describes it (re-read when another process, or a
        crash, left it different from what this process remembers)."""
        meta = self._meta(target)
        if meta is None:
            gen = self._tails[str(target)].gen + 1 if str(target) in self._tails else 0
            return _Tail(gen, 0, fresh=True)
        gen, length = int(meta.get("gen", 0)), int(meta.get("len", 0))
        mine = self._tails.get(str(target))
        if mine is not None and (mine.gen, mine.length) == (gen, length):
            return mine
        try:
            chunks = _read_journal(self._journal_at(target, gen), length)
        except OSError:
            return _Tail(gen + 1, 0)  # the journal is gone: start a fresh generation
        return _Tail(gen, length, set(chunks))

    def _append(self, target: Path, tail: _Tail, chunks: Mapping[str, str]) -> _Tail:
        """Append `chunks` after the part the head covers, cutting off whatever a crashed
        save left beyond it; the tail after the append."""
        path = self._journal_at(target, tail.gen)
        text = "".join(f"{d} {t}\n" for d, t in chunks.items()).encode("ascii")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != tail.length:
                os.ftruncate(fd, tail.length)
            os.lseek(fd, tail.length, os.SEEK_SET)
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        self.bytes_written += len(text)
        return _Tail(tail.gen, tail.length + len(text), set(tail.known))

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

    def compact(self, session_id: str) -> int:
        """Rewrite the session's journal with only the chunks its head reaches (a closed
        session's collection); the bytes freed. The caller holds the session's lock."""
        target = self.file_for(session_id)
        with self._stripe(target):
            return self._compact(target)

    def _compact(self, target: Path) -> int:
        try:
            head = _read_json(target)
        except FileNotFoundError:
            return 0
        if not journal.is_head(head):
            return 0
        meta = journal.head_meta(head)
        gen, length = int(meta.get("gen", 0)), int(meta.get("len", 0))
        chunks = _read_journal(self._journal_at(target, gen), length)
        live = journal.reachable(head, lambda ds: chunks)
        kept = {d: chunks[d] for d in live}
        fresh = self._append(target, _Tail(gen + 1, 0), kept)
        meta.update(gen=fresh.gen, len=fresh.length)
        self._replace(target, journal.head_text(journal.body_of(head), meta))
        fresh.known = set(kept)
        with self._guard:
            self._tails[str(target)] = fresh
        with contextlib.suppress(OSError):
            self._journal_at(target, gen).unlink()
        return length - fresh.length

    def delete(self, session_id: str) -> None:
        """Remove every file of the session's state (not its lock file)."""
        target = self.file_for(session_id)
        for p in [target, target.with_suffix(".ver"), *self.path.glob(f"{target.stem}.*.jnl")]:
            with contextlib.suppress(OSError):
                p.unlink()
        with self._guard:
            self._tails.pop(str(target), None)

    # -- versions and locks: what processes sharing the folder agree on ------------
    def lock_file(self, session_id: str) -> Path:
        return self.file_for(session_id).with_suffix(".lock")

    def version(self, session_id: str) -> int:
        """The session's stored version: the head's, or for a state of the old layout the
        small file beside it (1 when it has none); 0 when the session has no state."""
        p = self.file_for(session_id)
        meta = self._meta(p)
        if meta is not None:
            return int(meta.get("v", 1))
        if not p.exists() and not p.with_suffix(".ver").exists():
            return 0
        return self._version_at(p)

    def save_version(self, session_id: str, version: int) -> None:
        """The old layout's version file (kept for callers that still write one)."""
        self._replace(self.file_for(session_id).with_suffix(".ver"), str(int(version)))

    @staticmethod
    def _meta(p: Path) -> dict[str, Any] | None:
        """The head's own record, or None (no file, the old layout, or unreadable)."""
        try:
            with open(p, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return journal.head_meta(data) if journal.is_head(data) else None

    # -- reading --------------------------------------------------------------------
    def load(self, session_id: str) -> dict[str, Any] | None:
        """One session's state, or None when it has none (or it cannot be read)."""
        p = self.file_for(session_id)
        if not p.exists():
            return None
        got = self._read(p)
        return None if got is None else got[1]

    def load_versioned(self, session_id: str) -> tuple[int, dict[str, Any]] | None:
        """One session's state with its version, both from the same head."""
        p = self.file_for(session_id)
        if not p.exists():
            return None
        return self._read(p)

    def load_all(self) -> Iterator[dict[str, Any]]:
        """Every readable session file; unreadable ones are reported and skipped."""
        for _v, data in self.load_all_versioned():
            yield data

    def load_all_versioned(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every readable session with its version (of the same head as its state; for the
        old layout the version file is read first, so it is never newer than the state)."""
        for p in sorted(self.path.glob("*.json")):
            if p.name.startswith(".tmp-"):
                continue
            got = self._read(p)
            if got is not None:
                yield max(got[0], 1), got[1]

    @staticmethod
    def _version_at(p: Path) -> int:
        """The version beside state file `p`; 1 when missing (written by one process, before)
        or unreadable (torn by hand: the state itself is what counts)."""
        try:
            return int(p.with_suffix(".ver").read_text(encoding="ascii"))
        except (OSError, ValueError):
            return 1

    def _read(self, p: Path) -> tuple[int, dict[str, Any]] | None:
        """(version, state) from a head and its journal, or from a file of the old layout.
        A compaction by another process may remove the journal between the two reads: the
        head is then read again."""
        for _ in range(_READ_TRIES):
            old_version = self._version_at(p)
            try:
                data = _read_json(p)
            except (OSError, ValueError) as exc:
                log.warning("tokenpilot: skipping unreadable session state %s: %s", p, exc)
                return None
            if not journal.is_head(data):
                if isinstance(data, dict) and isinstance(data.get("id"), str):
                    return old_version, data
                log.warning("tokenpilot: skipping session state %s: not a TokenPilot session file", p)
                return None
            meta = journal.head_meta(data)
            try:
                chunks = _read_journal(self._journal_at(p, int(meta.get("gen", 0))), int(meta.get("len", 0)))
                state, _ = journal.join(data, lambda ds, c=chunks: c)  # type: ignore[misc]
            except FileNotFoundError:
                continue  # compacted meanwhile: read the new head
            except (OSError, ValueError) as exc:
                log.warning("tokenpilot: skipping unreadable session state %s: %s", p, exc)
                return None
            if isinstance(state.get("id"), str):
                return int(meta.get("v", 1)), state
            log.warning("tokenpilot: skipping session state %s: not a TokenPilot session file", p)
            return None
        log.warning("tokenpilot: skipping session state %s: its journal kept moving", p)
        return None


def _read_json(p: Path) -> Any:
    with open(p, encoding="utf-8") as f:
        return json.load(f)


def _read_journal(path: Path, length: int) -> dict[str, str]:
    """The chunks in the first `length` bytes of a journal (what its head covers)."""
    with open(path, "rb") as f:
        raw = f.read(length)
    if len(raw) != length:
        raise ValueError(f"{path.name}: journal shorter than its head says ({len(raw)} < {length} bytes)")
    out: dict[str, str] = {}
    for line in raw.decode("ascii").splitlines():
        d, _, text = line.partition(" ")
        out[d] = text
    return out
