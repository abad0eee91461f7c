"""How a history entry recognises its message again without keeping the original.

The agent resends its whole history at every call, and each entry must tell whether the
message at its position is still the one it froze. Keeping the raw message for that
comparison would hold every original in memory (a 5 MB tool output beside its 1 KB
reduced form) for as long as the session lives, although the store already keeps it.

So an entry keeps a field's raw value only where its frozen form holds an equal value
anyway (it then keeps the frozen object itself: no extra memory); anywhere else it keeps
a `Digest` (kind, length, SHA-256), and an incoming value is compared by digesting it,
or, while `raw_memo` (bounded, process-wide) still holds the original last seen under
that digest, by comparing it with that original: the same answer without the hashing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .._canonical import canonical_json, to_bytes
from . import raw_memo


@dataclass(frozen=True, slots=True)
class Digest:
    """Stands for a value the entry does not hold: a str (`kind` "s") by its code points,
    anything else ("j") by its canonical JSON."""

    kind: str
    size: int
    sha: bytes


def digest(value: Any) -> Digest:
    """The digest of `value`; `TypeError`/`ValueError` when it is neither a str nor JSON."""
    if isinstance(value, str):
        return Digest("s", len(value), hashlib.sha256(to_bytes(value)).digest())
    text = canonical_json(value)
    return Digest("j", len(text), hashlib.sha256(to_bytes(text)).digest())


def keep(value: Any, frozen_value: Any) -> Any:
    """What an entry keeps of a raw field: the frozen form's own object when equal (shared,
    so free), small scalars as they are, else the digest."""
    if value is frozen_value or value is None or isinstance(value, bool | int | float):
        return value
    try:
        if type(value) is type(frozen_value) and value == frozen_value:
            return frozen_value
    except RecursionError:  # nested beyond the interpreter's limit: the digest decides
        pass
    try:
        kept = digest(value)
    except (TypeError, ValueError, RecursionError):  # not JSON: kept, the frozen form is its copy
        return value
    if isinstance(value, str):
        raw_memo.remember(kept, value)  # the next call's resend compares instead of hashing
    return kept


def same(kept: Any, value: Any) -> bool:
    """Is `value` the raw field that `kept` (from `keep`) stands for?"""
    if not isinstance(kept, Digest):
        try:
            return bool(kept == value)
        except RecursionError:
            return False
    if kept.kind == "s":
        if not isinstance(value, str) or len(value) != kept.size:
            return False  # the length rules most changes out before any hashing
        seen = raw_memo.recall(kept)
        if seen is not None:  # the exact original: equal code points iff equal digests' input
            return seen == value
        if hashlib.sha256(to_bytes(value)).digest() != kept.sha:
            return False
        raw_memo.remember(kept, value)  # seen here first (an import, another replica's entry)
        return True
    if isinstance(value, str):
        return False
    try:
        return digest(value) == kept
    except (TypeError, ValueError, RecursionError):
        return False


def digest_to_json(value: Any) -> Any:
    """A kept value as JSON (for exported sessions): a digest as `{"digest": [kind, size, hex]}`."""
    if isinstance(value, Digest):
        return {"digest": [value.kind, value.size, value.sha.hex()]}
    return value


def digest_from_json(value: Any) -> Any:
    """The inverse of `digest_to_json`; any other value as it is (older exports kept raw values)."""
    if isinstance(value, dict) and set(value) == {"digest"} and isinstance(value["digest"], list):
        kind, size, sha = value["digest"]
        return Digest(str(kind), int(size), bytes.fromhex(sha))
    return value


def keep_calls(calls: tuple[tuple[Any, Any], ...] | None, frozen: Any) -> tuple[tuple[Any, Any], ...] | None:
    """`keep` for each (name, arguments) of a message's tool calls, against the frozen calls."""
    if calls is None:
        return None
    frozen_calls = frozen.get("tool_calls") if isinstance(frozen, dict) else None
    out = []
    for j, (name, args) in enumerate(calls):
        fargs = None
        if isinstance(frozen_calls, list | tuple) and j < len(frozen_calls):
            c = frozen_calls[j]
            fn = c.get("function") if isinstance(c, dict) else None
            fargs = fn.get("arguments") if isinstance(fn, dict) else None
        out.append((name, keep(args, fargs)))
    return tuple(out)


def same_calls(kept: tuple[tuple[Any, Any], ...] | None, calls: tuple[tuple[Any, Any], ...] | None) -> bool:
    if kept is None or calls is None:
        return kept is calls
    return len(kept) == len(calls) and all(kn == n and same(ka, a) for (kn, ka), (n, a) in zip(kept, calls))
