"""json_arrays: an array of like items keeps its first and last item, a count and the keys.

Search APIs, MCP tools and booking backends answer with arrays of records that share
one shape (tau-bench's flights, `gh api` issues, `kubectl get -o json` items). The
model learns the shape from one record and the range from the first and the last; the
rest is one `recall_artifact` (by line range, or by `pattern`, e.g. a flight number) away.

Items are alike when all are objects with the same keys, or all are short arrays whose
elements have the same shapes. An array of at least `min_items` alike items keeps its
first and last item byte-for-byte (the text is spliced, never re-serialised, so no field
of a kept item changes); between them goes one JSON string, so the result stays valid
JSON, naming how many items were left out, their shared keys and the original's lines
that held them. Nested arrays inside a kept item are treated the same way.

Pure and deterministic; never raises; returns its input object when it does not apply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from .base import PassContext
from .folding import fold_marker

__all__ = ["JsonArrays"]

_WS = " \t\n\r"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class _Array:
    spans: list[tuple[int, int]]  # (start, end) char offsets of each item
    values: list[Any]


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _walk(s: str, i: int, found: list[_Array], depth: int) -> tuple[Any, int]:
    """Parse the value at `i` (after whitespace); record every array's item spans."""
    i = _skip(s, i)
    if depth > 64:
        raise ValueError("too deep")
    if s.startswith("{", i):
        obj: dict[str, Any] = {}
        i = _skip(s, i + 1)
        if s.startswith("}", i):
            return obj, i + 1
        while True:
            key, i = _DECODER.raw_decode(s, _skip(s, i))
            i = _skip(s, i)
            if not s.startswith(":", i):
                raise ValueError("expected ':'")
            obj[key], i = _walk(s, i + 1, found, depth + 1)
            i = _skip(s, i)
            if s.startswith(",", i):
                i += 1
                continue
            if s.startswith("}", i):
                return obj, i + 1
            raise ValueError("expected ',' or '}'")
    if s.startswith("[", i):
        arr = _Array([], [])
        found.append(arr)
        i = _skip(s, i + 1)
        if s.startswith("]", i):
            return arr.values, i + 1
        while True:
            start = _skip(s, i)
            value, i = _walk(s, start, found, depth + 1)
            arr.spans.append((start, i))
            arr.values.append(value)
            i = _skip(s, i)
            if s.startswith(",", i):
                i += 1
                continue
            if s.startswith("]", i):
                return arr.values, i + 1
            raise ValueError("expected ',' or ']'")
    return _DECODER.raw_decode(s, i)


def _shape(value: Any, depth: int = 0) -> Any:
    """What makes items alike: an object's keys; a short array's element shapes."""
    if isinstance(value, dict):
        return ("object", tuple(value))
    if isinstance(value, list) and depth == 0 and len(value) <= 4:
        return ("array", tuple(_shape(v, 1) for v in value))
    return None


def _line_at(text: str, pos: int) -> int:
    """1-based number of the line holding char `pos`, counted as `str.splitlines` counts."""
    return max(1, len(text[: pos + 1].splitlines()))


def _keys(values: list[Any]) -> list[str]:
    first = values[0]
    if isinstance(first, dict):
        return list(first)
    keys: list[str] = []
    for v in first:
        if isinstance(v, dict):
            keys += [k for k in v if k not in keys]
    return keys


@dataclass(frozen=True, slots=True)
class JsonArrays:
    """Keep the first and last of many like items in a JSON output; mark the rest for recall."""

    name: ClassVar[str] = "json_arrays"

    min_items: int = 4
    """Fewest alike items in one array before any is left out (two are always kept)."""
    max_keys_listed: int = 12
    """Shared keys named in the marker (the rest are counted)."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The text with long arrays of like items cut to first, marker, last; or the input object."""
        try:
            if not isinstance(text, str) or not ctx.artifact_id:
                return text
            start = _skip(text, 0)
            if not text.startswith(("[", "{"), start):
                return text
            found: list[_Array] = []
            _, end = _walk(text, start, found, 0)
            if text[_skip(text, end) :]:
                return text
            return self._cut(text, found, ctx.artifact_id)
        except (ValueError, RecursionError, IndexError):
            return text
        except Exception:
            return text

    def _cut(self, text: str, found: list[_Array], aid: str) -> str:
        cuts: list[tuple[int, int, str]] = []  # (cut start, cut end, marker text)
        # `found` is in document order, outer arrays before the arrays inside them.
        for arr in found:
            n = len(arr.values)
            if n < max(self.min_items, 3):
                continue
            shape = _shape(arr.values[0])
            if shape is None or any(_shape(v) != shape for v in arr.values[1:]):
                continue
            cut_start, cut_end = arr.spans[0][1], arr.spans[-1][0]
            if any(cs <= cut_start < ce for cs, ce, _ in cuts):
                continue  # inside an item already cut
            first_line, last_line = _line_at(text, cut_start), _line_at(text, cut_end)
            keys = _keys(arr.values)
            listed = ", ".join(keys[: self.max_keys_listed])
            if len(keys) > self.max_keys_listed:
                listed += f", … ({len(keys)} keys)"
            what = f"{n - 2} more items like these (items 2–{n - 1} of {n}; keys: {listed})"
            marker = fold_marker(aid, first_line, last_line, what)
            if len(marker) + 8 >= cut_end - cut_start:
                continue
            cuts.append((cut_start, cut_end, marker))
        if not cuts:
            return text
        out: list[str] = []
        pos = 0
        for cut_start, cut_end, marker in sorted(cuts):
            out.append(text[pos:cut_start])
            out.append(", " + json.dumps(marker, ensure_ascii=False) + ", ")
            pos = cut_end
        out.append(text[pos:])
        return "".join(out)
