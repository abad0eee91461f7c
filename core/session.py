"""What TokenPilot keeps of one conversation (`Session`): its history entries, each
with what recognises its message at the next call and the frozen form rendered in its
place; the system prompt's state; the tools; the render keys of the last call.

The state lives here; what changes it lives beside: `history` (ingestion, matching),
`system_prompt`, `render`, and `session_state` (export and import).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._canonical import canonical_json, sha256_hex
from .fingerprint import keep, keep_calls
from .ingest import IngestState, ToolCallInfo
from .messages import content_text
from .stabilize import Stabilized
from .tokens import count_tokens


@dataclass(slots=True)
class Entry:
    """One history message: how to recognise it again, and its frozen form.

    `content` and the arguments in `calls` are what `fingerprint.keep` leaves of the raw
    message: the frozen form's own object where they are equal, else a `Digest`; never a
    second copy of an original the store keeps (a reduced 5 MB output costs its digest).
    """

    role: Any
    content: Any
    name: Any
    calls: tuple[tuple[str, Any], ...] | None  # (name, arguments kept) of its tool calls
    raw_hash: str
    ids: Any  # tool_call_id, or the tuple of tool-call ids, at ingestion
    frozen: Any
    raw_tokens: int
    tokens: int
    artifact_id: str | None = None
    effect: tuple[str, str, str, str] | None = None  # (aid, tool, call key, source) for state replays
    call_infos: tuple[tuple[str, ToolCallInfo], ...] = ()
    live: bool = True  # False after an import: match by hash once, then by value
    unstored: str | None = None  # the original the store refused ("" after an import): retry
    key: str = ""  # digest of `frozen`, the render key that survives a restart (filled lazily)


@dataclass(slots=True)
class SystemState:
    """The leading system messages: as first stabilised (what renders), as last seen."""

    raw: tuple[Any, ...] = ()  # raw leading system contents last seen, as `fingerprint.keep` leaves them
    stable: tuple[Stabilized, ...] = ()  # frozen at the first call
    current: tuple[Stabilized, ...] = ()  # latest version (for diffs of later changes)
    rendered: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    version: int = 0
    verbatim: bool = False  # decided at the first call: too little follows the volatile values


class Session:
    """All TokenPilot state of one conversation. Guarded by its own lock."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.lock = threading.RLock()
        self.entries: list[Entry] = []
        self.state = IngestState()
        self.calls: dict[str, ToolCallInfo] = {}
        self.system = SystemState()
        self.tools: list[dict[str, Any]] = []
        self.tools_version = 0
        self.tools_tokens = 0
        self.updates: list[tuple[int, dict[str, Any]]] = []  # (after n entries, message)
        self.last_keys: list[Any] = []  # render keys of the last call: versions, then digests
        self.plan_version = 0
        self.last_plan_version = 0
        self.prefix_breaks = 0
        self.calls_prepared = 0
        self.lifecycle: Any = None
        self.recallable = False  # something was stored or evicted: recall_artifact is listed


def sig_calls(msg: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """(name, arguments) of each tool call, to recognise the message again; a malformed
    `tool_calls` (lenient mode passes it through) is kept as it is, for comparison."""
    calls = msg.get("tool_calls")
    if not calls:
        return None
    if not isinstance(calls, list | tuple):
        return (("?", calls),)
    out = []
    for c in calls:
        fn = c.get("function") if isinstance(c, Mapping) else None
        out.append((fn.get("name"), fn.get("arguments")) if isinstance(fn, Mapping) else ("?", c))
    return tuple(out)


def call_ids(msg: Mapping[str, Any]) -> Any:
    """The tool-call id(s) a message carries: a string, a tuple (None where one is not a
    string), or None. Always hashable: render keys are built from them."""
    if msg.get("role") == "tool":
        tid = msg.get("tool_call_id")
        return tid if isinstance(tid, str) else None
    calls = msg.get("tool_calls")
    if not calls or not isinstance(calls, list | tuple):
        return None
    return tuple(
        c.get("id") if isinstance(c, Mapping) and isinstance(c.get("id"), str) else None for c in calls
    )


def raw_hash(msg: Mapping[str, Any]) -> str:
    return sha256_hex(canonical_json([msg.get("role"), msg.get("content"), msg.get("name"), sig_calls(msg)]))


def hashable(msg: Mapping[str, Any]) -> bool:
    try:
        raw_hash(msg)
        return True
    except (TypeError, ValueError):  # not JSON: int and str keys mixed, bytes, sets...
        return False


def kept_fields(msg: Mapping[str, Any], frozen: Any) -> tuple[Any, Any]:
    """(content, calls) of `msg` as an entry keeps them to recognise it (`fingerprint.keep`)."""
    fcontent = frozen.get("content") if isinstance(frozen, Mapping) else None
    return keep(msg.get("content"), fcontent), keep_calls(sig_calls(msg), frozen)


def msg_tokens(msg: Any) -> int:
    if not isinstance(msg, Mapping):
        return count_tokens(str(msg))
    n = count_tokens(content_text(msg.get("content")))
    content = msg.get("content")
    if isinstance(content, list):  # non-text parts: count their JSON (images are estimated by size)
        n += sum(
            len(canonical_json(p)) // 4 for p in content if isinstance(p, Mapping) and p.get("type") != "text"
        )
    for c in msg.get("tool_calls") or []:
        fn = c.get("function") or {}
        n += count_tokens(str(fn.get("name", ""))) + count_tokens(str(fn.get("arguments", "")))
    return n + 4
