"""Why a session's cached prefix broke, and what to do about it.

The core names what changed in its render keys (`PrepareStats.prefix_break`: system
prompt, tools, history, eviction...). That says where, not why. `diagnose` compares
the previous call's rendered prefix with this one's and names the likely cause a user
can act on:

- `volatile value`: the change is a date, a time or an id (uuid, hex, long number), in
  the system prompt or in a message the client re-sends;
- `tools changed`: a tool joined, left or was redefined (names given);
- `client markers`: the messages are equal once the client's own cache markers
  (`cache_control`) and reminder blocks are taken out: the client moves them each call;
- `history rewritten`: the caller edited, dropped or reordered earlier messages
  (its own compaction, pruning, or a retry that rewrote a turn);
- `eviction`, `store recovered`, `tool-call ids`: TokenPilot's own, deliberate or rare.

Each record is small and bounded (excerpts of at most `EXCERPT` chars), so a session
keeps its last few in its saved stats for `tokenpilot doctor` and the dashboard.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tokenpilot.messages.compaction import ENDED_CAUSE, SHOWN_CAUSE
from tokenpilot.messages.model import content_text

EXCERPT = 120

VOLATILE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?"  # ISO dates and times
    r"|\d{1,2}:\d{2}(?::\d{2})?"  # clock times
    r"|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # uuids
    r"|\b(?=[0-9a-z_-]*\d)[0-9a-z_-]{8,}\b"  # ids: hex, request ids, long numbers
    r"|\b\d{4,}\b",
    re.IGNORECASE,
)
# what clients add to messages on their own and move between calls
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>\s*", re.DOTALL)
_MARKER_KEYS = frozenset({"cache_control"})

# The likely causes TokenPilot chose itself: a break then is the price of a smaller prompt
# (an eviction) or of a whole history for the caller's summary (a compaction request).
DELIBERATE = frozenset({"eviction", "compaction"})

FIXES: dict[str, str] = {
    "volatile value": (
        "a value that changes by itself (date, time, id) sits in the cached prefix: move it to the "
        "newest user message, or declare it with Config.volatile_patterns so TokenPilot turns it into a "
        "placeholder; keep the number of system messages constant (a changed count re-renders the prompt)"
    ),
    "tools changed": (
        "send the same tool list on every call (tools come first in the cache): register every tool, "
        "recall_artifact included, from the first call, and mask tools instead of removing them"
    ),
    "client markers": (
        "the client moves reminder blocks (or cache markers outside its messages, on its tools) between "
        "calls: keep reminders in the newest message and markers off the tools (a cache_control on a "
        "message TokenPilot takes off and puts back on the message that carried it)"
    ),
    "history rewritten": (
        "the caller edited or dropped earlier messages (its own compaction, context pruning or a "
        "rewritten retry): turn that off and let TokenPilot reduce and evict (OpenClaw: "
        "contextPruning.mode off; LangChain: no ContextEditing/Summarization middleware)"
    ),
    "system prompt edited": (
        "the system prompt's text or number of system messages changed: TokenPilot appends a change of "
        "text as a note, but re-renders the prompt when the count of system messages changes; keep the "
        "count constant and put per-call text in the newest message"
    ),
    "eviction": "deliberate: TokenPilot evicted finished work to make the prompt smaller (one break per batch)",
    "compaction": (
        "deliberate: the client asked for a summary of the whole conversation (its own compaction), so "
        "TokenPilot showed what it had evicted for that one call"
    ),
    "store recovered": "the artifact store failed earlier; outputs sent in full meanwhile are reduced now (once)",
    "tool-call ids": "the client renamed tool-call ids of earlier calls: keep ids stable across calls",
    "unknown": "compare the two messages shown; a restart of the proxy loses the previous rendering",
}


def _text(msg: Any) -> str:
    if isinstance(msg, Mapping):
        text = content_text(msg.get("content"))
        calls = msg.get("tool_calls")
        return text + (json.dumps(calls, sort_keys=True, ensure_ascii=False) if calls else "")
    return str(msg)


def _strip_markers(x: Any) -> Any:
    """A message without the client's own markers: cache_control keys, reminder blocks."""
    if isinstance(x, Mapping):
        return {k: _strip_markers(v) for k, v in x.items() if k not in _MARKER_KEYS}
    if isinstance(x, list):
        return [_strip_markers(v) for v in x]
    if isinstance(x, str):
        return _REMINDER.sub("", x)
    return x


def _normal(msg: Any) -> Any:
    """A message with content parts joined as text, to compare what the model reads."""
    x = _strip_markers(msg)
    if isinstance(x, dict) and isinstance(x.get("content"), list):
        x = {**x, "content": content_text(x["content"])}
    return x


def changed_span(a: str, b: str, margin: int = 24) -> tuple[str, str]:
    """The differing middles of two texts, with `margin` chars of context either side."""
    i = 0
    n = min(len(a), len(b))
    while i < n and a[i] == b[i]:
        i += 1
    j = 0
    while j < n - i and a[len(a) - 1 - j] == b[len(b) - 1 - j]:
        j += 1
    lo = max(i - margin, 0)
    return a[lo : len(a) - j + margin], b[lo : len(b) - j + margin]


def _core_span(a: str, b: str) -> tuple[str, str]:
    """The differing middles only, widened to whole words (a date differs in one digit)."""
    i = 0
    n = min(len(a), len(b))
    while i < n and a[i] == b[i]:
        i += 1
    j = 0
    while j < n - i and a[len(a) - 1 - j] == b[len(b) - 1 - j]:
        j += 1

    def widen(s: str, lo: int, hi: int) -> str:
        while lo > 0 and not s[lo - 1].isspace():
            lo -= 1
        while hi < len(s) and not s[hi].isspace():
            hi += 1
        return s[lo:hi]

    return widen(a, i, len(a) - j), widen(b, i, len(b) - j)


def _only_volatile(old: str, new: str) -> bool:
    """Both changed middles are made of dates, times or ids (and punctuation around them)."""
    pieces = [p for p in (old, new) if p.strip()]
    if not pieces:
        return False
    return all(VOLATILE.search(p) and not re.sub(r"[\W_]", "", VOLATILE.sub("", p)) for p in pieces)


def _cut(text: str, width: int = EXCERPT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _role(msg: Any) -> str:
    return str(msg.get("role")) if isinstance(msg, Mapping) else type(msg).__name__


def diagnose(
    cause: str,
    prev: Sequence[Any] | None,
    cur: Sequence[Any],
    *,
    at: int | None = None,
    prev_tools: Sequence[str] | None = None,
    tools: Sequence[str] = (),
    call: int = 0,
    now: float | None = None,
) -> dict[str, Any]:
    """A break record: when, the core's cause, the likely cause, the first differing
    message (index, role, before and after around the change) and what to do."""
    rec: dict[str, Any] = {"t": round(time.time() if now is None else now, 3), "call": call, "cause": cause}
    if cause == "tools changed":  # the tool list comes first in the prefix: it is what differs
        rec.update(
            index=None,
            role="tools",
            before=_cut(", ".join(prev_tools or ["?"])),
            after=_cut(", ".join(tools)),
        )
        rec["likely"] = _likely(cause, None, None, prev_tools, tools, rec)
        rec["fix"] = FIXES[rec["likely"]]
        return rec
    if cause == "system prompt changed" and prev:
        return _system_break(rec, prev, cur)
    i = _first_difference(prev, cur, at)
    a = prev[i] if prev is not None and i is not None and i < len(prev) else None
    b = cur[i] if i is not None and i < len(cur) else None
    if i is not None:
        rec.update(index=i, role=_role(b if b is not None else a))
    else:  # say what is known instead of an unknown position
        rec["where"] = (
            "not located: the previous request is not kept (the proxy restarted, or the session "
            "was reloaded from the store)"
            if prev is None
            else "not located: the messages of both requests are the same (what differs is outside them)"
        )
    if a is not None or b is not None:
        before, after = changed_span(_text(a) if a is not None else "", _text(b) if b is not None else "")
        rec.update(before=_cut(before), after=_cut(after))
    rec["likely"] = _likely(cause, a, b, prev_tools, tools, rec)
    if rec["likely"] == "client markers":  # the text is the same: show the markers that moved
        before, after = changed_span(json.dumps(a, ensure_ascii=False), json.dumps(b, ensure_ascii=False))
        rec.update(before=_cut(before), after=_cut(after))
    rec["fix"] = FIXES[rec["likely"]]
    return rec


def _leading_system(msgs: Sequence[Any]) -> list[Any]:
    out = []
    for m in msgs:
        if not (isinstance(m, Mapping) and m.get("role") in ("system", "developer")):
            break
        out.append(m)
    return out


def _system_break(rec: dict[str, Any], prev: Sequence[Any], cur: Sequence[Any]) -> dict[str, Any]:
    """The system prompt was re-rendered: which system message differs, and whether what
    changed in the prompt's text holds a date, a time or an id."""
    ps, cs = _leading_system(prev), _leading_system(cur)
    i = next((k for k, (a, b) in enumerate(zip(ps, cs)) if a != b), min(len(ps), len(cs)))
    a = ps[i] if i < len(ps) else None
    b = cs[i] if i < len(cs) else None
    before, after = changed_span(_text(a) if a is not None else "", _text(b) if b is not None else "")
    old, new = _core_span("\n".join(_text(m) for m in ps), "\n".join(_text(m) for m in cs))
    rec.update(
        index=i, role="system", before=_cut(before), after=_cut(after), system_messages=[len(ps), len(cs)]
    )
    rec["likely"] = (
        "volatile value" if VOLATILE.search(old) or VOLATILE.search(new) else "system prompt edited"
    )
    rec["fix"] = FIXES[rec["likely"]]
    return rec


def _first_difference(prev: Sequence[Any] | None, cur: Sequence[Any], at: int | None) -> int | None:
    if not prev:
        return at if at is not None and 0 <= at < len(cur) else None
    for i, (a, b) in enumerate(zip(prev, cur)):
        if a != b:
            return i
    if len(cur) < len(prev):  # the caller dropped messages: the first one missing
        return len(cur)
    return at if at is not None and 0 <= at < len(cur) else None


def _likely(
    cause: str,
    a: Any,
    b: Any,
    prev_tools: Sequence[str] | None,
    tools: Sequence[str],
    rec: dict[str, Any],
) -> str:
    if cause == "tools changed":
        if prev_tools is not None:
            added = [t for t in tools if t not in prev_tools]
            removed = [t for t in prev_tools if t not in tools]
            rec["tools_added"], rec["tools_removed"] = added[:10], removed[:10]
        return "tools changed"
    if cause == "eviction":
        return "eviction"
    if cause in (SHOWN_CAUSE, ENDED_CAUSE):
        return "compaction"
    if cause == "store_recovered":
        return "store recovered"
    if cause == "tool-call ids changed":
        return "tool-call ids"
    if a is not None and b is not None:
        marked = _strip_markers(a) != a or _strip_markers(b) != b
        if marked and _normal(a) == _normal(b):
            return "client markers"
        old, new = _core_span(_text(_strip_markers(a)), _text(_strip_markers(b)))
        if _only_volatile(old, new):
            return "volatile value"
    if cause == "system prompt changed":  # without the previous rendering (a restart)
        return "volatile value" if b is not None and VOLATILE.search(_text(b)) else "system prompt edited"
    if cause == "history rewritten by the caller":
        return "history rewritten"
    return "unknown"


def break_where(b: Mapping[str, Any]) -> str:
    """Where a prefix break's first difference is, in words: the tool list, a message by
    index and role, or why it could not be located (never `#? (?)`)."""
    if b.get("role") == "tools":
        return "tool list"
    if b.get("index") is not None:
        return f"#{b['index']} ({b.get('role') or 'message'})"
    return str(b.get("where") or "not located (recorded by an earlier version)")
