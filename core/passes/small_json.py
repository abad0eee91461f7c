"""small_json: re-encode a small JSON output so that nothing is lost and no recall is needed.

Outputs under the 2,200-char gate are never cut (a footer and a recall would cost more
than they save), but tool servers written in Python send `json.dumps(value)`: a space
after every `,` and `:`, and the same keys again in every item of an array of records
(tau-bench's flights, reservations, users). Here such an output becomes its compact
form (no spaces between tokens, non-ASCII written as itself), and with `rows` every
array of two or more objects with the same keys in the same order becomes
`{"keys": [...], "rows": [[...], ...]}` (an array of arrays of such objects, like
tau-bench's one-stop flight pairs, `{"keys": [...], "groups": [[[...], ...], ...]}`),
wherever that is shorter: every value is still there, in order.

Lossless by construction, not by storage: the rewrite is applied only when the original
is exactly `json.dumps(value)` with Python's defaults and `restore(slim)` gives it back
byte for byte (checked on every output before it is used). So nothing is stored, no id
is named and `recall_artifact` is never needed for it: the original is a pure function
of what the model sees. Anything else (indented JSON, duplicate keys, `1e400`, an object
that already looks like a table) is left as it came.

Pure and deterministic; never raises.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["restore", "slim"]

_KEYS, _ROWS, _GROUPS = "keys", "rows", "groups"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _shared_keys(objects: list[Any]) -> list[str] | None:
    """The keys of `objects` when all are non-empty objects with the same keys in the same order."""
    if not objects or not all(isinstance(v, dict) for v in objects) or not objects[0]:
        return None
    keys = list(objects[0])
    return keys if all(list(v) == keys for v in objects[1:]) else None


_MAX_TABLE_DEPTH = 16  # tables nested deeper are left as lists: each level re-measures its subtree


def _as_rows(value: Any, min_rows: int, depth: int = 0) -> Any:
    """`value` with every array of `min_rows`+ like objects (same keys, same order) as
    `{"keys", "rows"}`, and every array of arrays of like objects (tau's one-stop flight
    pairs) as `{"keys", "groups"}`, wherever the table is the shorter form."""
    if depth > _MAX_TABLE_DEPTH:
        return value
    if isinstance(value, list):
        items = [_as_rows(v, min_rows, depth + 1) for v in value]
        table: dict[str, Any] | None = None
        keys = _shared_keys(value) if len(value) >= min_rows else None
        if keys is not None:
            table = {_KEYS: keys, _ROWS: [list(v.values()) for v in items]}
        elif value and all(isinstance(v, list) and v for v in value):
            keys = _shared_keys([x for v in value for x in v])
            if keys is not None and sum(map(len, value)) >= min_rows:
                groups = [[list(_as_rows(x, min_rows, depth + 2).values()) for x in v] for v in value]
                table = {_KEYS: keys, _GROUPS: groups}
        if table is not None and len(_compact(table)) < len(_compact(items)):
            return table
        return items
    if isinstance(value, dict):
        return {k: _as_rows(v, min_rows, depth + 1) for k, v in value.items()}
    return value


def _rows_of(value: Any, n: int) -> bool:
    return isinstance(value, list) and all(isinstance(r, list) and len(r) == n for r in value)


def _table_kind(value: Any) -> str | None:
    """`_ROWS` or `_GROUPS` when `value` is a table `_as_rows` writes, else None."""
    if not isinstance(value, dict) or len(value) != 2 or list(value)[0] != _KEYS:
        return None
    keys = value[_KEYS]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    kind = list(value)[1]
    if kind == _ROWS and _rows_of(value[_ROWS], len(keys)):
        return kind
    if kind == _GROUPS and isinstance(value[_GROUPS], list):
        return kind if all(_rows_of(g, len(keys)) for g in value[_GROUPS]) else None
    return None


def _from_rows(value: Any) -> Any:
    """The inverse of `_as_rows`: every table back to its list of objects."""
    kind = _table_kind(value)
    if kind is not None:
        keys = value[_KEYS]

        def obj(row: list[Any]) -> dict[str, Any]:
            return dict(zip(keys, (_from_rows(x) for x in row), strict=True))

        if kind == _ROWS:
            return [obj(r) for r in value[_ROWS]]
        return [[obj(r) for r in g] for g in value[_GROUPS]]
    if isinstance(value, list):
        return [_from_rows(v) for v in value]
    if isinstance(value, dict):
        return {k: _from_rows(v) for k, v in value.items()}
    return value


def restore(slim_text: str) -> str:
    """The original output of a `slim` result, byte for byte."""
    return json.dumps(_from_rows(json.loads(slim_text)))


def slim(text: str, *, rows: bool = True, min_rows: int = 2) -> str | None:
    """The compact (and, with `rows`, tabled) form of a JSON object or array that is
    exactly `json.dumps(value)`, when `restore` gives `text` back and it is shorter; else None."""
    try:
        if text[:1] not in ("{", "["):
            return None
        value = json.loads(text)
        if json.dumps(value) != text:
            return None  # not the standard encoding: its layout could not be given back
        out = _compact(_as_rows(value, max(2, min_rows)) if rows else value)
        if len(out) >= len(text) or restore(out) != text:
            return None
        return out
    except (ValueError, TypeError, RecursionError):
        return None
    except Exception:  # a bug here must never take the agent down: the output passes as it came
        return None
