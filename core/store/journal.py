"""Session state as content-addressed chunks plus a small head: a save writes what is new.

A session's state (what the proxy saves: `TokenPilot.export_session` wrapped with its
stats) grows by a few frozen entries per call, yet was rewritten whole on every call,
with the system prompt in it several times. `split` turns the state into:

- chunks, each a piece of ASCII JSON keyed by the digest of its text, written once and
  never changed: long strings (a system prompt, a large frozen message) and blocks of
  consecutive elements of long lists (entries, series) or items of large dicts;
- a head: the state with those pieces replaced by references (a few hundred bytes to a
  few KB of counters, versions and small fields, whatever the session's length).

Blocks end where an element's own bytes say so (a content-defined boundary, about every
`TARGET` bytes), not at fixed positions: appending entries rewrites only the last, open
block, and every replica cuts the same state into the same chunks, so two replicas that
take turns on a session write only what is new, too. A long list of block references is
cut the same way, one level up, so the head stays small.

Writers store the chunks they have not stored yet, then the head (`journal_head`): a
crash in between leaves the old head and a few unreferenced chunks, which the store
collects when the session is closed or compacted. `join` reads a head and the chunks it
needs back into the state, equal to what was split.

Encoding: a reference is a one-key object whose key is a marker starting with NUL:
`{"\\u0000s": d}` (a string), `{"\\u0000l": R}` (a list: the concatenation of the lists
in the chunks R names), `{"\\u0000o": R}` (a dict, merged from the chunks R names), where
R is a list of digests or itself an `\\u0000l` reference. A key of the state that starts
with NUL is written with one more NUL in front, so no state is read back as a reference.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from .journal_blocks import _blocks, digest
from .journal_memo import (
    _CHUNKS,
    _ENTRY_BLOCKS,
    _LIST_CUTS,
    _RUNS,
    _SEALED,
    _STRINGS,
    Sealed,
)

STR_MIN = 1024  # strings from this many chars on are chunks of their own (stored once)
SMALL = 256  # containers whose JSON is shorter stay inline in their parent
_MANY = 48  # containers with more elements are never tried as one piece; dicts with more
# items are maps (cut into blocks as lists are), smaller ones records (their fields stay in
# place, so a head shows a state's id and counters as they are)

META = "\x00journal"  # the head's key for its own record (versions, format)
STR, LIST, DICT = "\x00s", "\x00l", "\x00o"
_MARKERS = (STR, LIST, DICT)
FORMAT = 1


def _default(o: Any) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


# One C encoder, made once: `json.dumps` builds a new one per call, which costs more than
# encoding a small element. Same text as json.dumps(ensure_ascii=True, separators=(",", ":")).
# Interpreters without json's C accelerator (c_make_encoder is None there) use json.dumps.
if c_make_encoder is not None:
    _encoder = c_make_encoder(None, _default, encode_basestring_ascii, None, ":", ",", False, False, True)

    def _dumps(v: Any) -> str:
        return "".join(_encoder(v, 0))

else:

    def _dumps(v: Any) -> str:
        return json.dumps(v, ensure_ascii=True, separators=(",", ":"), allow_nan=True)


_SCALARS = (int, float, bool, type(None))


class JournalError(ValueError):
    """A head names a chunk the store does not hold, or is not a journal head."""


@dataclass
class Split:
    """A state cut into a head and chunks (digest -> JSON text). `body` is the head's
    fields as JSON text without braces; `chunks` holds every chunk the head reaches,
    directly or through other chunks."""

    body: str
    chunks: dict[str, str] = field(default_factory=dict)

    def head(self, meta: Mapping[str, Any] | None = None) -> str:
        """The head's JSON text, with `meta` (small, JSON-safe) as its own record."""
        return head_text(self.body, meta)

    def new_chunks(self, known: Iterable[str] | set[str]) -> dict[str, str]:
        """The chunks a store that holds `known` still needs."""
        have = known if isinstance(known, (set, frozenset)) else set(known)
        return {d: t for d, t in self.chunks.items() if d not in have}


def _key(k: str) -> str:
    """A dict key as written: one more NUL in front of a key that starts with one."""
    return encode_basestring_ascii("\x00" + k if k.startswith("\x00") else k)


def _probably_small(v: Any) -> bool:
    """A cheap guess, without serialising, that `v`'s JSON is under `SMALL` bytes: walks at
    most about `SMALL / 2` nodes, so a large dict is found large at once."""
    budget = SMALL
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            budget -= len(x) + 2
        elif isinstance(x, (dict, list, tuple)):
            if len(x) > _MANY:
                return False
            budget -= 2 * len(x) + 2
            stack.extend(x.values() if isinstance(x, dict) else x)
        else:
            budget -= 2
        if budget < 0:
            return False
    return True


def _holds_long_string(v: list[Any] | tuple[Any, ...] | Mapping[Any, Any]) -> bool:
    """Whether a child or grandchild of `v` is a string of `STR_MIN` chars or more: then
    `v`'s JSON is long, and encoding it whole only to find that out (a system prompt sits
    under three fields of a state) costs more than the walk. Looks at no more than `_MANY`
    children of each container."""
    kids = v.values() if isinstance(v, Mapping) else v
    for i, x in enumerate(kids):
        if i >= _MANY:
            return False
        if type(x) is str:
            if len(x) >= STR_MIN:
                return True
        elif type(x) is dict or type(x) is list:
            grand = x.values() if type(x) is dict else x
            for k, y in enumerate(grand):
                if k >= _MANY:
                    break
                if type(y) is str and len(y) >= STR_MIN:
                    return True
    return False


def _scalar(v: Any) -> str | None:
    """JSON of a scalar without the encoder's set-up cost (the same text `json.dumps` gives)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is int:
        return int.__repr__(v)
    return None


class _Splitter:
    def __init__(self) -> None:
        self.chunks: dict[str, str] = {}

    def put(self, text: str) -> str:
        d = digest(text)
        self.chunks[d] = text
        return d

    def value(self, v: Any) -> str:
        """`v` as head/chunk JSON: inline when small, references for what is large."""
        if isinstance(v, str):
            if len(v) < STR_MIN:
                return encode_basestring_ascii(v)
            d, text = _STRINGS.get(v)
            self.chunks[d] = text
            return '{"\\u0000s":"' + d + '"}'
        fast = _scalar(v)
        if fast is not None:
            return fast
        if isinstance(v, dict):
            return self.dict_(v)
        if isinstance(v, (list, tuple)):
            # a list of sealed dicts (a session's tools) is cut element by element, whose texts
            # the memo has: joined, they are the whole text when that is short
            sealed = len(v) > 0 and type(v[0]) is Sealed
            whole = _dumps(v) if len(v) <= _MANY and not sealed and not _holds_long_string(v) else ""
            if whole and len(whole) < SMALL and '"\\u0000' not in whole:
                return whole
            return self.list_(self.elements(v))
        return _dumps(v)  # floats, and anything else json accepts (or its TypeError, as before)

    def elements(self, v: list[Any] | tuple[Any, ...]) -> list[str]:
        """A list's elements as texts. A long list of sealed dicts (a session's entries)
        is taken from its last split where it only grew (`_RUNS`): a save then costs what
        is new."""
        if len(v) > _MANY and type(v[0]) is Sealed:
            n, held, chunks = _RUNS.prefix(v)
            sub = _Splitter()
            texts = held + sub.each(v[n:])
            chunks = {**chunks, **sub.chunks}
            _RUNS.put(v, texts, chunks)
            self.chunks.update(chunks)
            return texts
        return self.each(v)

    def each(self, v: list[Any] | tuple[Any, ...]) -> list[str]:
        """Each element's text. A container is serialised whole (one C call), and cut up
        only when that text is large or holds a NUL-prefixed key that needs escaping. The
        hot loop of a save: one pass over every element it is given."""
        out: list[str] = []
        dumps, esc, value = _dumps, encode_basestring_ascii, self.value
        for x in v:
            t = type(x)
            if t is str:
                out.append(esc(x) if len(x) < STR_MIN else value(x))
            elif t is dict or t is list:
                if _holds_long_string(x):  # its text is long: cut up, without encoding it first
                    out.append(value(x))
                    continue
                text = dumps(x)
                out.append(text if len(text) < STR_MIN and '"\\u0000' not in text else value(x))
            elif t is int:
                out.append(int.__repr__(x))
            elif t is Sealed:
                out.append(self.sealed(x))
            else:
                out.append(value(x))
        return out

    def sealed(self, x: Sealed) -> str:
        """A sealed element's text, as `elements` cuts a dict, from the memo when it has it."""
        hit = _SEALED.get(x)
        if hit is not None:
            text, chunks = hit
            self.chunks.update(chunks)
            return text
        sub = _Splitter()
        text = sub.each([dict(x)])[0]  # exactly what a plain dict with these items gives
        _SEALED.put(x, text, sub.chunks)
        self.chunks.update(sub.chunks)
        return text

    def items(self, d: Mapping[Any, Any]) -> list[str]:
        out = []
        for k, v in d.items():
            if not isinstance(k, str):  # json's own conversion of ints, floats, None and bools
                k = next(iter(json.loads(_dumps({k: 0}))))
            out.append(_key(k) + ":" + self.value(v))
        return out

    def dict_(self, d: Mapping[Any, Any]) -> str:
        if len(d) <= _MANY and _probably_small(d):
            whole = _dumps(d)
            if len(whole) < SMALL and '"\\u0000' not in whole:
                return whole
        texts = self.items(d)
        if len(texts) > _MANY and sum(map(len, texts)) >= SMALL:  # a growing map: blocks, as a list
            refs = [self.put("{" + ",".join(b) + "}") for b in _blocks(texts)]
            return '{"\\u0000o":' + self.refs(refs) + "}"
        return "{" + ",".join(texts) + "}"  # a record: its fields stay in place

    def list_(self, texts: list[str], min_items: int = 1) -> str:
        if sum(map(len, texts)) + len(texts) < SMALL or len(texts) < min_items:
            return "[" + ",".join(texts) + "]"
        pairs = _LIST_CUTS.cut(texts, min_items)
        self.chunks.update(pairs)
        return '{"\\u0000l":' + self.refs([d for d, _ in pairs]) + "}"

    def refs(self, refs: list[str]) -> str:
        """A list of digests: inline while short, else cut into chunks itself (one level up;
        at least two digests a block, so each level is shorter and the head stays small)."""
        return self.list_(['"' + d + '"' for d in refs], min_items=2)


def split(data: Mapping[str, Any]) -> Split:
    """`data` (a JSON-safe dict, as `json.dumps` takes it) as a head and its chunks."""
    s = _Splitter()
    out = Split(",".join(s.items(data)), s.chunks)
    _CHUNKS.offer(s.chunks)
    return out


def head_text(body: str, meta: Mapping[str, Any] | None = None) -> str:
    """A head from its fields' text and its own record (`META`: versions and the like,
    which a store reads without the chunks)."""
    record = '"\\u0000journal":' + _dumps(dict(meta or {}, format=FORMAT))
    return "{" + record + ("," + body if body else "") + "}"


def body_of(head: Mapping[str, Any]) -> str:
    """The fields' text of a parsed head, to write it again under another record."""
    return _dumps({k: v for k, v in head.items() if k != META})[1:-1]


def is_head(obj: Any) -> bool:
    """Whether a parsed document is a journal head (else: a whole state of the old format)."""
    return isinstance(obj, dict) and isinstance(obj.get(META), dict)


def head_meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj[META])


def _refs_in(v: Any, out: list[tuple[str, int]]) -> None:
    """Chunks that `v` (parsed JSON) names directly, each with its level: 0 for a chunk of
    data, n for a chunk that lists digests of level n - 1 (a reference list cut up)."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if len(x) == 1:
                ((k, val),) = x.items()
                if k == STR and isinstance(val, str):
                    out.append((val, 0))
                    continue
                if k in (LIST, DICT):
                    level = 0
                    while isinstance(val, dict) and len(val) == 1 and LIST in val:
                        val, level = val[LIST], level + 1
                    if isinstance(val, list):
                        out.extend((d, level) for d in val if isinstance(d, str))
                    continue
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


_REFS: OrderedDict[str, list[tuple[str, int]]] = OrderedDict()
_REFS_MAX = 16_384  # chunks whose references are remembered, least recently used out
_REFS_LOCK = threading.Lock()


def _chunk_refs(d: str, parsed: Any) -> list[tuple[str, int]]:
    """`_refs_in` of chunk `d`, remembered by digest: a digest names its chunk's text, so
    its references never change, and a replica loading another's state walked every chunk
    of it at every load to find them."""
    with _REFS_LOCK:
        hit = _REFS.get(d)
        if hit is not None:
            _REFS.move_to_end(d)
            return hit
    found: list[tuple[str, int]] = []
    _refs_in(parsed, found)
    with _REFS_LOCK:
        _REFS[d] = found
        while len(_REFS) > _REFS_MAX:
            _REFS.popitem(last=False)
    return found


Fetch = Callable[[list[str]], Mapping[str, str]]
Read = Callable[[list[str], list[str]], tuple[Mapping[str, str], Collection[str]]]
"""`read(wanted, held)`: the texts of `wanted`, and which of `held` the store lacks (a
chunk this process holds parsed is checked by name, not sent again)."""


def _fetch_all(root: Any, fetch: Fetch, read: Read | None = None) -> dict[str, Any]:
    """Every chunk `root` reaches, parsed, read level by level (one `fetch` per level).
    Every one is asked for, known or not: a chunk the store lost is an error. With `read`,
    a chunk this process holds parsed is only checked by name (`Read`)."""
    got: dict[str, Any] = {}
    todo: list[tuple[str, int]] = []
    _refs_in(root, todo)
    while todo:
        want = {d: level for d, level in todo if d not in got}
        if not want:
            break
        held: dict[str, Any] = {}
        for d in want:
            hit, parsed = _CHUNKS.parsed(d)
            if hit:
                held[d] = parsed
        if read is not None:
            texts, lost = read([d for d in want if d not in held], list(held))
        else:
            texts = fetch(list(want))
            lost = [d for d in held if d not in texts]  # held here, still it must be stored
        if lost:
            raise JournalError(f"the session's journal lacks chunk {next(iter(lost))}")
        todo = []
        for d, level in want.items():
            if d in held:
                parsed = held[d]
            else:
                text = texts.get(d)
                if text is None:
                    raise JournalError(f"the session's journal lacks chunk {d}")
                parsed = json.loads(text)
                _CHUNKS.remember(d, text, parsed)
            got[d] = parsed
            if level == 0:
                todo.extend(_chunk_refs(d, parsed))
            elif isinstance(parsed, list):
                todo.extend((x, level - 1) for x in parsed if isinstance(x, str))
            else:
                raise JournalError(f"chunk {d} is not a list of digests")
    return got


_LEAVES = frozenset({str, int, float, bool, type(None)})  # decoded as they are: no call per leaf


def _decode(v: Any, got: Mapping[str, Any]) -> Any:
    if isinstance(v, list):
        return [x if type(x) in _LEAVES else _decode(x, got) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) == 1:
        ((k, val),) = v.items()
        if k == STR:
            return got[val]
        if k == LIST:
            out: list[Any] = []
            for d in _decode(val, got):
                out.extend(_decode(got[d], got))
            return out
        if k == DICT:
            merged: dict[str, Any] = {}
            for d in _decode(val, got):
                merged.update(_decode(got[d], got))
            return merged
    return {
        (k[1:] if k.startswith("\x00") else k): (
            x if type(x) in _LEAVES else _entries(x, got) if k == ENTRIES else _decode(x, got)
        )
        for k, x in v.items()
    }


ENTRIES = "entries"  # a session's history (`TokenPilot.export_session`): its blocks decode once


def _entries(v: Any, got: Mapping[str, Any]) -> Any:
    """`_decode` of a session's entries: each block's elements as decoded before
    (`journal_memo._ENTRY_BLOCKS`), only the blocks new to this process decoded."""
    if not (isinstance(v, dict) and len(v) == 1 and LIST in v):
        return _decode(v, got)
    out: list[Any] = []
    for d in _decode(v[LIST], got):
        block = _ENTRY_BLOCKS.get(d)
        if block is None:
            block = _decode(got[d], got)
            _ENTRY_BLOCKS.remember(d, block)
        out.extend(block)
    return out


def picked(state: dict[str, Any], fields: Collection[str] | None) -> dict[str, Any]:
    """`state` with only the top-level keys in `fields` (None: all of it): what a read with
    `fields` gives of a state of the old layout, as `join` does of a head."""
    return state if fields is None else {k: v for k, v in state.items() if k in fields}


def join(
    head: Mapping[str, Any], fetch: Fetch, fields: Collection[str] | None = None, read: Read | None = None
) -> tuple[dict[str, Any], set[str]]:
    """The state a parsed head stands for, and the digests of every chunk it reached.
    `fetch(digests)` returns the texts it has (a missing one: `JournalError`). `fields`:
    only these top-level keys, and only the chunks they reach (a stats view needs each
    state's counters, which sit in its head, not its history)."""
    if not is_head(head):
        raise JournalError("not a journal head")
    body = {k: v for k, v in head.items() if k != META and (fields is None or k in fields)}
    got = _fetch_all(body, fetch, read)
    return _decode(body, got), set(got)


def reachable(head: Mapping[str, Any], fetch: Fetch) -> set[str]:
    """The digests a head reaches (what a collection must keep)."""
    return set(_fetch_all({k: v for k, v in head.items() if k != META}, fetch))
