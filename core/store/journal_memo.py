"""What the journal remembers between saves and reads, so that each costs what changed.

A session's state is mostly the same from one save to the next: its long strings and its
history entries are the same objects (`Sealed`), its history list grows at its end, and
the chunks another replica wrote are mostly ones this one wrote or read before. Each memo
here is keyed by identity or by digest, checked on every hit, bounded by the chars it
holds (least recently used out), and gives what the journal would compute without it.
"""

from __future__ import annotations

import json
import operator
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import filterfalse
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from .journal_blocks import _blocks, _closes, digest


class _CharBound:
    """Records by key, bounded by the chars they keep alive, least recently used out: the
    one shape of the memos here. Each caller checks a hit against what it asked for."""

    __slots__ = ("_by_key", "_lock", "chars", "max_chars")

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._by_key: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self.chars = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: Any) -> bool:
        return key in self._by_key

    def get(self, key: Any) -> Any:
        """The record held under `key`, now the most recent; None when there is none."""
        with self._lock:
            hit = self._by_key.get(key)
            if hit is None:
                return None
            self._by_key.move_to_end(key)
            return hit[0]

    def put(self, key: Any, record: Any, chars: int) -> None:
        """Hold `record` under `key`, worth `chars`; the least recent leave past the bound."""
        with self._lock:
            old = self._by_key.pop(key, None)
            if old is not None:
                self.chars -= old[1]
            self._by_key[key] = (record, chars)
            self.chars += chars
            while self.chars > self.max_chars and self._by_key:
                _, (_, gone) = self._by_key.popitem(last=False)
                self.chars -= gone


class _StringChunks:
    """The chunk (digest, escaped text) of each long string saved lately, by identity.

    A session's long strings (its system prompt, in three fields; frozen outputs) are the
    same objects from one save to the next, and escaping and hashing them again was most of
    a save. Strings are immutable and each record keeps its string alive, so an id names
    the same text for as long as it is here. Bounded by the chars it holds (oldest first
    out), so it keeps at most ~16 MB alive."""

    def __init__(self, max_chars: int = 8 * 1024 * 1024, max_string: int = 1024 * 1024) -> None:
        self.max_string = max_string  # longer ones are rare, and would crowd out the rest
        self._memo = _CharBound(max_chars)

    def get(self, v: str) -> tuple[str, str]:
        hit = self._memo.get(id(v))
        if hit is not None and hit[0] is v:
            return hit[1], hit[2]
        text = encode_basestring_ascii(v)
        d = digest(text)
        if len(v) <= self.max_string:
            self._memo.put(id(v), (v, d, text), len(v) + len(text))
        return d, text


_STRINGS = _StringChunks()


class Sealed(dict):  # type: ignore[type-arg]
    """A dict its maker never changes after handing it to a save (a history entry's
    export: `session_state.entry_to_dict`). The journal remembers what it cut such a dict
    into, by identity, and reuses it at the next save: one session's entries were most of
    each save, encoded and hashed again every call. JSON sees a plain dict."""

    __slots__ = ()


class _SealedTexts:
    """The text and chunks of each sealed dict split lately, by identity (each record
    keeps its dict alive, so an id names the same object while it is here). Bounded by the
    chars it holds, oldest first out."""

    def __init__(self, max_chars: int = 8 * 1024 * 1024) -> None:
        self._memo = _CharBound(max_chars)

    def get(self, v: Sealed) -> tuple[str, dict[str, str]] | None:
        hit = self._memo.get(id(v))
        if hit is None or hit[0] is not v:
            return None
        return hit[1], hit[2]

    def put(self, v: Sealed, text: str, chunks: dict[str, str]) -> None:
        size = len(text) + sum(map(len, chunks.values()))
        if size <= self._memo.max_chars // 4:
            self._memo.put(id(v), (v, text, chunks), size)


_SEALED = _SealedTexts()


@dataclass(slots=True)
class _Run:
    items: list[Sealed]
    texts: list[str]
    chunks: dict[str, str]


class _SealedRuns:
    """The element texts and chunks of each long list of sealed dicts split lately (a
    session's history entries), by the identity of its first element.

    The entries of a session are the same `Sealed` objects from one save to the next, and
    the list grows at its end: a save looked each one up again (`_SEALED`), so it cost the
    history's length. When the list held last starts the new one, element for element the
    same objects (checked at C speed), its texts and chunks are taken whole and only the
    new elements are cut. Any other change (a rewritten history) cuts the list as before.
    Each record keeps its dicts alive, so an id names the same object while it is here;
    bounded by the chars of the texts and chunks held, least recently used out."""

    def __init__(self, max_chars: int = 16 * 1024 * 1024) -> None:
        self._memo = _CharBound(max_chars)

    def prefix(self, items: list[Any] | tuple[Any, ...]) -> tuple[int, list[str], dict[str, str]]:
        """(n, texts, chunks) of the run held whose elements are `items[:n]`, all of them;
        (0, [], {}) when none is."""
        prev = self._memo.get(id(items[0]))
        n = len(prev.items) if prev is not None else 0
        if prev is None or n > len(items) or not all(map(operator.is_, prev.items, items)):
            return 0, [], {}
        return n, prev.texts, prev.chunks

    def put(self, items: list[Any] | tuple[Any, ...], texts: list[str], chunks: dict[str, str]) -> None:
        chars = sum(map(len, texts)) + sum(map(len, chunks.values()))
        if chars <= self._memo.max_chars // 4:
            self._memo.put(id(items[0]), _Run(list(items), texts, chunks), chars)


_RUNS = _SealedRuns()


@dataclass(slots=True)
class _Cut:
    """How a list was cut last: its element texts, each block's end (exclusive) and
    (digest, text), and whether the last block is the list's open tail (no boundary
    closed it; every other block ends at one)."""

    texts: list[str]
    ends: list[int]
    pairs: list[tuple[str, str]]
    open_tail: bool


def _common_prefix(a: list[str], b: list[str]) -> int:
    """How many leading elements `a` and `b` share. Compared as slices, at C speed (a string
    is compared by identity first): a list that only grew costs one comparison."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class _ListCuts:
    """The blocks of the long lists split lately, by the texts of their first two elements.

    A session's history grows at its end, and so do the lists beside it (the digests of
    its blocks, its turn ids, its series): the blocks up to the last boundary inside the
    unchanged prefix are the same blocks, with the same digests, so only the rest is cut
    and hashed again. The prefix is found by the element texts' values, so a list whose
    texts are made anew at every save (short strings, numbers, digests) is found too.
    Where a boundary falls depends only on the elements since the one before (`_blocks`),
    so the result is what cutting the whole list gives. Bounded by the chars of the lists
    held, least recently used out."""

    def __init__(self, max_chars: int = 32 * 1024 * 1024) -> None:
        self._memo = _CharBound(max_chars)

    def cut(self, texts: list[str], min_items: int) -> list[tuple[str, str]]:
        """(digest, text) of each block of `texts`, as `_blocks` cuts them (held here:
        only read)."""
        key = (texts[0], texts[1] if len(texts) > 1 else "", min_items)
        prev = self._memo.get(key)
        pairs: list[tuple[str, str]] = []
        ends: list[int] = []
        if prev is not None:
            i = bisect_right(prev.ends, _common_prefix(prev.texts, texts))
            if i == len(prev.ends) and prev.open_tail:  # the open tail block: cut again
                i -= 1
            pairs, ends = prev.pairs[:i], prev.ends[:i]
        start = ends[-1] if ends else 0
        open_tail = False
        for b in _blocks(texts[start:], min_items):
            start += len(b)
            text = "[" + ",".join(b) + "]"
            pairs.append((digest(text), text))
            ends.append(start)
            open_tail = not _closes(b, min_items)
        chars = sum(map(len, texts))
        if chars <= self._memo.max_chars // 4:
            self._memo.put(key, _Cut(list(texts), ends, pairs, open_tail), chars)
        return pairs


_LIST_CUTS = _ListCuts()


class _KnownChunks:
    """Chunks this process wrote or read lately, parsed, by digest. A digest names its
    chunk's text, so a chunk known here is not parsed again: with replicas taking turns on
    a session, each parsed the other's whole journal at every call, though all but the
    newest chunks were ones it had written or read itself. (A reader that can, Redis, asks
    the store for a known one by name instead of its text: a chunk the store lost must
    still fail the read.) Kept as text until a read wants one, then parsed once; bounded
    by the chars held, the least recently read or added out. Parsed chunks are only read:
    `_decode` builds new containers from them."""

    def __init__(self, max_chars: int = 32 * 1024 * 1024) -> None:
        self.max_chars = max_chars
        self._by_digest: OrderedDict[str, tuple[bool, Any, int]] = OrderedDict()  # (parsed?, value, chars)
        self._chars = 0
        self._lock = threading.Lock()

    def offer(self, chunks: Mapping[str, str]) -> None:
        """Take the chunks of a save. Only those not held yet are looked at (found at C
        speed): a save offers every chunk of its state, and touching each held one cost the
        history's length. So a save does not make a held chunk recent; a read (`parsed`)
        does."""
        with self._lock:
            for d in list(filterfalse(self._by_digest.__contains__, chunks)):
                text = chunks[d]
                if len(text) <= self.max_chars // 8:
                    self._by_digest[d] = (False, text, len(text))
                    self._chars += len(text)
            self._trim()

    def parsed(self, d: str) -> tuple[bool, Any]:
        """(known, the chunk parsed) for digest `d`."""
        with self._lock:
            hit = self._by_digest.get(d)
            if hit is None:
                return False, None
            self._by_digest.move_to_end(d)
            done, value, size = hit
        if not done:
            value = json.loads(value)
            with self._lock:
                if d in self._by_digest:
                    self._by_digest[d] = (True, value, size)
        return True, value

    def remember(self, d: str, text: str, parsed: Any) -> None:
        if len(text) > self.max_chars // 8:
            return
        with self._lock:
            if d not in self._by_digest:
                self._chars += len(text)
            self._by_digest[d] = (True, parsed, len(text))
            self._trim()

    def _trim(self) -> None:
        while self._chars > self.max_chars and self._by_digest:
            _, (_, _, size) = self._by_digest.popitem(last=False)
            self._chars -= size


_CHUNKS = _KnownChunks()


class _DecodedBlocks:
    """The elements of each block of a session's history entries, decoded, by the block's
    digest. A digest names the block's text, and so its elements; with replicas taking
    turns, each decoded the other's every entry at every call, though all but the newest
    blocks were the same. The elements come back shared from read to read: the one reader
    of a state's entries (`history.session_state.load_session`) keeps of an entry only its
    frozen message, which nothing changes in place (a change makes a new message). Bounded
    by the chars of the strings held (a block keeps its long outputs alive), least
    recently used out."""

    def __init__(self, max_chars: int = 32 * 1024 * 1024) -> None:
        self._memo = _CharBound(max_chars)

    def get(self, d: str) -> list[Any] | None:
        return self._memo.get(d)

    def remember(self, d: str, elements: list[Any]) -> None:
        size = _chars_in(elements)
        if size <= self._memo.max_chars // 8:
            self._memo.put(d, elements, size)


def _chars_in(v: Any) -> int:
    """The chars of the strings in `v` (keys included), plus one per container and leaf."""
    total, stack = 0, [v]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            total += len(x)
        elif isinstance(x, dict):
            total += 1
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list):
            total += 1
            stack.extend(x)
        else:
            total += 1
    return total


_ENTRY_BLOCKS = _DecodedBlocks()
