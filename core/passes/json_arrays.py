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

from .base import JSON, PassContext
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


@dataclass(frozen=True, slots=True)
class _Doc:
    arrays: list[_Array]  # every array, in document order (outer before inner)
    fields: dict[int, list[tuple[int, int]]]  # object start -> its values' (start, end)
    by_start: dict[int, _Array]  # array start -> the array


def _walk(s: str, i: int, doc: _Doc, depth: int) -> tuple[Any, int]:
    """Parse the value at `i` (after whitespace); record arrays' item spans and objects' value spans."""
    i = _skip(s, i)
    at = i
    if depth > 64:
        raise ValueError("too deep")
    if s.startswith("{", i):
        obj: dict[str, Any] = {}
        spans: list[tuple[int, int]] = []
        doc.fields[at] = spans
        i = _skip(s, i + 1)
        if s.startswith("}", i):
            return obj, i + 1
        while True:
            key, i = _DECODER.raw_decode(s, _skip(s, i))
            i = _skip(s, i)
            if not s.startswith(":", i):
                raise ValueError("expected ':'")
            vstart = _skip(s, i + 1)
            obj[key], i = _walk(s, vstart, doc, depth + 1)
            spans.append((vstart, i))
            i = _skip(s, i)
            if s.startswith(",", i):
                i += 1
                continue
            if s.startswith("}", i):
                return obj, i + 1
            raise ValueError("expected ',' or '}'")
    if s.startswith("[", i):
        arr = _Array([], [])
        doc.arrays.append(arr)
        doc.by_start[at] = arr
        i = _skip(s, i + 1)
        if s.startswith("]", i):
            return arr.values, i + 1
        while True:
            start = _skip(s, i)
            value, i = _walk(s, start, doc, depth + 1)
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
    accepts: ClassVar[frozenset[str]] = frozenset({JSON})

    min_items: int = 4
    """Fewest alike items in one array before any is left out (two are always kept)."""
    rows: bool = True
    """Up to `max_rows` like objects keep every value, as rows under their shared keys
    (`{"keys": [...], "rows": [[...], ...]}`): nothing is hidden, only the repeated keys
    go. Cutting the middle items instead made tau-bench agents recall the flights they
    chose (measured: +0.5 points of cost); rows keep them visible."""
    max_rows: int = 200
    """Longer arrays keep only their first and last item and a marker."""
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
            doc = _Doc([], {}, {})
            _, end = _walk(text, start, doc, 0)
            if text[_skip(text, end) :]:
                return text
            return self._cut(text, doc, ctx.artifact_id)
        except (ValueError, RecursionError, IndexError):
            return text
        except Exception:
            return text

    def _cut(self, text: str, doc: _Doc, aid: str) -> str:
        cuts: list[tuple[int, int, str]] = []  # (cut start, cut end, replacement text)
        # `doc.arrays` is in document order, outer arrays before the arrays inside them.
        for arr in doc.arrays:
            n = len(arr.values)
            if n < max(self.min_items, 3):
                continue
            shape = _shape(arr.values[0])
            if shape is None or any(_shape(v) != shape for v in arr.values[1:]):
                continue
            if any(cs <= arr.spans[0][0] < ce for cs, ce, _ in cuts):
                continue  # inside an array already rewritten
            if self.rows and n <= self.max_rows:
                table = self._table(text, arr, doc, aid)
                if table is not None:
                    cuts.append(table)
                    continue
            cut_start, cut_end = arr.spans[0][1], arr.spans[-1][0]
            first_line, last_line = _line_at(text, cut_start), _line_at(text, cut_end)
            keys = _keys(arr.values)
            listed = ", ".join(keys[: self.max_keys_listed])
            if len(keys) > self.max_keys_listed:
                listed += f", … ({len(keys)} keys)"
            what = f"{n - 2} more items like these (items 2–{n - 1} of {n}; keys: {listed})"
            marker = fold_marker(aid, first_line, last_line, what)
            if len(marker) + 8 >= cut_end - cut_start:
                continue
            cuts.append((cut_start, cut_end, ", " + json.dumps(marker, ensure_ascii=False) + ", "))
        if not cuts:
            return text
        out: list[str] = []
        pos = 0
        for cut_start, cut_end, replacement in sorted(cuts):
            out.append(text[pos:cut_start])
            out.append(replacement)
            pos = cut_end
        out.append(text[pos:])
        return "".join(out)

    def _table(self, text: str, arr: _Array, doc: _Doc, aid: str) -> tuple[int, int, str] | None:
        """The array as `{"tokenpilot": marker, "keys": [...], "rows": [...]}`, values spliced
        byte-for-byte from the original; None when an item is not an object (or an array of
        objects) or the table would not be shorter."""
        first = arr.values[0]
        if isinstance(first, dict):
            keys: Any = list(first)
        elif all(isinstance(v, dict) for v in first):
            keys = [list(v) for v in first]
        else:
            return None
        rows = []
        for start, _ in arr.spans:
            if start in doc.fields:
                rows.append(_row(text, doc.fields[start]))
                continue
            sub = doc.by_start.get(start)
            if sub is None or any(a not in doc.fields for a, _ in sub.spans):
                return None
            rows.append("[" + ", ".join(_row(text, doc.fields[a]) for a, _ in sub.spans) + "]")
        lo, hi = arr.spans[0][0], arr.spans[-1][1]
        # The whole array, brackets included, is replaced.
        while lo > 0 and text[lo - 1] != "[":
            lo -= 1
        lo -= 1
        while hi < len(text) and text[hi] != "]":
            hi += 1
        hi += 1
        what = f"{len(rows)} like items as rows under their shared keys"
        marker = fold_marker(aid, _line_at(text, lo), _line_at(text, hi - 1), what)
        table = (
            f'{{"tokenpilot": {json.dumps(marker, ensure_ascii=False)}, '
            f'"keys": {json.dumps(keys, ensure_ascii=False)}, "rows": [{", ".join(rows)}]}}'
        )
        return (lo, hi, table) if len(table) < hi - lo else None


def _row(text: str, spans: list[tuple[int, int]]) -> str:
    return "[" + ", ".join(text[a:b] for a, b in spans) + "]"
