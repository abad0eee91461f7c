"""Rendering a session's history for one call (`render_call`, `prepare`'s third stage): each
entry's frozen form (with the
caller's current tool-call ids), system-update notes, eviction stubs in place of what
the lifecycle's plan drops; and the render keys that tell, at the next call, whether
the request still extends this one (I1) and, where not, why and from where.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._canonical import canonical_json, sha256_hex
from ..config import Config
from ..ingest.stabilize import RECALLED_MARKER, is_recall_tool, values_block
from ..messages.compaction import ENDED_CAUSE, SHOWN_CAUSE
from ..messages.markers import Mark, with_marks
from ..messages.model import role_and_text
from .session import Entry, Session
from .sync import call_ids
from .system_prompt import TAIL_TITLE, SystemPrompts
from .take import Taken

log = logging.getLogger("tokenpilot")


@dataclass(frozen=True, slots=True)
class Rendered:
    """One call's messages as sent, and what the record stage reads of them."""

    messages: list[Any]  # the system prompt, the history, the per-call tail
    keys: list[str]  # one render key per history message: what a prefix break is read from
    evicted: set[int]  # entries the lifecycle's plan took out of view
    tail_start: int  # where the per-call tail starts (== len(messages) when there is none)


def render_call(
    s: Session,
    taken: Taken,
    cfg: Config,
    system: SystemPrompts,
    marks: Mapping[int, Sequence[Mark]] | None = None,
) -> Rendered:
    """`prepare`'s third stage: the lifecycle observes the history and plans (unless the
    caller asks for a summary of everything), and the session renders as this call sends it.
    `marks`: the caller's cache markers by request index (`messages.markers`), put back on
    the messages that carried them (a system message's on the system prompt as rendered)."""
    k = taken.system_count
    later = {i - k: m for i, m in (marks or {}).items() if i >= k}
    history, keys, evicted = render_history(s, taken.history, cfg, whole=taken.whole, marks=later)
    head = list(s.system.rendered)
    for i, m in (marks or {}).items():
        if i < k and head:
            j = min(i, len(head) - 1)
            head[j] = with_marks(head[j], m)
    out = head + history
    tail_start = len(out)
    tail_values = system.tail_values(s)
    if tail_values:
        out.append({"role": cfg.tail_role, "content": values_block(tail_values, title=TAIL_TITLE)})
    return Rendered(out, keys, evicted, tail_start)


def render_history(
    s: Session,
    history: list[Any],
    cfg: Config,
    *,
    whole: bool = False,
    marks: Mapping[int, Sequence[Mark]] | None = None,
) -> tuple[list[Any], list[str], set[int]]:
    """Frozen messages (with current ids), update notes, eviction stubs; and render keys.

    `whole`: render with nothing evicted (a compaction request, `tokenpilot.messages.compaction`);
    the lifecycle still sees the call, so its schedule and plan go on as before. `marks`:
    the caller's cache markers by history index, on the messages as sent (not in the keys:
    a marker that moves is no change)."""
    drop: set[int] = set()
    stubs: dict[int, list[dict[str, Any]]] = {}
    cut: dict[int, str] = {}  # outputs shown as a marker (cut in place)
    if s.lifecycle is not None:
        frozen = [e.frozen for e in s.entries]
        adds_tool = cfg.register_recall_tool and cfg.recall_tool_from != "first_call" and not s.recallable
        if hasattr(s.lifecycle, "head_refill_tokens"):  # a custom lifecycle may not weigh it
            s.lifecycle.head_refill_tokens = s.system.tokens + s.tools_tokens if adds_tool else None
        try:
            s.lifecycle.observe(frozen)
            plan = s.lifecycle.view(frozen)
            s.plan_version = plan.version
            cut = dict(getattr(plan, "replace", None) or {})  # a custom lifecycle may cut nothing
            if not whole:
                drop = set(plan.drop)
                stubs = {i: list(ms) for i, ms in plan.stubs.items()}
            else:  # everything shown: a recalled copy repeats what the archive holds, and the
                # request holds its original as taken in (an evicted one shown, a reduced one reduced)
                cut = {i: t for i, t in cut.items() if _recalled_copy(s, i)}
                cut.update((i, RECALLED_MARKER) for i in plan.drop if i not in cut and _recalled_copy(s, i))
        except Exception as exc:  # eviction is an optimisation: never fail the call
            log.warning("tokenpilot: lifecycle failed, rendering without eviction: %s", exc)
            drop, stubs, cut = set(), {}, {}
    gone = drop | set(cut)  # a fold that points at a cut output needs its lines too
    moved = s.moved.texts_for(s.entries, frozenset(gone)) if gone else {}
    updates: dict[int, list[dict[str, Any]]] = {}
    for pos, m in s.updates:
        updates.setdefault(pos, []).append(m)
    out: list[Any] = []
    keys: list[str] = []
    for i, e in enumerate(s.entries):
        for m in updates.get(i, ()):
            out.append(dict(m))
            keys.append(digest(m))
        for m in stubs.get(i, ()):
            out.append(dict(m))
            keys.append(digest(m))
        if i in drop:
            continue
        msg = history[i]
        frozen = e.frozen
        if not isinstance(frozen, Mapping):
            out.append(frozen)
            keys.append(entry_key(e))
            continue
        key = entry_key(e)
        cur = call_ids(msg) if isinstance(msg, Mapping) else e.ids
        if cur != e.ids and usable_ids(cur, frozen):
            frozen, key = with_ids(frozen, cur), f"{key}:{digest(cur)}"
        if i in cut:  # an output cut in place: its marker, the call above it as written
            frozen, key = {**frozen, "content": cut[i]}, f"{key}:cut:{digest(cut[i])}"
        elif i in moved:  # a fold whose lines an eviction moved here
            frozen, key = {**frozen, "content": moved[i]}, f"{key}:moved:{digest(moved[i])}"
        out.append(with_marks(frozen, marks[i]) if marks and i in marks else dict(frozen))
        keys.append(key)
    for m in updates.get(len(s.entries), ()):
        out.append(dict(m))
        keys.append(digest(m))
    return out, keys, drop


def _recalled_copy(s: Session, i: int) -> bool:
    """Whether history entry `i` is the result of a `recall_artifact` call."""
    e = s.entries[i]
    info = s.calls.get(e.ids) if isinstance(e.ids, str) else None
    return info is not None and is_recall_tool(info.name)


def break_cause(
    s: Session, keys: list[Any], rewritten: bool, *, recovered: bool = False, whole: bool = False
) -> str:
    prev = s.last_keys
    if prev[0] != keys[0]:
        return "system prompt changed"
    if prev[1] != keys[1]:
        return "tools changed"
    if rewritten:
        return "history rewritten by the caller"
    if recovered:
        return "store_recovered"  # a message sent unreduced while the store failed, now reduced
    if whole:
        return SHOWN_CAUSE
    if s.last_whole:
        return ENDED_CAUSE
    if s.plan_version != s.last_plan_version:
        return "eviction"
    return "tool-call ids changed"


def first_difference(prev: list[Any], keys: list[Any], system_len: int) -> int:
    """Index in the rendered messages of the first one whose key changed (keys: the system
    version, the tools version, then one key per rendered history message)."""
    if prev[:2] != keys[:2]:
        return 0
    for j, (a, b) in enumerate(zip(prev[2:], keys[2:])):
        if a != b:
            return system_len + j
    return system_len + min(len(prev), len(keys)) - 2


def digest(obj: Any) -> str:
    """A short content digest: render keys that mean the same in every process. A text and
    a message of a role and a text (a stub, a marker) are remembered by their text: each
    call digests every stub and marker of the plan again. Only short texts are remembered
    (`_REMEMBERED_CHARS`), so the memo stays small."""
    if isinstance(obj, str) and len(obj) <= _REMEMBERED_CHARS:
        return _text_digest(obj)
    plain = role_and_text(obj)
    if plain is not None and len(plain[1]) <= _REMEMBERED_CHARS:
        return _message_digest(*plain)
    return _digest(obj)


_REMEMBERED_CHARS = 16_384  # a stub of many bundles is a few KB; an output may be far more


@functools.lru_cache(maxsize=8192)
def _text_digest(text: str) -> str:
    return _digest(text)


@functools.lru_cache(maxsize=8192)
def _message_digest(role: str, content: str) -> str:
    return _digest({"role": role, "content": content})


def _digest(obj: Any) -> str:
    try:
        text = canonical_json(obj)
    except (TypeError, ValueError):
        text = repr(obj)
    return sha256_hex(text)[:20]


def entry_key(e: Entry) -> str:
    if not e.key:
        e.key = digest(e.frozen)
    return e.key


def usable_ids(ids: Any, frozen: Mapping[str, Any]) -> bool:
    """Can these ids replace the frozen message's own? Only valid ones, one per call."""
    if frozen.get("role") == "tool":
        return isinstance(ids, str)
    calls = frozen.get("tool_calls")
    return (
        isinstance(ids, tuple)
        and isinstance(calls, list | tuple)
        and len(ids) == len(calls)
        and all(isinstance(i, str) for i in ids)
        and all(isinstance(c, Mapping) for c in calls)
    )


def with_ids(frozen: dict[str, Any], ids: Any) -> dict[str, Any]:
    """A frozen message carrying the caller's current tool-call ids (OpenClaw rewrites them)."""
    out = dict(frozen)
    if out.get("role") == "tool":
        out["tool_call_id"] = ids
    elif ids and out.get("tool_calls"):
        out["tool_calls"] = [{**c, "id": i} for c, i in zip(out["tool_calls"], ids)]
    return out
