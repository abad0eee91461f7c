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

import copy
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._canonical import canonical_json, sha256_hex
from .config import Config
from .errors import ConfigError
from .estimator import Estimator, LLMEstimator, OfflineEstimator
from .history.render import Rendered, break_cause, first_difference, render_call
from .history.session import Entry, Session, msg_tokens
from .history.session_state import load_session, session_to_dict
from .history.sync import History, bulky
from .history.system_prompt import SystemPrompts
from .history.take import Taken, take_in
from .ingest.gate import Pipeline
from .ingest.stabilize import merge_tools, recalled_by_client, stabilize_text
from .lifecycle.schedule import Lifecycle, LifecycleConfig
from .messages.limits import check_depth, check_request
from .messages.markers import strip_markers
from .messages.model import content_text, to_anthropic
from .recall.tool import answer_recall_call, recall_in_session, resolve_session
from .store.archive import SessionArchive
from .store.artifacts import RecallResult
from .store.open import open_artifacts
from .store.protocol import Artifacts
from .tokens import count_tokens

log = logging.getLogger("tokenpilot")


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
    recalled: int = 0
    """New answers of a recall tool that TokenPilot did not run itself (its MCP server,
    which the client runs): the agent's recalls, seen as they enter the history."""

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
    overrides all of that. `keep` sets the retention dial ("all", "balanced", "lean":
    `LifecycleConfig.for_keep`); with a `LifecycleConfig` given, that config decides.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        store: Artifacts | str | Path | None = None,
        lifecycle: LifecycleConfig | None | bool = None,
        estimator: Estimator | None = None,
        lifecycle_factory: Callable[[str, Callable[[str], str]], Any] | None = None,
        keep: str | None = None,
    ) -> None:
        if keep is not None and isinstance(lifecycle, LifecycleConfig):
            raise ConfigError(
                "give keep= or a LifecycleConfig (LifecycleConfig.for_keep(keep, ...)), not both"
            )
        self.config = config or Config()
        self.store: Artifacts = open_artifacts(store)
        self.pipeline = Pipeline(self.config)
        self.history = History(self.config, self.pipeline, self.store)
        self.lifecycle_config: LifecycleConfig | None = None
        if lifecycle_factory is None and lifecycle is not False:
            lc = (
                lifecycle
                if isinstance(lifecycle, LifecycleConfig)
                else LifecycleConfig.for_keep(keep or "balanced")
            )
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
        self.system_prompts = SystemPrompts(self.config)

    # -- sessions -------------------------------------------------------------
    def session(self, session_id: str) -> Session:
        with self._lock:
            s = self._sessions.get(session_id)
            if s is None:
                s = Session(session_id)
                if self.lifecycle_config is not None and self.lifecycle_config.batch_turns:
                    s.elisions.batch_calls = self.lifecycle_config.batch_turns  # the same B
                if self.lifecycle_factory is not None:
                    s.lifecycle = self.lifecycle_factory(session_id, SessionArchive(self.store, session_id))
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
                self._plan_ahead(s)

        guard = self.estimate_guard
        if guard is None:
            locked()
        else:
            guard(session_id, locked)

    @staticmethod
    def _plan_ahead(s: Session) -> None:
        """Plan a delivered result now, on the history the last call left (`apply_ready`),
        so that the next call does not weigh the whole history first. A failure is logged
        and leaves the plan as it was, as a failing plan at a call does."""
        apply_ready = getattr(s.lifecycle, "apply_ready", None)
        if apply_ready is None or not s.entries:
            return
        try:
            apply_ready([e.frozen for e in s.entries])
        except Exception as exc:  # eviction is an optimisation: never fail the agent
            log.warning("tokenpilot: a delivered estimate could not be planned now: %s", exc)

    @property
    def session_ids(self) -> list[str]:
        return list(self._sessions)

    def derive_session_id(self, messages: Sequence[Any]) -> str:
        """A stable id from the conversation's start: the system text (stabilised) and first message."""
        k = self.system_prompts.leading(messages)
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

    # -- prepare --------------------------------------------------------------
    def prepare(
        self,
        messages: Sequence[Any],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        session_id: str | None = None,
    ) -> Prepared:
        """Render the managed request for this history. Never mutates its input.

        The stages of a call, each one room's work, each handing the next a value
        (docs/ARCHITECTURE.md): validate (`messages`) -> split and take in what is new
        (`history.take.take_in`, ingesting through `ingest`) -> plan and render
        (`history.render.render_call`, with the `lifecycle`'s plan) -> tools
        (`ingest.stabilize.merge_tools`) -> record (keys, prefix break, stats)."""
        cfg = self.config
        messages = check_request(messages, tools, cfg.max_messages, cfg.max_depth)
        messages, marks = strip_markers(messages)  # where the caller caches, not what it says
        session = self.session(session_id or self.derive_session_id(messages))
        with session.lock:
            warnings: list[str] = []
            taken = take_in(self.history, session, messages, self.system_prompts, warnings)
            rendered = render_call(session, taken, cfg, self.system_prompts, marks)
            self._merge_tools(session, tools, taken, rendered)
            return self._record(session, messages, taken, rendered, warnings)

    def _merge_tools(
        self, s: Session, tools: Sequence[Mapping[str, Any]] | None, taken: Taken, rendered: Rendered
    ) -> None:
        """The caller's tools in canonical form; `recall_artifact` joins on the first call
        with something to recall (an artifact, an eviction), or at once where the tools say
        their outputs run large (`recall_tool_from="auto"`)."""
        cfg = self.config
        if s.calls_prepared == 0 and cfg.recall_tool_from == "auto" and not s.recallable:
            s.recallable = bulky(list(tools or ()))
        s.recallable = s.recallable or bool(taken.stored) or bool(rendered.evicted)
        recall = cfg.register_recall_tool and (cfg.recall_tool_from == "first_call" or s.recallable)
        s.tools, tools_changed = merge_tools(s.tools, tools, include_recall=recall)
        if tools_changed:
            s.tools_version += 1
            s.tools_tokens = count_tokens(canonical_json(s.tools))

    def _record(
        self, s: Session, messages: list[Any], taken: Taken, rendered: Rendered, warnings: list[str]
    ) -> Prepared:
        """What this call sent, for the next one (its keys: does the next request extend this
        one?) and for the caller (`PrepareStats`)."""
        keys = [s.system.version, s.tools_version, *rendered.keys]
        cause, break_at = None, None
        if s.last_keys and keys[: len(s.last_keys)] != s.last_keys:
            cause = break_cause(s, keys, taken.rewritten, recovered=taken.recovered, whole=taken.whole)
            break_at = first_difference(s.last_keys, keys, len(s.system.rendered))
            s.prefix_breaks += 1
        s.last_keys = keys
        s.last_plan_version = s.plan_version
        s.last_whole = taken.whole
        s.calls_prepared += 1

        out, evicted = rendered.messages, rendered.evicted
        raw_tokens = s.system.tokens + s.tools_tokens + sum(e.raw_tokens for e in s.entries)
        tokens = (
            s.system.tokens
            + s.tools_tokens
            + sum(e.tokens for i, e in enumerate(s.entries) if i not in evicted)
            + sum(msg_tokens(m) for _, m in s.updates)
            + (s.moved.extra_tokens(s.entries, msg_tokens) if evicted else 0)
        )
        if rendered.tail_start < len(out):
            tokens += msg_tokens(out[-1])
        stats = PrepareStats(
            session_id=s.id,
            messages_in=len(messages),
            messages_out=len(out),
            ingested=len(taken.history) - taken.start,
            reduced=taken.reduced,
            raw_tokens=raw_tokens,
            tokens=tokens,
            prefix_break=cause,
            prefix_break_at=break_at,
            prefix_breaks=s.prefix_breaks,
            evicted_messages=len(evicted),
            artifacts=tuple(taken.stored),
            malformed=taken.malformed,
            warnings=tuple(warnings),
            unstored=taken.unstored,
            recalled=sum(1 for e in s.entries[taken.start :] if _client_recall(s, e)),
        )
        return Prepared(out, [dict(t) for t in s.tools], stats, s.id, rendered.tail_start)

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
        # a copy the caller may change (a custom lifecycle may have no `stats_copy`)
        copy_of = getattr(s.lifecycle, "stats_copy", None)
        stats = copy_of() if copy_of is not None else copy.deepcopy(dict(s.lifecycle.stats))
        return {**stats, **s.elisions.stats()}  # the caller's elisions, batched

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
        content, aid, passes = self.history.reduce_output(s, text, str(tool_name), str(arguments))
        return ToolOutputReduction(content, aid, passes)

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
        sid = resolve_session(session_id, self._sessions)
        return recall_in_session(self.store, self._sessions, sid, artifact_id, start_line, end_line, pattern)

    def execute_recall(
        self, arguments: str | bytes | Mapping[str, Any], *, session_id: str | None = None
    ) -> str:
        """Run a `recall_artifact` tool call from its raw arguments; returns the tool's text.

        The model wrote the arguments: whatever they are (not JSON, nested 100k deep, ids
        that are not strings), the answer is a tool result saying what was wrong, never
        an exception. A whole original over `Config.hard_limit_chars` comes back as its
        first part, with the range to ask for next.
        """
        return answer_recall_call(
            arguments,
            lambda aid, start, end, pattern: self.recall(aid, start, end, pattern, session_id=session_id),
            max_chars=self.config.hard_limit_chars,  # no answer enters the context longer than an output may
        )

    # -- persistence -------------------------------------------------------------

    def export_session(self, session_id: str) -> dict[str, Any]:
        """JSON-safe state of a session, for checkpoints and restarts."""
        return session_to_dict(self._sessions[session_id])

    def import_session(self, data: Mapping[str, Any]) -> Session:
        """Restore a session exported by `export_session` (possibly in another process)."""
        s = self.session(str(data["id"]))
        load_session(s, data)
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


def _client_recall(s: Session, e: Entry) -> bool:
    """Whether a history entry is the answer of a recall the client ran (our MCP server)."""
    info = s.calls.get(e.ids) if e.role == "tool" and isinstance(e.ids, str) else None
    return info is not None and recalled_by_client(info.name, info.arguments) is not None
