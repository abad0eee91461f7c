"""What TokenPilot keeps of one conversation (`Session`): its history entries, each
with what recognises its message at the next call (see `history`) and the frozen form
rendered in its place; the system prompt's state; the tools; the render keys of the
last call; and how a message's tokens are counted in the stats.

The state lives here; what changes it lives beside: `history` (ingestion, matching),
`system_prompt`, `render`, and `session_state` (export and import).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._canonical import canonical_json
from ..ingest.elision import HeldElisions
from ..ingest.gate import IngestState, ToolCallInfo
from ..ingest.reshown import ShownLines
from ..ingest.reshown_moves import MovedLines
from ..ingest.stabilize import Stabilized
from ..messages.model import content_text
from ..tokens import count_tokens, estimate_tokens


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
    # its export (`session_state`), built once: what it exports never changes after ingestion,
    # and the same object at every save lets the journal reuse its text (`journal.Sealed`)
    exported: Any = field(default=None, compare=False, repr=False)


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
        # each tool's sealed export, by the identity of its dict (`session_state.tools_to_list`)
        self.exported_tools: dict[int, tuple[Any, Any]] = {}
        self.tools_version = 0
        self.tools_tokens = 0
        self.updates: list[tuple[int, dict[str, Any]]] = []  # (after n entries, message)
        self.last_keys: list[Any] = []  # render keys of the last call: versions, then digests
        self.plan_version = 0
        self.last_plan_version = 0
        self.last_whole = False  # the last call was a compaction request, rendered with nothing evicted
        self.prefix_breaks = 0
        self.calls_prepared = 0
        self.lifecycle: Any = None
        self.recallable = False  # something was stored or evicted: recall_artifact is listed
        self.elisions = HeldElisions()  # the caller's rolling elisions, applied in batches
        # the lines its outputs show, for re-shown runs; derived from `entries` (rebuilt
        # after a load, never stored)
        self.shown: ShownLines | None = None
        self.moved = MovedLines()  # folds rendered with the lines of outputs the plan hides


def msg_tokens(msg: Any, *, estimate: bool = False) -> int:
    """Tokens of one message's text, name and calls, plus its framing. `estimate` samples
    long texts (`estimate_tokens`): for counts that only feed statistics."""
    count = estimate_tokens if estimate else count_tokens
    if not isinstance(msg, Mapping):
        return count(str(msg))
    n = count(content_text(msg.get("content")))
    content = msg.get("content")
    if isinstance(content, list):  # non-text parts: count their JSON (images are estimated by size)
        n += sum(
            len(canonical_json(p)) // 4 for p in content if isinstance(p, Mapping) and p.get("type") != "text"
        )
    for c in msg.get("tool_calls") or []:
        fn = c.get("function") or {}
        n += count(str(fn.get("name", ""))) + count(str(fn.get("arguments", "")))
    return n + 4
