"""Content-addressed store of originals, so that nothing TokenPilot hides is lost (I3).

Every original (a tool output before reduction, an evicted segment, a full image) is
kept under its sha256, scoped to a session: two sessions never see each other's
artifacts, and two reads of one path with different content never collide. The store
is a diskcache directory, which is safe with several processes writing at once;
writes use `add` so that concurrent writers of the same content agree.

Size bound: `prune()` drops whole sessions, oldest first, only when they are not live
(no `open_session` lease younger than `lease_s`), so an artifact a live session still
references is never dropped.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import diskcache

from .._canonical import ARTIFACT_PREFIX, artifact_id_for, from_bytes, to_bytes
from ..errors import ArtifactNotFound, StoreError
from ..messages.model import content_text
from .search import SEARCH_BUDGET_S, search_lines

_ID_RE = re.compile(r"^" + ARTIFACT_PREFIX + r"[0-9a-f]{8,64}$")
_MAX_PATTERN_CHARS = 1000


def default_store_dir() -> Path:
    return Path.home() / ".cache" / "tokenpilot" / "artifacts"


@dataclass(frozen=True, slots=True)
class RecallResult:
    """What `recall_artifact` gives back: the text and a one-line description."""

    artifact_id: str
    text: str
    found: bool
    total_lines: int = 0
    note: str = ""
    refused: bool = False  # found, but not answerable as asked: a range past its end, a pattern too long

    def for_model(self) -> str:
        """The tool result the model sees: the note (if any) then the text."""
        return f"{self.note}\n{self.text}" if self.note and self.text else (self.note or self.text)


class ArtifactStore:
    """Originals by content hash, per session, on disk.

    `path=None` uses a private temporary directory (deleted with the process's temp
    files); pass a path to make artifacts survive restarts and be shared by processes.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        size_limit_bytes: int = 4 * 2**30,
        lease_s: float = 24 * 3600,
    ) -> None:
        if path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tokenpilot-artifacts-")
            path = self._tmp.name
        self.path = Path(path)
        self.size_limit_bytes = size_limit_bytes
        self.lease_s = lease_s
        # eviction_policy "none": diskcache must never drop an artifact on its own.
        self._cache = diskcache.Cache(str(self.path), eviction_policy="none", size_limit=2**62)
        self._lock = threading.Lock()

    # -- keys ---------------------------------------------------------------
    # SQLite keeps text keys as UTF-8, which a session id with a lone surrogate (valid
    # JSON: "\ud800") does not encode to. Such an id is keyed by the hex of its
    # surrogatepass bytes, under prefixes of its own ("a~:", "lease~:"), so it can
    # never collide with a plain id, and plain ids keep the keys they always had.
    @staticmethod
    def _scope(session_id: str) -> tuple[str, str]:
        """(key marker, session text in keys): ("", id) or ("~", hex of its bytes)."""
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError:
            return "~", to_bytes(session_id).hex()
        return "", session_id

    @classmethod
    def _prefix(cls, session_id: str) -> str:
        mark, text = cls._scope(session_id)
        return f"a{mark}:{text}:"

    @classmethod
    def _key(cls, session_id: str, artifact_id: str) -> str:
        return cls._prefix(session_id) + artifact_id

    @classmethod
    def _lease_key(cls, session_id: str) -> str:
        mark, text = cls._scope(session_id)
        return f"lease{mark}:{text}"

    @staticmethod
    def _lease_session(key: str) -> str | None:
        """The session a lease key belongs to (None: not a lease key)."""
        if key.startswith("lease:"):
            return key[6:]
        if key.startswith("lease~:"):
            return from_bytes(bytes.fromhex(key[7:]))
        return None

    # -- writes -------------------------------------------------------------
    def put(self, session_id: str, data: str | bytes) -> str:
        """Store `data` for the session; return its content-derived artifact id.

        Raises `OSError` (a `StoreError` for database failures) when the store cannot
        keep it, e.g. on a full disk; then nothing may refer to that id.
        """
        return self._put_items(session_id, [data])[0]

    def put_many(self, session_id: str, items: Sequence[str | bytes]) -> list[str]:
        """`put` for each item, in one SQLite transaction (an eviction archives a few dozen
        segments at once: one commit instead of one each); their ids, in order. Nothing is
        committed when it raises. A subclass that overrides `put` gets its `put` per item."""
        if type(self).put is not ArtifactStore.put:
            return [self.put(session_id, d) for d in items]
        return self._put_items(session_id, items)

    def _put_items(self, session_id: str, items: Sequence[str | bytes]) -> list[str]:
        raws = [to_bytes(d) if isinstance(d, str) else bytes(d) for d in items]
        ids = [artifact_id_for(raw) for raw in raws]
        if not raws:
            return ids
        with _failures("write"):
            with self._cache.transact():
                for raw, aid in zip(raws, ids):
                    self._cache.add(self._key(session_id, aid), raw)
                self._touch(session_id)
        return ids

    def open_session(self, session_id: str) -> None:
        """Mark a session live: `prune` will not drop its artifacts while the lease holds."""
        with _failures("write"):
            self._touch(session_id, force=True)

    def close_session(self, session_id: str) -> None:
        """The session ended: its artifacts may be pruned when space is needed."""
        with _failures("write"):
            self._cache.set(self._lease_key(session_id), 0.0)

    def _touch(self, session_id: str, force: bool = False) -> None:
        now = time.time()
        key = self._lease_key(session_id)
        last = self._cache.get(key)
        if force or last is None or (last and now - last > 60):
            self._cache.set(key, now)

    # -- reads --------------------------------------------------------------
    def get_bytes(self, session_id: str, artifact_id: str) -> bytes:
        if not isinstance(artifact_id, str) or not _ID_RE.match(artifact_id.strip()):
            raise ArtifactNotFound(str(artifact_id), session_id)
        with _failures("read"):
            raw = self._cache.get(self._key(session_id, artifact_id.strip()))
        if raw is None:
            raise ArtifactNotFound(artifact_id, session_id)
        return raw

    def get(self, session_id: str, artifact_id: str) -> str:
        return from_bytes(self.get_bytes(session_id, artifact_id))

    def __contains__(self, key: tuple[str, str]) -> bool:
        session_id, artifact_id = key
        return self._key(session_id, artifact_id) in self._cache

    def artifact_ids(self, session_id: str) -> Iterator[str]:
        prefix = self._prefix(session_id)
        for key in self._cache.iterkeys():
            if isinstance(key, str) and key.startswith(prefix):
                aid = key[len(prefix) :]
                if _ID_RE.match(aid):  # not "y:art_…" of a session named "<this id>:y"
                    yield aid

    def sessions(self) -> list[tuple[str, float]]:
        """(session id, last write time) of every session with a lease, the latest first
        (a closed session's time is 0): what a reader outside the proxy can look in."""
        with _failures("read"):
            found = [
                (sid, float(self._cache.get(key) or 0.0))
                for key in self._cache.iterkeys()
                if isinstance(key, str) and (sid := self._lease_session(key)) is not None
            ]
        return sorted(found, key=lambda st: (-st[1], st[0]))

    # -- recall (the model-facing read) -------------------------------------
    def recall(
        self,
        session_id: str,
        artifact_id: str,
        start_line: int | None = None,
        end_line: int | None = None,
        pattern: str | None = None,
    ) -> RecallResult:
        """See `recall_from`: the same answers from every backend."""
        return recall_from(self.get, session_id, artifact_id, start_line, end_line, pattern)

    # -- size bound ---------------------------------------------------------
    def volume(self) -> int:
        return int(self._cache.volume())

    def prune(self, now: float | None = None) -> int:
        """Drop artifacts of sessions that are not live, oldest first, until under the limit.

        Returns the number of artifacts removed. Live sessions are never touched, even
        if that leaves the store above its limit.
        """
        with self._lock:
            if self.volume() <= self.size_limit_bytes:
                return 0
            now = time.time() if now is None else now
            leases: dict[str, float] = {}
            for key in self._cache.iterkeys():
                session_id = self._lease_session(key) if isinstance(key, str) else None
                if session_id is not None:
                    leases[session_id] = float(self._cache.get(key) or 0.0)
            dead = sorted((t, s) for s, t in leases.items() if now - t > self.lease_s or t == 0.0)
            removed = 0
            for _, session_id in dead:
                for aid in list(self.artifact_ids(session_id)):
                    self._cache.delete(self._key(session_id, aid))
                    removed += 1
                self._cache.delete(self._lease_key(session_id))
                if self.volume() <= self.size_limit_bytes:
                    break
            return removed

    def close(self) -> None:
        self._cache.close()


def recall_from(
    get: Callable[[str, str], str],
    session_id: str,
    artifact_id: str,
    start_line: int | None = None,
    end_line: int | None = None,
    pattern: str | None = None,
) -> RecallResult:
    """What `recall_artifact` answers, from any backend's `get`: the whole original, a
    1-based inclusive line range, or the lines matching a regex.

    Never raises for the model's mistakes: an unknown id or a bad pattern comes
    back as a clear message the agent can act on. Patterns run in linear time
    (RE2, see `recall_search`): a model-written pattern cannot hang the process.
    """
    aid = str(artifact_id).strip()
    try:
        text = get(session_id, aid)
    except ArtifactNotFound:
        shown = aid if len(aid) <= 40 else f"{aid[:40]}… ({len(aid):,} chars)"  # not echoed in full
        return RecallResult(
            aid[:200],
            "",
            False,
            note=(
                f"[tokenpilot: no artifact {shown!r} in this session. Ids look like "
                f"'{ARTIFACT_PREFIX}0123abcd…' and are quoted in reduced outputs and eviction stubs.]"
            ),
        )
    if start_line is None and end_line is None and not pattern:
        n = _line_count(text)
        note = f"[tokenpilot: all {n} lines ({len(text):,} chars) of {aid}]"
        return RecallResult(aid, text, True, total_lines=n, note=note)
    lines = part_text(text).splitlines(keepends=True)
    total = len(lines)
    past = _past_end(start_line, end_line, total, aid)
    if past is not None:
        return RecallResult(aid, "", True, total, note=past, refused=True)
    if pattern:
        return _search(aid, lines, str(pattern), _line_bounds(start_line, end_line, total))
    lo, hi = _line_bounds(start_line, end_line, total)
    note = f"[tokenpilot: lines {lo + 1}-{hi} of {total} of {aid}]"
    return RecallResult(aid, "".join(lines[lo:hi]), True, total, note=note)


def _search(aid: str, lines: list[str], pattern: str, bounds: tuple[int, int]) -> RecallResult:
    """The lines matching `pattern` (see `recall_search`), with a note on how it was searched."""
    total = len(lines)
    if len(pattern) > _MAX_PATTERN_CHARS:
        note = f"[tokenpilot: pattern too long ({len(pattern):,} chars; the limit is {_MAX_PATTERN_CHARS:,})]"
        return RecallResult(aid, "", True, total, note=note, refused=True)
    found = search_lines(lines, pattern, *bounds)
    if found.fallback:
        what = (
            f"{found.fallback}; searched for it as plain text instead: "
            f"{found.matched} of {total} lines of {aid} contain {pattern!r}"
        )
    else:
        what = f"{found.matched} of {total} lines of {aid} match {pattern!r}"
    if found.stopped_at is not None:
        what += (
            f"; the search stopped at line {found.stopped_at + 1} after {SEARCH_BUDGET_S:g} s "
            f"(this pattern is slow on this text): continue with start_line={found.stopped_at + 1} "
            "or a simpler pattern"
        )
    return RecallResult(aid, found.text, True, total, note=f"[tokenpilot: {what}]")


@contextmanager
def _failures(action: str) -> Iterator[None]:
    """Database failures as `StoreError` (an OSError); file errors pass as they are."""
    try:
        yield
    except sqlite3.Error as exc:
        name = f"sqlite3.{type(exc).__name__}"
        raise StoreError(f"artifact store {action} failed: {exc} ({name})", str(exc) or name) from exc
    except diskcache.Timeout as exc:
        raise StoreError(
            f"artifact store {action} failed: the database stayed locked", "database locked"
        ) from exc


def _line_count(text: str) -> int:
    return len(part_text(text).splitlines())


# content-part types of chat, Responses and Messages tool results (text ones carry `text`)
_PART_TYPES = frozenset(
    {
        "text",
        "input_text",
        "output_text",
        "refusal",
        "image_url",
        "input_image",
        "image",
        "input_file",
        "file",
        "document",
    }
)


def part_text(text: str) -> str:
    """What line ranges and patterns read: the text itself; for a multi-part tool result
    (stored as the JSON list of its parts, one line) the text of its text parts, one after
    another; for an evicted segment (the JSON list of its messages, one line) each message
    as a head line (its role, a tool result's call id, each call with its arguments) and
    its text (`segment_lines`), so a pattern finds the lines that hold it instead of the
    one line that holds everything. A whole recall still answers the stored original,
    byte for byte."""
    if not text.startswith("[{"):
        return text
    try:
        parts = json.loads(text)
    except ValueError:
        return text
    if not isinstance(parts, list):
        return text
    if parts and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in parts):
        return segment_lines(parts)
    if not all(isinstance(p, dict) and p.get("type") in _PART_TYPES for p in parts):
        return text
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
    return "\n".join(texts) if texts else text


def segment_lines(messages: Sequence[Mapping[str, Any]]) -> str:
    """An evicted segment's messages as lines: `[role]` (`[tool <call id>]` for a result),
    its text, then `[call <id>] <name> <arguments>` for each call it made."""
    out: list[str] = []
    for m in messages:
        role = m["role"]
        head = f"[{role} {m['tool_call_id']}]" if role == "tool" and m.get("tool_call_id") else f"[{role}]"
        content = m.get("content")  # a message passed through malformed keeps any shape
        body = (
            content_text(content)
            if isinstance(content, str | list)
            else ""
            if content is None
            else str(content)
        )
        out.append(f"{head} {body}" if body and "\n" not in body else head)
        if body and "\n" in body:
            out.append(body)
        calls = m.get("tool_calls")
        for c in calls if isinstance(calls, list) else ():
            fn = c.get("function") if isinstance(c, Mapping) else None
            if isinstance(fn, Mapping):
                out.append(f"[call {c.get('id')}] {fn.get('name')} {fn.get('arguments')}")
    return "\n".join(out)


def _past_end(start_line: int | None, end_line: int | None, total: int, aid: str) -> str | None:
    """A clear answer for a range that holds no line, instead of "lines 308-307 of 307"."""
    lo = max(int(start_line or 1), 1)
    if start_line is not None and lo > total:
        return f"[tokenpilot: line {lo} is past the end: {aid} has {total} lines]"
    if end_line is not None and int(end_line) < lo:
        return f"[tokenpilot: end_line {end_line} is before start_line {lo}; {aid} has {total} lines]"
    return None


def _line_bounds(start_line: int | None, end_line: int | None, total: int) -> tuple[int, int]:
    """1-based inclusive bounds to a clamped 0-based half-open range."""
    lo = max(int(start_line or 1), 1) - 1
    hi = total if end_line is None else min(max(int(end_line), 0), total)
    return min(lo, total), max(hi, min(lo, total))
