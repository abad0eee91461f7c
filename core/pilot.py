"""The facade: `TokenPilot.prepare(messages, tools)` renders the managed request.

Each call the agent hands over its full history, as it would to the provider. Only
messages not seen before are ingested (reduced once, frozen); older ones render from
their frozen form, so a request is its predecessor plus new messages (I1), and
preparing it costs little more than serialising it (I7).

Request layout (DESIGN.md §3): stabilised system text (placeholders) → session values
→ frozen history (minus evicted segments, plus their stubs) → per-call values at the
very end, never persisted. Tools: canonical, append-only, `recall_artifact` included
from the first call.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._canonical import canonical_json, sha256_hex
from .artifacts import RecallResult
from .config import BULKY_TOOL_FAMILIES, Config
from .elision import HeldElisions, elides
from .errors import MessageError
from .estimator import Estimator, LLMEstimator, OfflineEstimator
from .fingerprint import digest_from_json, digest_to_json, keep, keep_calls, same, same_calls
from .ingest import (
    Ingested,
    IngestState,
    Pipeline,
    ToolCallInfo,
    hard_limited,
    ingest_assistant,
    ingest_tool_result,
    ingest_user,
)
from .lifecycle import Lifecycle, LifecycleConfig
from .limits import check_count, check_depth, nesting_exceeds
from .messages import check_message, check_tools, content_text, to_anthropic
from .observations import OBSERVATION_TOOL, is_observation
from .passes.truncate import tool_family
from .pricing import Prices
from .recall_args import recall_arguments
from .stabilize import RECALL_TOOL_NAME, Stabilized, merge_tools, stabilize_text, tool_name, values_block
from .store import Artifacts, open_artifacts
from .tokens import count_tokens
from .unstored import store_reason, unstored_form

log = logging.getLogger("tokenpilot")

SESSION_VALUES_TITLE = "Values of the placeholders above, as of the start of this session:"
TAIL_TITLE = "Current values of the system prompt's placeholders that changed since the session started (runtime context, not written by the user):"
_SYSTEM_ROLES = ("system", "developer")
_CHARS_PER_TOKEN = 4  # to weigh a token price against a reduction measured in chars
_MAX_TEMPLATES = 4096  # system-prompt templates remembered for "once_varied" placeholders


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PrepareStats:
    """What one `prepare` did. Token counts use `tokenpilot.tokens` (estimates for huge texts)."""

    session_id: str
    messages_in: int
    messages_out: int
    ingested: int
    reduced: int
    raw_tokens: int
    tokens: int
    prefix_break: str | None
    prefix_breaks: int
    evicted_messages: int = 0
    artifacts: tuple[str, ...] = ()
    malformed: int = 0
    warnings: tuple[str, ...] = ()
    prefix_break_at: int | None = None
    """With `prefix_break`: the index in `messages` of the first message that differs from
    the previous call's rendering (0 when the system prompt or the tools changed). Known
    after a restart too, since render keys are saved with the session."""
    unstored: int = 0
    """Messages of the history whose originals the store could not keep (a full disk):
    sent unreduced (tool outputs cut to `hard_limit_chars`, not recallable) and
    retried at every call until the store works again."""

    @property
    def saved_tokens(self) -> int:
        return max(self.raw_tokens - self.tokens, 0)


@dataclass(frozen=True, slots=True)
class Prepared:
    """The managed request: OpenAI-format `messages` and `tools`, and `stats`.

    `messages[:tail_start]` is the stable part; the rest carries per-call values and
    is never persisted.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    stats: PrepareStats
    session_id: str
    tail_start: int

    @property
    def stable_messages(self) -> list[dict[str, Any]]:
        return self.messages[: self.tail_start]

    def openai_request(self, **params: Any) -> dict[str, Any]:
        """An OpenAI Chat Completions body; `prompt_cache_key` defaults to the session."""
        body: dict[str, Any] = {"messages": self.messages, **params}
        if self.tools:
            body["tools"] = self.tools
        body.setdefault("prompt_cache_key", self.session_id)
        return body

    def anthropic_request(self, **params: Any) -> dict[str, Any]:
        return {**to_anthropic(self.messages, self.tools), **params}


@dataclass(frozen=True, slots=True)
class ToolOutputReduction:
    """`TokenPilot.reduce_tool_output`'s answer: the text to keep, and the stored original's id
    (None: nothing was worth cutting, `text` is the output as it came)."""

    text: str
    artifact_id: str | None
    passes: tuple[str, ...] = ()


@dataclass(slots=True)
class _Entry:
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
class _SystemState:
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
        self.entries: list[_Entry] = []
        self.state = IngestState()
        self.calls: dict[str, ToolCallInfo] = {}
        self.system = _SystemState()
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
        self.elisions = HeldElisions()  # the caller's rolling elisions, applied in batches


def _bulky(tools: Any) -> bool:
    """Is one of these tool definitions or calls (both carry `function.name`) a tool whose
    output is often large?"""
    items = tools if isinstance(tools, list | tuple) else ()
    return any(isinstance(t, Mapping) and tool_family(tool_name(t)) in BULKY_TOOL_FAMILIES for t in items)


def _sig_calls(msg: Mapping[str, Any]) -> tuple[Any, ...] | None:
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


def _ids(msg: Mapping[str, Any]) -> Any:
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


def _usable_ids(ids: Any, frozen: Mapping[str, Any]) -> bool:
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


def _raw_hash(msg: Mapping[str, Any]) -> str:
    return sha256_hex(canonical_json([msg.get("role"), msg.get("content"), msg.get("name"), _sig_calls(msg)]))


def _with_ids(frozen: dict[str, Any], ids: Any) -> dict[str, Any]:
    """A frozen message carrying the caller's current tool-call ids (OpenClaw rewrites them)."""
    out = dict(frozen)
    if out.get("role") == "tool":
        out["tool_call_id"] = ids
    elif ids and out.get("tool_calls"):
        out["tool_calls"] = [{**c, "id": i} for c, i in zip(out["tool_calls"], ids)]
    return out


def _msg_tokens(msg: Any) -> int:
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


def default_estimator() -> Estimator:
    """The LLM estimator when an endpoint is configured in the environment, else the offline one."""
    import os

    if os.environ.get("TOKENPILOT_ESTIMATOR_MODEL"):
        return LLMEstimator()
    return OfflineEstimator()


# ---------------------------------------------------------------------------
# The facade
# ---------------------------------------------------------------------------
class TokenPilot:
    """Cache-efficient context management for any agent loop.

    One instance serves many sessions. `store` keeps originals: a store object (an
    `ArtifactStore`, a `RedisStore`), a directory, a `redis://` URL shared by processes, or
    None for a private temporary store. Eviction of finished tasks is on by default (`LifecycleConfig()`:
    every 3 turns, estimator in the background); `lifecycle=False` turns it off. The
    estimator is `estimator`, else an LLM estimator when `TOKENPILOT_ESTIMATOR_MODEL`
    is set, else the deterministic offline one. `lifecycle_factory(session_id, archive)`
    overrides all of that.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        store: Artifacts | str | Path | None = None,
        lifecycle: LifecycleConfig | None | bool = None,
        estimator: Estimator | None = None,
        lifecycle_factory: Callable[[str, Callable[[str], str]], Any] | None = None,
    ) -> None:
        self.config = config or Config()
        self.store: Artifacts = open_artifacts(store)
        self.pipeline = Pipeline(self.config)
        self.lifecycle_config: LifecycleConfig | None = None
        if lifecycle_factory is None and lifecycle is not False:
            lc = lifecycle if isinstance(lifecycle, LifecycleConfig) else LifecycleConfig()
            self.lifecycle_config = lc
            est = estimator if estimator is not None else default_estimator()

            def lifecycle_factory(session_id: str, archive: Callable[[str], str]) -> Lifecycle:
                return Lifecycle(lc, est, archive)

        self.lifecycle_factory = lifecycle_factory
        # The host's guard around a background estimator result (a proxy sharing state
        # across replicas: its store's session lock, the newest state, a write after);
        # guard(session_id, apply). None: the session's own lock only.
        self.estimate_guard: Callable[[str, Callable[[], None]], None] | None = None
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        # system-prompt template (its stabilised text) -> the values seen with it, or
        # None once two differ ("once_varied" placeholders); bounded, oldest dropped
        self._template_values: OrderedDict[str, str | None] = OrderedDict()

    # -- sessions -------------------------------------------------------------
    def session(self, session_id: str) -> Session:
        with self._lock:
            s = self._sessions.get(session_id)
            if s is None:
                s = Session(session_id)
                if self.lifecycle_config is not None and self.lifecycle_config.batch_turns:
                    s.elisions.batch_calls = self.lifecycle_config.batch_turns  # the same B
                if self.lifecycle_factory is not None:
                    s.lifecycle = self.lifecycle_factory(
                        session_id, lambda text: self.store.put(session_id, text)
                    )
                    if hasattr(s.lifecycle, "deliver"):
                        s.lifecycle.deliver = functools.partial(self._deliver_estimate, session_id)
                try:
                    self.store.open_session(session_id)
                except OSError as exc:  # a full disk must not refuse the conversation
                    log.warning("tokenpilot: could not open a lease for session %r: %s", session_id, exc)
                self._sessions[session_id] = s
            return s

    def _deliver_estimate(self, session_id: str, apply: Callable[[], None]) -> None:
        """A background estimator result changes session state like a call does: under
        the session's lock (and the host's guard), never from the worker on its own."""

        def locked() -> None:
            s = self._sessions.get(session_id)
            if s is None:  # closed meanwhile: nothing to apply it to
                return
            with s.lock:
                apply()

        guard = self.estimate_guard
        if guard is None:
            locked()
        else:
            guard(session_id, locked)

    @property
    def session_ids(self) -> list[str]:
        return list(self._sessions)

    def derive_session_id(self, messages: Sequence[Any]) -> str:
        """A stable id from the conversation's start: the system text (stabilised) and first message."""
        k = self._leading_system(messages)
        system = []
        for m in messages[:k]:
            text = content_text(m.get("content"))
            system.append(
                stabilize_text(text, self.config.volatile_patterns).text if self.config.stabilize else text
            )
        first = messages[k] if k < len(messages) else None
        if k < len(messages):
            check_depth(first, self.config.max_depth, k)
        return (
            "s_"
            + sha256_hex(canonical_json([system, first if isinstance(first, Mapping) else str(first)]))[:16]
        )

    def _leading_system(self, messages: Sequence[Any]) -> int:
        """How many leading messages make up the system prompt: well-formed system or
        developer messages. A malformed one is history, passed through (or refused in
        strict mode) like any other malformed message."""
        k = 0
        while k < len(messages):
            m = messages[k]
            if not isinstance(m, Mapping) or m.get("role") not in _SYSTEM_ROLES:
                break
            check_depth(m, self.config.max_depth, k)
            try:
                check_message(m, k)
            except MessageError:
                break
            k += 1
        return k

    # -- prepare --------------------------------------------------------------
    def prepare(
        self,
        messages: Sequence[Any],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        session_id: str | None = None,
    ) -> Prepared:
        """Render the managed request for this history. Never mutates its input."""
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            raise MessageError(None, f"expected a list of messages, got {type(messages).__name__}")
        check_count(messages, self.config.max_messages)
        if tools is not None:
            if not isinstance(tools, list | tuple):
                raise MessageError(None, f"'tools' must be a list, got {type(tools).__name__}")
            for j, t in enumerate(tools):
                check_depth(t, self.config.max_depth, None, f"tools[{j}]")
        check_tools(list(tools) if tools is not None else None)
        sid = session_id or self.derive_session_id(messages)
        session = self.session(sid)
        with session.lock:
            return self._prepare(session, list(messages), tools)

    def _prepare(
        self, s: Session, messages: list[Any], tools: Sequence[Mapping[str, Any]] | None
    ) -> Prepared:
        cfg = self.config
        warnings: list[str] = []
        malformed = 0
        k = self._leading_system(messages)
        history = messages[k:]
        n = self._hold_elisions(s, history, self._match(s, history))
        for i in range(n, len(history)):  # refuse before any state changes; older ones passed
            check_depth(history[i], cfg.max_depth, k + i)
        self._update_system(s, messages[:k], warnings)
        rewritten = n < len(s.entries)
        if rewritten:
            self._truncate(s, n)
        store_errors: list[OSError] = []
        n, before = self._retry_unstored(s, n, store_errors)
        stored: list[str] = []
        reduced = 0
        # The agent's first tool calls tell whether its outputs run large; a tool added
        # on a later call re-sends the whole cached prefix, so then it waits for
        # something to recall (an artifact worth that, or an eviction).
        judge_calls = not s.recallable and not any(e.calls for e in s.entries[:n])
        for i in range(n, len(history)):
            msg = history[i]
            try:
                check_message(msg, k + i)
            except MessageError as exc:
                if cfg.strict:
                    raise
                malformed += 1
                warnings.append(str(exc))
                s.entries.append(self._capped(s, self._passthrough_entry(msg), stored, store_errors))
                continue
            if cfg.recall_tool_from == "auto" and judge_calls and not s.recallable and msg.get("tool_calls"):
                s.recallable = _bulky(msg["tool_calls"])  # known from the calls when the tool list is not
            entry = self._ingest(s, msg, stored, store_errors)
            if entry.artifact_id:
                reduced += 1
            s.entries.append(entry)
        unstored = sum(1 for e in s.entries if e.unstored is not None)
        if store_errors:
            warnings.append(
                f"artifact store write failed ({store_errors[0]}): {unstored} message(s) sent without "
                f"reduction, tool outputs over {cfg.hard_limit_chars:,} chars cut with no recall handle; "
                "retried at the next call"
            )

        rendered, keys, evicted = self._render_history(s, history)
        # Tools after ingestion: `recall_artifact` may join on the first call with an artifact.
        if s.calls_prepared == 0 and cfg.recall_tool_from == "auto" and not s.recallable:
            s.recallable = _bulky(list(tools or ()))
        s.recallable = s.recallable or bool(stored) or bool(evicted)
        recall = cfg.register_recall_tool and (cfg.recall_tool_from == "first_call" or s.recallable)
        s.tools, tools_changed = merge_tools(s.tools, tools, include_recall=recall)
        if tools_changed:
            s.tools_version += 1
            s.tools_tokens = count_tokens(canonical_json(s.tools))
        out = list(s.system.rendered) + rendered
        tail_start = len(out)
        tail_values = self._tail_values(s)
        if tail_values:
            out.append({"role": cfg.tail_role, "content": values_block(tail_values, title=TAIL_TITLE)})

        keys = [s.system.version, s.tools_version, *keys]
        cause, break_at = None, None
        if s.last_keys and keys[: len(s.last_keys)] != s.last_keys:
            cause = self._break_cause(s, keys, rewritten, recovered=bool(before))
            break_at = _first_difference(s.last_keys, keys, len(s.system.rendered))
            s.prefix_breaks += 1
        s.last_keys = keys
        s.last_plan_version = s.plan_version
        s.calls_prepared += 1

        raw_tokens = s.system.tokens + s.tools_tokens + sum(e.raw_tokens for e in s.entries)
        tokens = (
            s.system.tokens
            + s.tools_tokens
            + sum(e.tokens for i, e in enumerate(s.entries) if i not in evicted)
            + sum(_msg_tokens(m) for _, m in s.updates)
        )
        if tail_values:
            tokens += _msg_tokens(out[-1])
        stats = PrepareStats(
            session_id=s.id,
            messages_in=len(messages),
            messages_out=len(out),
            ingested=len(history) - n,
            reduced=reduced,
            raw_tokens=raw_tokens,
            tokens=tokens,
            prefix_break=cause,
            prefix_break_at=break_at,
            prefix_breaks=s.prefix_breaks,
            evicted_messages=len(evicted),
            artifacts=tuple(stored),
            malformed=malformed,
            warnings=tuple(warnings),
            unstored=unstored,
        )
        return Prepared(out, [dict(t) for t in s.tools], stats, s.id, tail_start)

    # -- history --------------------------------------------------------------
    def _match(self, s: Session, history: list[Any]) -> int:
        """How many leading messages are already ingested, unchanged (ids may differ)."""
        n = 0
        for entry, msg in zip(s.entries, history):
            if not self._same(entry, msg):
                break
            n += 1
        return n

    def _same(self, entry: _Entry, msg: Any) -> bool:
        """Is `msg` the message `entry` ingested (ids may differ)?"""
        if not isinstance(msg, Mapping):
            return entry.frozen is msg or entry.frozen == msg
        if entry.live:
            return (
                entry.role == msg.get("role")
                and entry.name == msg.get("name")
                and same_calls(entry.calls, _sig_calls(msg))
                and same(entry.content, msg.get("content"))
            )
        if nesting_exceeds(msg, self.config.max_depth) or not _hashable(msg):
            return False  # refused by the depth check, or passed through as malformed
        if entry.raw_hash == _raw_hash(msg):
            entry.role, entry.name = msg.get("role"), msg.get("name")
            entry.content, entry.calls = _kept_fields(msg, entry.frozen)
            entry.live = True
            return True
        return False

    def _hold_elisions(self, s: Session, history: list[Any], n: int) -> int:
        """Where ingestion resumes when the caller's only rewrite is its own rolling
        elision of old environment output (`tokenpilot.elision`): past the held messages,
        which keep their frozen form until the next batch boundary; `n` otherwise."""
        held = s.elisions
        end = len(s.entries)
        if n >= end or len(history) < end:
            held.clear()
            return n
        count = 0
        for i in range(n, end):
            msg, entry = history[i], s.entries[i]
            if self._same(entry, msg):
                continue
            prev = s.entries[i - 1].role if i else None
            if not isinstance(msg, Mapping) or not elides(entry, msg, _ids(msg), _msg_tokens(msg), prev):
                held.clear()  # a rewrite of another kind: the new history is the base now
                return n
            count += 1
        if held.due(s.calls_prepared):
            held.apply(count)
            return n
        held.hold(count, s.calls_prepared)
        return end

    def _truncate(self, s: Session, n: int, *, keep_updates: bool = False) -> None:
        """The caller rewrote history from message n: forget later entries, rebuild state."""
        s.entries = s.entries[:n]
        if not keep_updates:
            s.updates = [(pos, m) for pos, m in s.updates if pos <= n]
        recalls = s.state.recall_counts
        s.state = IngestState(recall_counts=recalls)
        s.calls = {}
        for e in s.entries:
            for cid, info in e.call_infos:
                s.calls[cid] = info
            if e.effect:
                aid, tool, call_key, source = e.effect
                s.state.artifact_sources.setdefault(aid, source)
                s.state.seen_outputs.setdefault(aid, tool)
                if call_key:
                    s.state.window.append((call_key, aid))
                    while len(s.state.window) > self.config.call_window:
                        s.state.window.popleft()

    def _retry_unstored(self, s: Session, n: int, errors: list[OSError]) -> tuple[int, list[_Entry]]:
        """Where ingestion resumes, and the entries it replaces: from the first message the
        store refused, once the store takes that original now.

        Later messages are ingested again too, in order, so the session's state is what
        a clean ingestion gives. While the store still refuses, nothing is redone.
        """
        first = next((i for i in range(n) if s.entries[i].unstored is not None), None)
        if first is None:
            return n, []
        probe = s.entries[first].unstored
        if probe:
            try:
                self.store.put(s.id, probe)
            except OSError as exc:
                errors.append(exc)
                return n, []
        before = s.entries[first:n]
        self._truncate(s, first, keep_updates=True)  # same messages again: update notes stay
        return first, before

    def _passthrough_entry(self, msg: Any) -> _Entry:
        if isinstance(msg, Mapping):
            return _Entry(
                msg.get("role"),
                msg.get("content"),
                msg.get("name"),
                _sig_calls(msg),
                _raw_hash(msg) if _hashable(msg) else "",
                _ids(msg),
                dict(msg),
                0,
                0,
            )
        return _Entry(None, None, None, None, "", None, msg, 0, 0)

    def _capped(self, s: Session, entry: _Entry, stored: list[str], store_errors: list[OSError]) -> _Entry:
        """A malformed tool message passed through: untouched, except that it never exceeds
        the hard limit (cut with a recall handle; with no handle when the store refuses)."""
        msg = entry.frozen
        if not isinstance(msg, Mapping) or msg.get("role") != "tool":
            return entry
        refused: list[str] = []
        try:
            capped = hard_limited(msg, self.config, self._putter(s, stored, refused))
        except OSError as exc:  # retried at the next call, as any unstored output
            store_errors.append(exc)
            capped = Ingested(unstored_form(msg, self.config.hard_limit_chars, store_reason(exc)))
        except (TypeError, ValueError):  # content no JSON can hold: nothing to measure it by
            return entry
        entry.frozen, entry.artifact_id = capped.message, capped.artifact_id
        entry.unstored = refused[0] if refused else None
        return entry

    def _ingest(
        self, s: Session, msg: Mapping[str, Any], stored: list[str], store_errors: list[OSError]
    ) -> _Entry:
        refused: list[str] = []
        put = self._putter(s, stored, refused)
        role = msg.get("role")
        effect = None
        call_infos: tuple[tuple[str, ToolCallInfo], ...] = ()
        try:
            if role == "tool":
                call = s.calls.get(msg.get("tool_call_id", ""))
                result = ingest_tool_result(
                    msg,
                    call,
                    state=s.state,
                    pipeline=self.pipeline,
                    put=put,
                    min_saved_chars=self._first_artifact_threshold(s),
                )
                original = msg.get("content")
                aid = result.artifact_id or _aid_of(original)
                effect = (
                    aid,
                    call.name if call else str(msg.get("name") or ""),
                    call.call_key if call and self.config.call_cap else "",
                    call.source_key if call else "",
                )
            elif role == "assistant":
                result = ingest_assistant(msg, pipeline=self.pipeline, put=put)
                infos = []
                for c in msg.get("tool_calls") or []:
                    fn = c.get("function") or {}
                    info = ToolCallInfo(str(fn.get("name", "")), str(fn.get("arguments", "")))
                    infos.append((c.get("id"), info))
                    s.calls[c.get("id")] = info
                call_infos = tuple(infos)
            elif role == "user" and s.entries and is_observation(msg, {"role": s.entries[-1].role}):
                # a text-action agent's tool output (I5): it answers the assistant's action
                result = self._ingest_observation(s, msg, put)
            elif role == "user":
                result = ingest_user(msg, pipeline=self.pipeline, put=put)
            else:
                result = Ingested(dict(msg))
        except Exception as exc:
            if refused and isinstance(exc, OSError):  # no original: nothing may point at one
                store_errors.append(exc)
                cut = unstored_form(msg, self.config.hard_limit_chars, store_reason(exc))
                result = Ingested(cut)
            else:  # never lose the agent's turn to a bug in a pass; the hard limit still holds
                log.warning("tokenpilot: ingestion failed for a %s message, kept unreduced: %s", role, exc)
                try:
                    result = hard_limited(msg, self.config, put)
                except OSError as store_exc:  # no original: cut with no handle, retried next call
                    store_errors.append(store_exc)
                    result = Ingested(
                        unstored_form(msg, self.config.hard_limit_chars, store_reason(store_exc))
                    )
        frozen = result.message
        tokens = _msg_tokens(frozen)
        content, calls = _kept_fields(msg, frozen)
        return _Entry(
            role,
            content,
            msg.get("name"),
            calls,
            _raw_hash(msg),
            _ids(msg),
            frozen,
            _msg_tokens(msg) if result.artifact_id or refused else tokens,
            tokens,
            result.artifact_id,
            effect,
            call_infos,
            unstored=refused[0] if refused else None,
        )

    def _ingest_observation(self, s: Session, msg: Mapping[str, Any], put: Callable[[str], str]) -> Ingested:
        """Reduce an observation as the shell tool's output it is; it stays a user message."""
        as_tool = {
            "role": "tool",
            "tool_call_id": "",
            "name": OBSERVATION_TOOL,
            "content": msg.get("content"),
        }
        result = ingest_tool_result(
            as_tool,
            None,
            state=s.state,
            pipeline=self.pipeline,
            put=put,
            min_saved_chars=self._first_artifact_threshold(s),
        )
        return dataclasses.replace(result, message={**msg, "content": result.message.get("content")})

    def _first_artifact_threshold(self, s: Session) -> int:
        """Chars a reduction must save when it would be the session's first artifact after
        its first call: `recall_artifact` then joins the tools, which come first, so the
        whole cached prefix is sent again uncached. Worth it only when what the reduction
        saves, on this call and (cached) on as many more calls as the session has had,
        outweighs that re-prefill; else the output passes as it came (never above vanilla).
        0 when the tool is there already, or joins on the first call."""
        cfg = self.config
        if (
            s.calls_prepared == 0
            or s.recallable
            or cfg.recall_tool_from != "auto"
            or not cfg.register_recall_tool
        ):
            return 0
        prefix = s.system.tokens + s.tools_tokens + sum(e.tokens for e in s.entries)
        p = Prices()
        tokens = prefix * (p.miss - p.hit) / (p.miss + p.hit * s.calls_prepared)
        return int(tokens * _CHARS_PER_TOKEN)

    def _putter(self, s: Session, stored: list[str], refused: list[str]) -> Callable[[str], str]:
        def put(text: str) -> str:
            try:
                aid = self.store.put(s.id, text)
            except OSError:
                refused.append(text)
                raise
            stored.append(aid)
            return aid

        return put

    def _render_history(self, s: Session, history: list[Any]) -> tuple[list[Any], list[str], set[int]]:
        """Frozen messages (with current ids), update notes, eviction stubs; and render keys."""
        drop: set[int] = set()
        stubs: dict[int, list[dict[str, Any]]] = {}
        if s.lifecycle is not None:
            frozen = [e.frozen for e in s.entries]
            cfg = self.config
            adds_tool = cfg.register_recall_tool and cfg.recall_tool_from != "first_call" and not s.recallable
            if hasattr(s.lifecycle, "head_refill_tokens"):  # a custom lifecycle may not weigh it
                s.lifecycle.head_refill_tokens = s.system.tokens + s.tools_tokens if adds_tool else None
            try:
                s.lifecycle.observe(frozen)
                plan = s.lifecycle.view(frozen)
                s.plan_version = plan.version
                drop = set(plan.drop)
                stubs = {i: list(ms) for i, ms in plan.stubs.items()}
            except Exception as exc:  # eviction is an optimisation: never fail the call
                log.warning("tokenpilot: lifecycle failed, rendering without eviction: %s", exc)
                drop, stubs = set(), {}
        updates: dict[int, list[dict[str, Any]]] = {}
        for pos, m in s.updates:
            updates.setdefault(pos, []).append(m)
        out: list[Any] = []
        keys: list[str] = []
        for i, e in enumerate(s.entries):
            for m in updates.get(i, ()):
                out.append(dict(m))
                keys.append(_digest(m))
            for m in stubs.get(i, ()):
                out.append(dict(m))
                keys.append(_digest(m))
            if i in drop:
                continue
            msg = history[i]
            frozen = e.frozen
            if isinstance(frozen, Mapping):
                cur = _ids(msg) if isinstance(msg, Mapping) else e.ids
                if cur != e.ids and _usable_ids(cur, frozen):
                    out.append(_with_ids(frozen, cur))
                    keys.append(f"{_entry_key(e)}:{_digest(cur)}")
                    continue
                out.append(dict(frozen))
            else:
                out.append(frozen)
            keys.append(_entry_key(e))
        for m in updates.get(len(s.entries), ()):
            out.append(dict(m))
            keys.append(_digest(m))
        return out, keys, drop

    def _break_cause(self, s: Session, keys: list[Any], rewritten: bool, *, recovered: bool = False) -> str:
        prev = s.last_keys
        if prev[0] != keys[0]:
            return "system prompt changed"
        if prev[1] != keys[1]:
            return "tools changed"
        if rewritten:
            return "history rewritten by the caller"
        if recovered:
            return "store_recovered"  # a message sent unreduced while the store failed, now reduced
        if s.plan_version != s.last_plan_version:
            return "eviction"
        return "tool-call ids changed"

    # -- system prompt ----------------------------------------------------------
    def _update_system(self, s: Session, system_msgs: list[Mapping[str, Any]], warnings: list[str]) -> None:
        raw = tuple(m.get("content") for m in system_msgs)
        if (
            s.system.version
            and len(raw) == len(s.system.raw)
            and all(same(k, r) for k, r in zip(s.system.raw, raw))
        ):
            return
        cfg = self.config
        first = s.system.version == 0
        lazy = cfg.placeholders == "once_varied"
        varied = self._note_template(system_msgs) if lazy else True  # a later session may need them
        if first:
            s.system.verbatim = not self._worth_placeholders(system_msgs) or not varied
        stab = tuple(self._stabilize(m.get("content"), verbatim=s.system.verbatim) for m in system_msgs)
        if first or cfg.system_updates == "replace" or len(stab) != len(s.system.stable):
            if not first and len(stab) != len(s.system.stable) and cfg.system_updates == "append":
                warnings.append("the number of leading system messages changed: system prompt re-rendered")
            s.system.stable = stab
            s.system.current = stab
            s.system.raw = _kept_system(raw, stab)
            self._render_system(s, system_msgs)
            return
        s.system.raw = _kept_system(raw, stab)
        if [x.text for x in stab] != [x.text for x in s.system.current] or self._values(stab) != self._values(
            s.system.current
        ):
            note = self._system_update_note(s.system.current, stab)
            if note is not None:
                s.updates.append((len(s.entries), {"role": "user", "content": note}))
        s.system.current = stab  # per-call values (dates) always come from the latest prompt

    def _note_template(self, system_msgs: Sequence[Mapping[str, Any]]) -> bool:
        """Remember the values this system prompt came with; has its template (the text
        with placeholders) been seen with other values?"""
        if not self.config.stabilize:
            return False
        stab = [self._stabilize(m.get("content")) for m in system_msgs]
        if not any(st.session_values or st.call_values for st in stab):
            return False
        template = sha256_hex(canonical_json([st.text for st in stab]))
        values = sha256_hex(canonical_json([[st.session_values, st.call_values] for st in stab]))
        with self._lock:
            seen = self._template_values.get(template, values)
            self._template_values[template] = None if seen != values else seen
            self._template_values.move_to_end(template)
            while len(self._template_values) > _MAX_TEMPLATES:
                self._template_values.popitem(last=False)
            return self._template_values[template] is None

    def _stabilize(self, content: Any, *, verbatim: bool = False) -> Stabilized:
        text = content_text(content) if not isinstance(content, str) else content
        if not self.config.stabilize or verbatim:
            return Stabilized(text)
        return stabilize_text(text, self.config.volatile_patterns)

    def _worth_placeholders(self, system_msgs: Sequence[Mapping[str, Any]]) -> bool:
        """Do at least `min_shared_tokens` of the system prompt follow its first volatile
        value? Only then can other sessions share enough of the cached prefix to pay for
        the values block."""
        after: list[str] = []
        found = False
        for m in system_msgs:
            st = self._stabilize(m.get("content"))
            if not found:
                pos = min((st.text.find(ph) for ph, _ in st.session_values + st.call_values), default=-1)
                if pos < 0:
                    continue
                found = True
                after.append(st.text[pos:])
            else:
                after.append(st.text)
        return found and count_tokens("\n".join(after)) >= self.config.min_shared_tokens

    @staticmethod
    def _values(stab: Sequence[Stabilized], *, per_call: bool = False) -> list[tuple[str, str]]:
        seen: dict[str, str] = {}
        for st in stab:
            for ph, v in st.call_values if per_call else st.session_values:
                seen.setdefault(ph, v)
        return list(seen.items())

    def _render_system(self, s: Session, system_msgs: list[Mapping[str, Any]]) -> None:
        cfg = self.config
        out = []
        for m, st in zip(system_msgs, s.system.stable):
            content = m.get("content")
            if isinstance(content, str) or content is None:
                out.append({**m, "content": st.text if content is not None else None})
            else:  # a list of parts: its text becomes one stabilised part, others kept
                parts = [p for p in content if not (isinstance(p, Mapping) and p.get("type") == "text")]
                out.append({**m, "content": [{"type": "text", "text": st.text}, *parts]})
        # Per-call values (dates, times) start here too, so a session whose date never
        # changes sends no per-call tail at all; only values that moved go to the end.
        values = self._values(s.system.stable) + self._values(s.system.stable, per_call=True)
        if values and out:
            block = values_block(values, title=SESSION_VALUES_TITLE)
            if cfg.session_values == "merge" and isinstance(out[-1].get("content"), str):
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + block}
            else:
                out.append({"role": "system", "content": block})
        s.system.rendered = out
        s.system.version += 1
        s.system.tokens = sum(_msg_tokens(m) for m in out)

    def _system_update_note(self, old: Sequence[Stabilized], new: Sequence[Stabilized]) -> str | None:
        """An append-only note describing how the system prompt changed (None: nothing visible)."""
        parts = []
        for a, b in zip(old, new):
            if a.text != b.text:
                diff = [
                    line
                    for line in difflib.unified_diff(
                        a.text.splitlines(), b.text.splitlines(), lineterm="", n=0
                    )
                    if line[:1] in "+-" and not line.startswith(("+++", "---"))
                ]
                parts.append("\n".join(diff))
        old_vals, new_vals = dict(self._values(old)), self._values(new)
        changed = [(ph, v) for ph, v in new_vals if old_vals.get(ph) != v]
        if changed:
            parts.append("\n".join(f"{ph} = {v}" for ph, v in changed))
        if not parts:
            return None
        return (
            "<tokenpilot-system-update>\nThe system prompt changed after this conversation began. "
            "Apply these changes to it (lines starting with - were removed, + were added; "
            "'X = v' gives a placeholder's new value):\n" + "\n".join(parts) + "\n</tokenpilot-system-update>"
        )

    def _tail_values(self, s: Session) -> list[tuple[str, str]]:
        """Per-call values that differ from those at the session start (the rest are cached)."""
        start = dict(self._values(s.system.stable, per_call=True))
        return [(ph, v) for ph, v in self._values(s.system.current, per_call=True) if start.get(ph) != v]

    # -- lifecycle driven by the host (schedule="manual") --------------------------
    def estimator_due(self, session_id: str) -> bool:
        """A batch of turns is complete and the estimator has not run on it yet."""
        s = self._sessions.get(session_id)
        return bool(s is not None and s.lifecycle is not None and getattr(s.lifecycle, "due", False))

    def run_estimator(self, session_id: str) -> bool:
        """Run the due estimator now, on this thread; its result applies at the next prepare."""
        s = self._sessions.get(session_id)
        if s is None or s.lifecycle is None or not hasattr(s.lifecycle, "run_pending"):
            return False
        return bool(s.lifecycle.run_pending())

    def lifecycle_stats(self, session_id: str) -> dict[str, Any]:
        s = self._sessions.get(session_id)
        if s is None or s.lifecycle is None:
            return {}
        return {**s.lifecycle.stats, **s.elisions.stats()}  # the caller's elisions, batched

    # -- a tool output before the host stores it ----------------------------------
    def reduce_tool_output(
        self, text: str, tool_name: str = "", arguments: str = "", *, session_id: str
    ) -> ToolOutputReduction:
        """Reduce one tool output the way `prepare` would, storing its original for the session.

        For hosts that cut or rewrite tool results before they reach the model (OpenClaw
        truncates outputs over its context caps, and writes the cut differently on replay):
        their plugin reduces the whole output here first, so the host keeps the reduced
        form, every replay sends the same bytes, and `recall_artifact` returns the whole
        original. A pure function of its arguments (no dedup or loop state is consulted);
        raises `OSError` when the store cannot keep the original, so the host falls back
        to its own handling. The reduced text passes `prepare` unchanged later.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        s = self.session(session_id)
        stored: list[str] = []
        put = self._putter(s, stored, [])
        msg = {"role": "tool", "tool_call_id": "reduce", "content": text}
        got = ingest_tool_result(
            msg,
            ToolCallInfo(str(tool_name), str(arguments)),
            state=IngestState(),
            pipeline=self.pipeline,
            put=put,
        )
        content = got.message.get("content")
        reduced = got.artifact_id is not None and isinstance(content, str)
        if reduced:
            with s.lock:
                s.recallable = True
        return ToolOutputReduction(
            content if reduced else text, got.artifact_id if reduced else None, got.passes
        )

    # -- recall ------------------------------------------------------------------
    def recall(
        self,
        artifact_id: str,
        start_line: int | None = None,
        end_line: int | None = None,
        pattern: str | None = None,
        *,
        session_id: str | None = None,
    ) -> RecallResult:
        """The original behind an artifact id, scoped to the session; never raises for bad ids."""
        sid = self._resolve_session(session_id)
        result = self.store.recall(sid, artifact_id, start_line, end_line, pattern)
        if result.found and sid in self._sessions:
            s = self._sessions[sid]
            with s.lock:
                s.state.note_recall(result.artifact_id)
        return result

    def execute_recall(
        self, arguments: str | bytes | Mapping[str, Any], *, session_id: str | None = None
    ) -> str:
        """Run a `recall_artifact` tool call from its raw arguments; returns the tool's text.

        The model wrote the arguments: whatever they are (not JSON, nested 100k deep, ids
        that are not strings), the answer is a tool result saying what was wrong, never
        an exception.
        """
        try:
            aid, start, end, pattern = recall_arguments(arguments)
        except ValueError as exc:
            return f'[tokenpilot: invalid {RECALL_TOOL_NAME} arguments: {exc}. Expected {{"artifact_id": "art_…"}}]'
        try:
            return self.recall(aid, start, end, pattern, session_id=session_id).for_model()
        except OSError as exc:  # the store's disk, not the model's arguments
            return f"[tokenpilot: the artifact store could not be read ({exc}); try again later]"

    def _resolve_session(self, session_id: str | None) -> str:
        if session_id is not None:
            return session_id
        if len(self._sessions) == 1:
            return next(iter(self._sessions))
        raise ValueError("session_id is required when this TokenPilot serves several sessions")

    # -- persistence -------------------------------------------------------------
    def export_session(self, session_id: str) -> dict[str, Any]:
        """JSON-safe state of a session, for checkpoints and restarts."""
        s = self._sessions[session_id]
        with s.lock:
            return {
                "id": s.id,
                "entries": [
                    {
                        "raw_hash": e.raw_hash,
                        "ids": list(e.ids) if isinstance(e.ids, tuple) else e.ids,
                        "frozen": e.frozen,
                        "raw_tokens": e.raw_tokens,
                        "tokens": e.tokens,
                        "artifact_id": e.artifact_id,
                        "effect": list(e.effect) if e.effect else None,
                        "call_infos": [[cid, i.name, i.arguments] for cid, i in e.call_infos],
                        "unstored": e.unstored is not None,
                    }
                    for e in s.entries
                ],
                "state": s.state.to_dict(),
                "system": {
                    "raw": [digest_to_json(x) for x in s.system.raw],
                    "stable": [[x.text, x.session_values, x.call_values] for x in s.system.stable],
                    "current": [[x.text, x.session_values, x.call_values] for x in s.system.current],
                    "rendered": s.system.rendered,
                    "tokens": s.system.tokens,
                    "verbatim": s.system.verbatim,
                    "version": s.system.version,
                },
                "tools": s.tools,
                "tools_tokens": s.tools_tokens,
                "tools_version": s.tools_version,
                # What the last call rendered, so the first call after a restart is checked too.
                "last_keys": s.last_keys,
                "plan_version": s.plan_version,
                "last_plan_version": s.last_plan_version,
                "calls_prepared": s.calls_prepared,
                "recallable": s.recallable,
                "updates": [[pos, m] for pos, m in s.updates],
                "prefix_breaks": s.prefix_breaks,
                "lifecycle": s.lifecycle.to_dict()
                if s.lifecycle is not None and hasattr(s.lifecycle, "to_dict")
                else None,
            }

    def import_session(self, data: Mapping[str, Any]) -> Session:
        """Restore a session exported by `export_session` (possibly in another process)."""
        s = self.session(str(data["id"]))
        with s.lock:
            s.entries = []
            for d in data["entries"]:
                infos = tuple((cid, ToolCallInfo(name, args)) for cid, name, args in d.get("call_infos", []))
                ids = tuple(d["ids"]) if isinstance(d["ids"], list) else d["ids"]
                s.entries.append(
                    _Entry(
                        None,
                        None,
                        None,
                        None,
                        d["raw_hash"],
                        ids,
                        d["frozen"],
                        d["raw_tokens"],
                        d["tokens"],
                        d.get("artifact_id"),
                        tuple(d["effect"]) if d.get("effect") else None,
                        infos,
                        live=False,
                        unstored="" if d.get("unstored") else None,
                    )
                )
                for cid, info in infos:
                    s.calls[cid] = info
            s.state = IngestState.from_dict(data.get("state", {}))
            sysd = data.get("system")
            if sysd:

                def stab(rows: list[Any]) -> tuple[Stabilized, ...]:
                    return tuple(
                        Stabilized(t, tuple(map(tuple, sv)), tuple(map(tuple, cv))) for t, sv, cv in rows
                    )

                s.system.raw = tuple(digest_from_json(x) for x in sysd["raw"])
                s.system.stable = stab(sysd["stable"])
                s.system.current = stab(sysd["current"])
                s.system.rendered = list(sysd["rendered"])
                s.system.tokens = int(sysd["tokens"])
                s.system.verbatim = bool(sysd.get("verbatim", False))
                s.system.version = int(sysd.get("version", 1))
            s.tools = list(data.get("tools", []))
            s.tools_tokens = int(data.get("tools_tokens", 0))
            s.tools_version = int(data.get("tools_version", 1 if s.tools else 0))
            s.last_keys = list(data.get("last_keys", []))
            s.plan_version = int(data.get("plan_version", 0))
            s.last_plan_version = int(data.get("last_plan_version", 0))
            s.calls_prepared = int(data.get("calls_prepared", 0))
            s.recallable = bool(data.get("recallable", False))
            s.updates = [(int(pos), m) for pos, m in data.get("updates", [])]
            s.prefix_breaks = int(data.get("prefix_breaks", 0))
            if (
                data.get("lifecycle") is not None
                and s.lifecycle is not None
                and hasattr(s.lifecycle, "load_dict")
            ):
                s.lifecycle.load_dict(data["lifecycle"])
        return s

    def unload_session(self, session_id: str) -> bool:
        """Drop a session from memory only (its store lease stays, unlike `close_session`).

        For hosts that keep sessions in a state store: they save `export_session` first
        and `import_session` it again on the session's next use, which renders the same
        bytes. Refused (False) while the session holds what no export carries: an
        original the store refused (kept in memory for its retry, I3), or an estimator
        run in flight. The caller must keep other calls off the session meanwhile.
        """
        s = self._sessions.get(session_id)
        if s is None:
            return True
        with s.lock:
            lc = s.lifecycle
            if any(e.unstored for e in s.entries) or getattr(lc, "busy", False):
                return False
            with self._lock:
                if self._sessions.get(session_id) is s:
                    del self._sessions[session_id]
        if lc is not None and hasattr(lc, "close"):
            lc.close()  # its estimator thread, idle (nothing in flight)
        return True

    def close_session(self, session_id: str) -> None:
        self.store.close_session(session_id)
        with self._lock:
            self._sessions.pop(session_id, None)


def _first_difference(prev: list[Any], keys: list[Any], system_len: int) -> int:
    """Index in the rendered messages of the first one whose key changed (keys: the system
    version, the tools version, then one key per rendered history message)."""
    if prev[:2] != keys[:2]:
        return 0
    for j, (a, b) in enumerate(zip(prev[2:], keys[2:])):
        if a != b:
            return system_len + j
    return system_len + min(len(prev), len(keys)) - 2


def _digest(obj: Any) -> str:
    """A short content digest: render keys that mean the same in every process."""
    try:
        text = canonical_json(obj)
    except (TypeError, ValueError):
        text = repr(obj)
    return sha256_hex(text)[:20]


def _entry_key(e: _Entry) -> str:
    if not e.key:
        e.key = _digest(e.frozen)
    return e.key


def _kept_fields(msg: Mapping[str, Any], frozen: Any) -> tuple[Any, Any]:
    """(content, calls) of `msg` as an entry keeps them to recognise it (`fingerprint.keep`)."""
    fcontent = frozen.get("content") if isinstance(frozen, Mapping) else None
    return keep(msg.get("content"), fcontent), keep_calls(_sig_calls(msg), frozen)


def _kept_system(raw: tuple[Any, ...], stab: Sequence[Stabilized]) -> tuple[Any, ...]:
    """The raw system contents as the session keeps them: the stabilised text itself where
    it equals the raw one (no volatile values), else a digest (the raw prompt is needed
    only to see whether the next call's differs)."""
    return tuple(keep(r, st.text) for r, st in zip(raw, stab))


def _hashable(msg: Mapping[str, Any]) -> bool:
    try:
        _raw_hash(msg)
        return True
    except (TypeError, ValueError):  # not JSON: int and str keys mixed, bytes, sets...
        return False


def _aid_of(content: Any) -> str:
    from ._canonical import artifact_id_for

    return artifact_id_for(
        content if isinstance(content, str) else canonical_json(content) if content is not None else ""
    )
