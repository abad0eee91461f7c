"""Context-management methods replayed by the bench, each behind one small interface.

A method sees, per recorded call, the prompt the agent sent (system + history, in the
neutral format) and returns the request it would send instead. Baselines model what
users pick today (DESIGN.md §9): keep-last-N, tool-result clearing (Anthropic /
LangChain context editing), OpenClaw's cache-ttl pruning, summary-style truncation.
Baselines are deterministic stand-ins: the summary is an extract, not an LLM call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Protocol

from ..._canonical import canonical_json, sha256_hex
from ...artifacts import ArtifactStore
from ...config import Config
from ...errors import ConfigError
from ...estimator import ImmediateEstimator, OfflineEstimator
from ...lifecycle import Lifecycle, LifecycleConfig
from ...messages import content_text
from ...pilot import TokenPilot
from ...segments import SegmentRules
from ...tokens import message_tokens

Message = dict[str, Any]

_ART = re.compile(r"art_[0-9a-f]{24}")
STUB_PREFIX = "[tokenpilot: evicted"


@dataclass(frozen=True, slots=True)
class SideCall:
    """A model call a method makes on its own (a summariser's), priced like the agent's:
    its prompt through the cache simulator under `namespace`, plus its output."""

    messages: tuple[Message, ...]
    output_tokens: int
    namespace: str


@dataclass(frozen=True, slots=True)
class Rendered:
    """A request as the method would send it. `messages[:stable]` is the cacheable part."""

    messages: list[Message]
    tools: list[dict[str, Any]]
    stable: int
    artifact_ids: frozenset[str] = frozenset()  # originals one recall away
    side_calls: tuple[SideCall, ...] = ()  # calls the method made to produce this request


class MethodSession(Protocol):
    def render(
        self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None
    ) -> Rendered: ...

    def recall_text(self, artifact_id: str) -> str | None: ...

    def close(self) -> None: ...


class Method(Protocol):
    name: str
    # "vanilla", "tokenpilot", "peer" (another product's own code) or "sketch" (our
    # stand-in for an approach with no code to run): the report says which
    kind: str

    def session(self, session_id: str) -> MethodSession: ...


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _split_system(prompt: list[Message]) -> tuple[list[Message], list[Message]]:
    k = 0
    while k < len(prompt) and prompt[k].get("role") in ("system", "developer"):
        k += 1
    return prompt[:k], prompt[k:]


def turn_starts(history: Sequence[Message]) -> list[int]:
    """Indices where a turn starts: a user message, or an assistant not preceded by a user message."""
    starts = []
    for i, m in enumerate(history):
        role = m.get("role")
        if role == "user" and (i == 0 or history[i - 1].get("role") != "user"):
            starts.append(i)
        elif role == "assistant" and (i == 0 or history[i - 1].get("role") not in ("user",)):
            starts.append(i)
    return starts


def _safe_cut(history: Sequence[Message], cut: int) -> int:
    """Move a cut forward until no tool result is separated from its call."""
    while cut < len(history) and history[cut].get("role") == "tool":
        cut += 1
    return cut


def _tokens(messages: Sequence[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


class _Stateless:
    def recall_text(self, artifact_id: str) -> str | None:
        return None

    def close(self) -> None:
        return None


# ---------------------------------------------------------------------------
# baselines
# ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Vanilla:
    """The agent's own prompt, untouched."""

    name: str = "vanilla"
    kind: ClassVar[str] = "vanilla"

    def session(self, session_id: str) -> MethodSession:
        return _VanillaSession()


class _VanillaSession(_Stateless):
    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        return Rendered(prompt, tools, len(prompt))


@dataclass(frozen=True, slots=True)
class KeepLastN:
    """When the prompt passes `trigger` of the window, keep only the last `n` turns.

    The cut is sticky: it moves only when the trigger fires again (as in the paper's
    Keep-Last-N baseline: N = 5 at 40% of the window).
    """

    n: int = 5
    window_tokens: int = 200_000
    trigger: float = 0.40
    name: str = "keep_last_n"
    kind: ClassVar[str] = "sketch"

    def session(self, session_id: str) -> MethodSession:
        return _CutSession(self.window_tokens * self.trigger, lambda hist: self._cut(hist), None)

    def _cut(self, history: Sequence[Message]) -> int:
        starts = turn_starts(history)
        return starts[-self.n] if len(starts) >= self.n else 0


@dataclass(frozen=True, slots=True)
class SummaryTruncation:
    """Summary-style truncation: past `trigger`, older turns become one extract message.

    The extract keeps the user requests and the assistant's final words (first
    `summary_chars` characters in all), standing in for an LLM-written summary.
    """

    keep_turns: int = 5
    window_tokens: int = 200_000
    trigger: float = 0.40
    summary_chars: int = 8000
    name: str = "summary"
    kind: ClassVar[str] = "sketch"

    def session(self, session_id: str) -> MethodSession:
        return _CutSession(self.window_tokens * self.trigger, self._cut, self._summary)

    def _cut(self, history: Sequence[Message]) -> int:
        starts = turn_starts(history)
        return starts[-self.keep_turns] if len(starts) >= self.keep_turns else 0

    def _summary(self, dropped: Sequence[Message]) -> Message:
        lines = []
        for m in dropped:
            if m.get("role") == "user" or (m.get("role") == "assistant" and not m.get("tool_calls")):
                text = " ".join(content_text(m.get("content")).split())
                if text:
                    lines.append(f"- {m['role']}: {text[:400]}")
        body = "\n".join(lines)[: self.summary_chars]
        return {"role": "user", "content": "Summary of the earlier conversation:\n" + body}


class _CutSession(_Stateless):
    """Shared machinery of cut-based baselines: a sticky cut moved when over budget."""

    def __init__(
        self,
        budget: float,
        cut: Callable[[Sequence[Message]], int],
        summarise: Callable[[Sequence[Message]], Message] | None,
    ) -> None:
        self.budget = budget
        self.cut_fn = cut
        self.summarise = summarise
        self.cut = 0
        self.summary: Message | None = None
        self.anchor: Message | None = None  # the message at the cut, to detect a restarted history

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        system, history = _split_system(prompt)
        if self.cut > len(history) or (
            self.cut and history[self.cut] is not self.anchor and history[self.cut] != self.anchor
        ):
            self.cut, self.summary, self.anchor = 0, None, None  # the agent restarted its history
        view = self._view(system, history)
        if _tokens(view) + message_tokens({"tools": tools}) > self.budget:
            new_cut = _safe_cut(history, max(self.cut, self.cut_fn(history)))
            if new_cut > self.cut and new_cut < len(history):
                if self.summarise is not None:
                    self.summary = self.summarise(history[:new_cut])
                self.cut = new_cut
                self.anchor = history[new_cut]
                view = self._view(system, history)
        return Rendered(view, tools, len(view))

    def _view(self, system: list[Message], history: list[Message]) -> list[Message]:
        body = history[self.cut :]
        return [*system, *([self.summary] if self.summary else []), *body]


@dataclass(frozen=True, slots=True)
class ToolResultClearing:
    """Anthropic / LangChain context editing (`clear_tool_uses`): past `trigger_tokens`,
    every tool result but the last `keep` is replaced by a placeholder, on every call."""

    trigger_tokens: int = 100_000
    keep: int = 3
    placeholder: str = "[cleared]"
    name: str = "tool_clearing"
    kind: ClassVar[str] = "sketch"

    def session(self, session_id: str) -> MethodSession:
        return _ClearingSession(self)


class _ClearingSession(_Stateless):
    def __init__(self, m: ToolResultClearing) -> None:
        self.m = m

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        if _tokens(prompt) <= self.m.trigger_tokens:
            return Rendered(prompt, tools, len(prompt))
        tool_idx = [i for i, msg in enumerate(prompt) if msg.get("role") == "tool"]
        clear = set(tool_idx[: max(len(tool_idx) - self.m.keep, 0)])
        out = [{**msg, "content": self.m.placeholder} if i in clear else msg for i, msg in enumerate(prompt)]
        return Rendered(out, tools, len(out))


@dataclass(frozen=True, slots=True)
class CacheTtlPruning:
    """OpenClaw's `contextPruning.mode: "cache-ttl"`: once the provider cache has expired
    (idle > ttl), tool results older than the last `keep_assistants` assistant turns are
    soft-trimmed (over `soft_chars`: first/last `keep_chars`), and hard-cleared when the
    context is over `hard_ratio` of the window. Pruning persists until the next expiry."""

    ttl_s: float = 300.0
    keep_assistants: int = 3
    soft_chars: int = 4000
    keep_chars: int = 1500
    window_tokens: int = 200_000
    hard_ratio: float = 0.5
    name: str = "openclaw_cache_ttl"
    kind: ClassVar[str] = "sketch"

    def session(self, session_id: str) -> MethodSession:
        return _TtlSession(self)


class _TtlSession(_Stateless):
    def __init__(self, m: CacheTtlPruning) -> None:
        self.m = m
        self.last: float | None = None
        self.pruned: dict[str, Message] = {}  # content hash of an original -> pruned form

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        m = self.m
        expired = timestamp is not None and self.last is not None and timestamp - self.last > m.ttl_s
        if timestamp is not None:
            self.last = timestamp
        if expired:
            assistants = [i for i, msg in enumerate(prompt) if msg.get("role") == "assistant"]
            boundary = assistants[-m.keep_assistants] if len(assistants) >= m.keep_assistants else 0
            hard = _tokens(prompt) > m.window_tokens * m.hard_ratio
            for msg in prompt[:boundary]:
                if msg.get("role") != "tool":
                    continue
                key = sha256_hex(canonical_json(msg))
                text = content_text(msg.get("content"))
                if hard:
                    self.pruned[key] = {**msg, "content": "[Old tool result content cleared]"}
                elif len(text) > m.soft_chars and key not in self.pruned:
                    trimmed = text[: m.keep_chars] + "\n...\n" + text[-m.keep_chars :]
                    self.pruned[key] = {**msg, "content": trimmed}
        if not self.pruned:
            return Rendered(prompt, tools, len(prompt))
        out = [
            self.pruned.get(sha256_hex(canonical_json(msg)), msg) if msg.get("role") == "tool" else msg
            for msg in prompt
        ]
        return Rendered(out, tools, len(out))


# ---------------------------------------------------------------------------
# TokenPilot
# ---------------------------------------------------------------------------
@dataclass(slots=True)
class TokenPilotMethod:
    """TokenPilot, global only (`batch_turns=None`) or with eviction every B turns.

    Replays run the estimator inline, so a batch's result applies at the next call,
    exactly as a background estimator that finishes between two calls would.
    """

    batch_turns: int | None | Literal["profile"] = "profile"
    """Estimator batch in turns; "profile": what `LifecycleConfig.for_profile` picks."""
    immediate: bool = False
    config: Config = field(default_factory=Config)
    name: str = "tokenpilot"
    kind: ClassVar[str] = "tokenpilot"
    store: ArtifactStore = field(default_factory=ArtifactStore)
    segments: SegmentRules | None = field(default_factory=SegmentRules)
    lifecycle: Mapping[str, Any] = field(default_factory=dict)  # other LifecycleConfig fields

    def for_profile(self, profile: str) -> TokenPilotMethod:
        """The same method with its cost gate (and, for "profile", its batch) set for `profile`'s cache."""
        batch = self.batch_turns
        if batch == "profile":
            batch = LifecycleConfig.for_profile(profile).batch_turns
        return replace(self, batch_turns=batch, lifecycle={**self.lifecycle, "cache_profile": profile})

    def session(self, session_id: str) -> MethodSession:
        factory = None
        if self.batch_turns == "profile":  # not replayed through `for_profile`: the OpenAI default
            return replace(self, batch_turns=LifecycleConfig().batch_turns).session(session_id)
        if self.batch_turns is not None:
            estimator = ImmediateEstimator() if self.immediate else OfflineEstimator()
            cfg = LifecycleConfig(
                batch_turns=self.batch_turns,
                schedule="inline",
                cost_gate=not self.immediate,
                segments=self.segments,
                **self.lifecycle,
            )

            def factory(sid: str, archive: Callable[[str], str]) -> Lifecycle:
                return Lifecycle(cfg, estimator, archive)

        pilot = TokenPilot(self.config, store=self.store, lifecycle=False, lifecycle_factory=factory)
        return _PilotSession(pilot, session_id)


class _PilotSession:
    def __init__(self, pilot: TokenPilot, session_id: str) -> None:
        self.pilot = pilot
        self.sid = session_id
        self.artifacts: set[str] = set()

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        p = self.pilot.prepare(prompt, tools, session_id=self.sid)
        self.artifacts.update(p.stats.artifacts)
        for m in p.messages:  # eviction stubs name the archive of what they replaced
            content = m.get("content")
            if isinstance(content, str) and content.startswith(STUB_PREFIX):
                self.artifacts.update(_ART.findall(content))
        return Rendered(p.messages, p.tools, p.tail_start, frozenset(self.artifacts))

    def recall_text(self, artifact_id: str) -> str | None:
        r = self.pilot.store.recall(self.sid, artifact_id)
        return r.text if r.found else None

    def close(self) -> None:
        s = self.pilot._sessions.get(self.sid)
        if s is not None and s.lifecycle is not None:
            s.lifecycle.close()


def default_methods(b_sweep: Sequence[int | None] = (1, 3, 5, None)) -> list[Method]:
    """Every method of the bench, in report order (issue: baselines, global, B sweep, ablation)."""
    methods: list[Method] = [
        Vanilla(),
        KeepLastN(),
        ToolResultClearing(),
        CacheTtlPruning(),
        SummaryTruncation(),
        TokenPilotMethod(batch_turns=None, name="tokenpilot_global"),
    ]
    for b in b_sweep:
        label = "inf" if b is None else str(b)
        if b == 3:  # the default: B follows the cache profile (3 for OpenAI, 5 for Anthropic)
            methods.append(TokenPilotMethod(name="tokenpilot"))
            continue
        methods.append(TokenPilotMethod(batch_turns=b, name=f"tokenpilot_B{label}"))
    methods.append(TokenPilotMethod(batch_turns=3, immediate=True, name="tokenpilot_immediate"))
    return methods


_RULE_FIELDS = {
    "superseded_reads": {"superseded_reads": False},
    "superseded_commands": {"superseded_commands": False},
    "consumed_listings": {"consumed_listings": False},
    "stale_outputs": {"stale_after_turns": None},
}


def ablation_methods() -> list[Method]:
    """Vanilla, TokenPilot, and TokenPilot with one thing taken away each: every segment
    rule, the window rule, all segment rules (whole tasks only, as in the paper), compact
    line numbers, the segment-aware gate's minimum; then the batch sweep (B = 1, 5, ∞)."""
    full = SegmentRules()
    methods: list[Method] = [Vanilla(), TokenPilotMethod(name="tokenpilot")]
    for rule, off in _RULE_FIELDS.items():
        methods.append(TokenPilotMethod(segments=replace(full, **off), name=f"tokenpilot_no_{rule}"))
    methods.append(TokenPilotMethod(lifecycle={"window": None}, name="tokenpilot_no_window"))
    methods.append(TokenPilotMethod(segments=None, lifecycle={"window": None}, name="tokenpilot_tasks_only"))
    methods.append(
        TokenPilotMethod(config=Config(line_numbers="strip"), name="tokenpilot_strip_line_numbers")
    )
    methods.append(TokenPilotMethod(lifecycle={"min_evict_tokens": 0}, name="tokenpilot_no_min_evict"))
    for b in (1, 5, None):
        methods.append(TokenPilotMethod(batch_turns=b, name=f"tokenpilot_B{'inf' if b is None else b}"))
    return methods


def _peers_by_name() -> dict[str, tuple[Method, str | None]]:
    """Every peer method whose module exists here -> (method, why it cannot run or None)."""
    from importlib import import_module

    from .peers import PEERS

    out: dict[str, tuple[Method, str | None]] = {}
    for module_name in PEERS:
        try:
            module = import_module(f"{__package__}.peers.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__package__}.peers.{module_name}":
                continue  # a peer not written yet on this branch
            raise
        reason = module.missing()
        for m in module.methods():
            out[m.name] = (m, reason)
    return out


def method_names(*, ablation: bool = False) -> list[str]:
    """Names `--methods` accepts: the built-in set's, then any peer's."""
    names = [m.name for m in (ablation_methods() if ablation else default_methods())]
    return names + [n for n in _peers_by_name() if n not in names]


def named_methods(wanted: Sequence[str] | None, *, ablation: bool = False) -> list[Method]:
    """The built-in set (or its `wanted` members), then each wanted peer; a peer that
    cannot run here stops with a `ConfigError` saying what to install."""
    builtin = ablation_methods() if ablation else default_methods()
    chosen = [m for m in builtin if wanted is None or m.name in wanted]
    names = {m.name for m in builtin}
    peers = _peers_by_name() if wanted and set(wanted) - names else {}
    for name in wanted or ():
        if name in names or name not in peers:
            continue
        method, reason = peers[name]
        if reason:
            raise ConfigError(f"method {name!r} cannot run: {reason}")
        chosen.append(method)
    return chosen
