"""Why a simulated call missed the cache, in words a reader can check against the prompt.

The simulator finds where a request parts from what is cached; these helpers measure the
shared characters of the differing segment and say what changed there (`label: "text"`,
tools added, removed or reordered). Apart from the simulator's bookkeeping because they
only read segments; `excerpt` is re-exported from `cachesim.py`.
"""

from __future__ import annotations

import json

from .cache_segments import Segment


def common_chars(a: Segment, b: Segment | None) -> int:
    """Length of the common character prefix (0 for synthetic segments: content unknown)."""
    if b is None or a.tokens is not None or b.tokens is not None:
        return 0
    x, y = a.text, b.text
    if not x or not y or x[0] != y[0]:
        return 0
    lo, hi = 0, min(len(x), len(y))
    while lo < hi:  # binary search on slice equality: C-speed compares
        mid = (lo + hi + 1) // 2
        if x[:mid] == y[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def describe(new: Segment, old: Segment, pos: int) -> str:
    """`label: "changed text"`, or what happened to a list of items (tools)."""
    if new.parts and old.parts:
        if sorted(new.parts) == sorted(old.parts):
            return f"{new.label}: order changed"
        added = [_item_name(p) for p in new.parts if p not in old.parts]
        removed = [_item_name(p) for p in old.parts if p not in new.parts]
        bits = []
        if added:
            bits.append("added " + ", ".join(added))
        if removed:
            bits.append("removed " + ", ".join(removed))
        return f"{new.label}: {'; '.join(bits)}"
    if new.tokens is not None or old.tokens is not None:
        return f"{new.label}: changed"
    return f'{new.label}: "{excerpt(new.text, pos)}"'


def _item_name(part: str) -> str:
    try:
        obj = json.loads(part)
        fn = obj.get("function") if isinstance(obj.get("function"), dict) else obj
        return str(fn.get("name") or part[:24])
    except (ValueError, AttributeError):
        return part[:24]


_JSON_CONTENT = '{"content":"'


def excerpt(text: str, pos: int, width: int = 60) -> str:
    """The line of `text` around `pos` (JSON-escaped newlines count as line breaks)."""
    nl = text.rfind("\n", 0, pos)
    esc = text.rfind("\\n", 0, pos)
    start = max(nl + 1 if nl >= 0 else 0, esc + 2 if esc >= 0 else 0)
    if start == 0 and text.startswith(_JSON_CONTENT) and pos >= len(_JSON_CONTENT):
        start = len(_JSON_CONTENT)  # a message segment: show its content, not the JSON wrapper
    lead = ""
    if pos - start > 40:
        start, lead = pos - 20, "…"
    ends = [i for i in (text.find("\n", pos), text.find("\\n", pos)) if i >= 0]
    end = min([start + width, *ends]) if ends else min(len(text), start + width)
    end = max(end, min(len(text), pos + 1))
    trail = "…" if end < len(text) and end == start + width else ""
    body = text[start:end]
    if start >= len(_JSON_CONTENT) and text.startswith(_JSON_CONTENT) and '","role":"' in body:
        body, trail = body.split('","role":"', 1)[0], ""
    return lead + body.strip() + trail
