"""Session state in a folder: per session, an append-only journal and a copy of its head.

The embedded backend's half for state (`store_disk.DiskStore`). A save cuts the state
into content-addressed chunks and a small head (`journal`) and appends, in one write, the
chunks the journal does not hold yet and then the head, to `<name>.<gen>.jnl` (a record a
line: `<digest> <json>` for a chunk, `H <json>` for a head). It then writes the head over
`<name>.json` in place: a readable copy that holds the version (read per request when
processes share the folder) and the offset of the head's record in the journal.

No file is renamed: replacing a file by a rename costs milliseconds on ext4 (it flushes
the new file's data first), an append and an in-place write cost microseconds. Safety
comes from the journal instead:
- the head that counts is `<name>.json` when it parses and equals the journal's record at
  the offset it names; else (a write torn by a crash, or read while being written) the
  last complete head record of the newest journal;
- a crash in the middle of an append leaves the previous head the one that counts; the
  next save cuts the journal back to the end of that head's record before appending;
- the journal grows by what is new and the head; past twice what the head reaches (plus
  `_SLACK` bytes) a save writes a fresh generation with only the live chunks, points the
  head at it and removes the old one, so it stays bounded. Closing a session compacts it.
As before the journal, nothing is fsynced: a process that dies loses no saved state; a
machine that loses power may lose the last saves.

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
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import journal

log = logging.getLogger("tokenpilot")

_SLACK = 256 * 1024  # journal bytes beyond twice the live ones that a session may carry
_READ_TRIES = 3  # a reader without the lock retries when a compaction moved the journal
_REMEMBERED = 1024  # sessions whose journal this process remembers (LRU)
_GEN = re.compile(r"\.(\d+)\.jnl$")


def default_state_dir() -> Path:
    """Where `tokenpilot serve` keeps session state, and where `tokenpilot mcp` reads it."""
    return Path.home() / ".cache" / "tokenpilot" / "sessions"


@dataclass
class _Tail:
    """What this process knows of a session's journal: its generation, the end of the head
    record that counts, and the chunks before it."""

    gen: int
    length: int
    known: set[str] = field(default_factory=set)
    fresh: bool = False  # no head yet (none, or a state of the old layout beside a `.ver`)


@dataclass
class _Head:
    """The head that counts: parsed, its journal generation, and its record's offsets."""

    doc: dict[str, Any]
    gen: int
    start: int  # where its record starts: every chunk it reaches is before
    end: int


class StateFiles:
    """A folder of session files, named by a hash of the session id (any id is a valid name)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.mkdir(parents=True, exist_ok=True)
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._guard = threading.Lock()
        self._stripes = [threading.Lock() for _ in range(16)]
        self.bytes_written = 0  # chunks and heads, for benchmarks

    def file_for(self, session_id: str) -> Path:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
        return self.path / f"{digest[:32]}.json"

    @staticmethod
    def _journal_at(head_file: Path, gen: int) -> Path:
        return head_file.with_name(f"{head_file.stem}.{gen}.jnl")

    def _journals(self, head_file: Path) -> list[tuple[int, Path]]:
        """The session's journal files, newest generation first."""
        found = []
        for p in self.path.glob(f"{head_file.stem}.*.jnl"):
            m = _GEN.search(p.name)
            if m:
                found.append((int(m.group(1)), p))
        return sorted(found, reverse=True)

    # -- writing ------------------------------------------------------------------
    def save(self, session_id: str, data: Mapping[str, Any], version: int | None = None) -> None:
        """Write `data` as the session's state: its new chunks and its head appended in one
        write, then the head's copy (see module doc). `version` is kept in the head for
        processes that share the folder; the caller serialises them (the session lock)."""
        target = self.file_for(session_id)
        with self._stripe(target):
            self._save(target, data, version)

    def _stripe(self, target: Path) -> threading.Lock:
        """One of a few thread locks: saves of one session never interleave their appends,
        even from callers that do not take the session lock."""
        return self._stripes[hash(target.name) % len(self._stripes)]

    def _save(self, target: Path, data: Mapping[str, Any], version: int | None) -> None:
        tail = self._tail(target)
        cut = journal.split(data)
        new = cut.new_chunks(tail.known)
        old_gen = None
        live = sum(len(d) + len(t) + 2 for d, t in cut.chunks.items())
        if tail.length + sum(len(d) + len(t) + 2 for d, t in new.items()) > 2 * live + _SLACK:
            old_gen, tail = tail.gen, _Tail(tail.gen + 1, 0, fresh=tail.fresh)  # compact
            new = cut.chunks
        chunks = "".join(f"{d} {t}\n" for d, t in new.items()).encode("ascii")
        meta: dict[str, Any] = {} if version is None else {"v": int(version)}
        meta.update(gen=tail.gen, len=tail.length + len(chunks))
        head = cut.head(meta).encode("ascii")
        end = self._append(target, tail, chunks + b"H " + head + b"\n")
        self._write_copy(target, head)
        known = set(cut.chunks) if old_gen is not None else tail.known | set(new)
        self._remember(target, _Tail(tail.gen, end, known))
        if tail.fresh:  # the old layout's version file: the head has the version now
            with contextlib.suppress(OSError):
                target.with_suffix(".ver").unlink()
        if old_gen is not None:
            with contextlib.suppress(OSError):
                self._journal_at(target, old_gen).unlink()

    def _remember(self, target: Path, tail: _Tail) -> None:
        with self._guard:
            self._tails[str(target)] = tail
            self._tails.move_to_end(str(target))
            while len(self._tails) > _REMEMBERED:
                self._tails.popitem(last=False)

    def _tail(self, target: Path) -> _Tail:
        """Where the next save appends: after the head that counts (re-read when another
        process, or a crash, left the files different from what this process remembers)."""
        found = self._find(target)
        if not isinstance(found, _Head):
            gens = self._journals(target)
            return _Tail(gens[0][0] + 1 if gens else 0, 0, fresh=True)
        mine = self._tails.get(str(target))
        if mine is not None and (mine.gen, mine.length) == (found.gen, found.end):
            return mine
        chunks = _read_journal(self._journal_at(target, found.gen), found.start)
        return _Tail(found.gen, found.end, set(chunks))

    def _append(self, target: Path, tail: _Tail, records: bytes) -> int:
        """Write `records` after the head that counts, cutting off whatever a crashed save
        left beyond it; the journal's new length."""
        fd = os.open(self._journal_at(target, tail.gen), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != tail.length:
                os.ftruncate(fd, tail.length)
            view, at = memoryview(records), tail.length
            while view:
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
        finally:
            os.close(fd)
        self.bytes_written += len(records)
        return tail.length + len(records)

    def _write_copy(self, target: Path, head: bytes) -> None:
        """The head's readable copy, written in place (a reader that catches it half
        written, or a crash that tears it, falls back on the journal's record)."""
        fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, head, 0)
            os.ftruncate(fd, len(head))
        finally:
            os.close(fd)
        self.bytes_written += len(head)

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
            found = self._find(target)
            if not isinstance(found, _Head):
                return 0
            chunks = _read_journal(self._journal_at(target, found.gen), found.start)
            kept = {d: chunks[d] for d in journal.reachable(found.doc, lambda ds: chunks)}
            records = "".join(f"{d} {t}\n" for d, t in kept.items()).encode("ascii")
            meta = journal.head_meta(found.doc)
            meta.update(gen=found.gen + 1, len=len(records))
            head = journal.head_text(journal.body_of(found.doc), meta).encode("ascii")
            fresh = _Tail(found.gen + 1, 0)
            end = self._append(target, fresh, records + b"H " + head + b"\n")
            self._write_copy(target, head)
            self._remember(target, _Tail(fresh.gen, end, set(kept)))
            with contextlib.suppress(OSError):
                self._journal_at(target, found.gen).unlink()
            return found.end - end

    def delete(self, session_id: str) -> None:
        """Remove every file of the session's state (not its lock file)."""
        target = self.file_for(session_id)
        for p in [target, target.with_suffix(".ver"), *(p for _, p in self._journals(target))]:
            with contextlib.suppress(OSError):
                p.unlink()
        with self._guard:
            self._tails.pop(str(target), None)

    # -- which head counts ----------------------------------------------------------
    def _find(self, target: Path) -> _Head | dict[str, Any] | None:
        """The head that counts (see module doc); a whole state of the old layout as it is;
        None when there is neither."""
        try:
            text = target.read_bytes()
        except FileNotFoundError:
            text = None
        doc: Any = None
        if text:
            with contextlib.suppress(ValueError):
                doc = json.loads(text)
        if isinstance(doc, dict) and not journal.is_head(doc):
            return doc if isinstance(doc.get("id"), str) else None
        if journal.is_head(doc):
            meta = journal.head_meta(doc)
            gen, start = int(meta.get("gen", 0)), int(meta.get("len", 0))
            record = b"H " + text + b"\n"  # type: ignore[operator]
            try:
                with open(self._journal_at(target, gen), "rb") as f:
                    f.seek(start)
                    if f.read(len(record)) == record:
                        return _Head(doc, gen, start, start + len(record))
            except OSError:
                pass
        for gen, path in self._journals(target):  # the copy is torn, or ahead of its journal
            head = _last_head(path, gen)
            if head is not None:
                return head
        return None

    # -- versions and locks: what processes sharing the folder agree on ------------
    def lock_file(self, session_id: str) -> Path:
        return self.file_for(session_id).with_suffix(".lock")

    def version(self, session_id: str) -> int:
        """The session's stored version: the head's (from its copy, one small read), or for
        a state of the old layout the small file beside it (1 when it has none); 0 when the
        session has no state."""
        p = self.file_for(session_id)
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(p.read_bytes())
            if journal.is_head(doc):
                return int(journal.head_meta(doc).get("v", 1))
            if isinstance(doc, dict):
                return self._version_at(p)
        found = self._find(p)  # no copy, or a torn one: the journal says
        if isinstance(found, _Head):
            return int(journal.head_meta(found.doc).get("v", 1))
        if found is None and not p.with_suffix(".ver").exists():
            return 0
        return self._version_at(p)

    def save_version(self, session_id: str, version: int) -> None:
        """The old layout's version file (kept for callers that still write one)."""
        self._replace(self.file_for(session_id).with_suffix(".ver"), str(int(version)))

    # -- reading --------------------------------------------------------------------
    def load(self, session_id: str) -> dict[str, Any] | None:
        """One session's state, or None when it has none (or it cannot be read)."""
        got = self.load_versioned(session_id)
        return None if got is None else got[1]

    def load_versioned(self, session_id: str) -> tuple[int, dict[str, Any]] | None:
        """One session's state with its version, both from the same head."""
        p = self.file_for(session_id)
        if not p.exists() and not self._journals(p):
            return None
        return self._read(p)

    def load_all(self) -> Iterator[dict[str, Any]]:
        """Every readable session file; unreadable ones are reported and skipped."""
        for _v, data in self.load_all_versioned():
            yield data

    def load_all_versioned(
        self, fields: Collection[str] | None = None
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every readable session with its version (of the same head as its state; for the
        old layout the version file is read first, so it is never newer than the state).
        `fields`: only those top-level keys (and "id"), the journal read only if they reach it."""
        for p in sorted(self.path.glob("*.json")):
            if p.name.startswith(".tmp-"):
                continue
            got = self._read(p, None if fields is None else {"id", *fields})
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

    def _read(self, p: Path, fields: Collection[str] | None = None) -> tuple[int, dict[str, Any]] | None:
        """(version, state) from the head that counts and its journal, or from a file of the
        old layout. A compaction by another process may remove the journal meanwhile: the
        head is then found again."""
        for _ in range(_READ_TRIES):
            old_version = self._version_at(p)
            try:
                found = self._find(p)
                if found is None:
                    log.warning("tokenpilot: skipping unreadable session state %s", p)
                    return None
                if not isinstance(found, _Head):
                    return old_version, journal.picked(found, fields)
                state, _ = journal.join(
                    found.doc, _journal_reader(self._journal_at(p, found.gen), found.start), fields
                )
            except FileNotFoundError:
                continue  # compacted meanwhile: find the new head
            except (OSError, ValueError) as exc:
                log.warning("tokenpilot: skipping unreadable session state %s: %s", p, exc)
                return None
            if isinstance(state.get("id"), str):
                return int(journal.head_meta(found.doc).get("v", 1)), state
            log.warning("tokenpilot: skipping session state %s: not a TokenPilot session file", p)
            return None
        log.warning("tokenpilot: skipping session state %s: its journal kept moving", p)
        return None


def _journal_reader(path: Path, length: int) -> Callable[[list[str]], dict[str, str]]:
    """A `journal.join` fetch that reads the journal at its first call only (a head whose
    wanted fields reach no chunk never reads it)."""
    chunks: dict[str, str] | None = None

    def fetch(digests: list[str]) -> dict[str, str]:
        nonlocal chunks
        if chunks is None:
            chunks = _read_journal(path, length)
        return {d: chunks[d] for d in digests if d in chunks}

    return fetch


def _read_journal(path: Path, length: int) -> dict[str, str]:
    """The chunks in the first `length` bytes of a journal (before the head that counts)."""
    with open(path, "rb") as f:
        raw = f.read(length)
    if len(raw) != length:
        raise ValueError(f"{path.name}: journal shorter than its head says ({len(raw)} < {length} bytes)")
    out: dict[str, str] = {}
    for line in raw.decode("ascii").splitlines():
        d, _, text = line.partition(" ")
        if d != "H":
            out[d] = text
    return out


def _last_head(path: Path, gen: int) -> _Head | None:
    """The last complete head record of a journal that names this journal and its own
    offset (what a save appended whole), or None."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    end = len(raw)
    while True:
        cut = raw.rfind(b"\nH ", 0, end)
        if cut < 0 and not raw.startswith(b"H "):
            return None
        start = cut + 1  # 0 when the journal starts with this record
        stop = raw.find(b"\n", start)
        if stop >= 0:
            with contextlib.suppress(ValueError):
                doc = json.loads(raw[start + 2 : stop])
                if journal.is_head(doc):
                    meta = journal.head_meta(doc)
                    if int(meta.get("gen", -1)) == gen and int(meta.get("len", -1)) == start:
                        return _Head(doc, gen, start, stop + 1)
        if cut < 0:
            return None
        end = cut
