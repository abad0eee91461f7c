"""Context-management methods replayed by the bench, each behind one small interface.

A method sees, per recorded call, the prompt the agent sent (system + history, in the
neutral format) and returns the request it would send instead. What users pick today
runs from its own code where it has code (`peers/`: LangChain's middleware, Headroom,
OpenClaw's pruning); the rest are sketches, named as such (`kind = "sketch"`), of
approaches with no code to run: keep-last-N, as the paper's baseline.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

from ...config import CONTENT_PASSES, Config
from ...estimator import ImmediateEstimator, OfflineEstimator
from ...lifecycle.schedule import Lifecycle, LifecycleConfig
from ...lifecycle.segments import SegmentRules, WindowRule
from ...lifecycle.settings import KEEP
from ...lifecycle.tail import TailRules
from ...passes.truncate import DEFAULT_LIMITS
from ...pilot import TokenPilot
from ...store.artifacts import ArtifactStore
from ...tokens import message_tokens
from .context_editing import context_editing_methods
from .method import Message, Method, MethodSession, Rendered, Stateless, split_system
from .oracle import HindsightOracle

_ART = re.compile(r"art_[0-9a-f]{24}")
RECALL_CALL = "recall_artifact(artifact_id="  # in every stub and marker that names an archive


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
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


class _VanillaSession(Stateless):
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
        return _KeepLastNSession(self.window_tokens * self.trigger, self._cut)

    def _cut(self, history: Sequence[Message]) -> int:
        starts = turn_starts(history)
        return starts[-self.n] if len(starts) >= self.n else 0


class _KeepLastNSession(Stateless):
    """A sticky cut, moved forward only when the view is over budget."""

    def __init__(self, budget: float, cut: Callable[[Sequence[Message]], int]) -> None:
        self.budget = budget
        self.cut_fn = cut
        self.cut = 0
        self.anchor: Message | None = None  # the message at the cut, to detect a restarted history

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        system, history = split_system(prompt)
        if self.cut >= len(history) or (
            self.cut and history[self.cut] is not self.anchor and history[self.cut] != self.anchor
        ):
            self.cut, self.anchor = 0, None  # the agent restarted its history
        view = [*system, *history[self.cut :]]
        if _tokens(view) + message_tokens({"tools": tools}) > self.budget:
            new_cut = _safe_cut(history, max(self.cut, self.cut_fn(history)))
            if new_cut > self.cut and new_cut < len(history):
                self.cut = new_cut
                self.anchor = history[new_cut]
                view = [*system, *history[self.cut :]]
        return Rendered(view, tools, len(view))


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
    segments: SegmentRules | None | Literal["keep"] = "keep"
    """Segment rules; "keep": the dial position's (`keep`); None: whole tasks only."""
    lifecycle: Mapping[str, Any] = field(default_factory=dict)  # other LifecycleConfig fields
    keep: str = "balanced"
    """The retention dial's position (`LifecycleConfig.for_keep`): its segment rules and
    window, under `segments` and `lifecycle` when those are given other values."""

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
            preset = LifecycleConfig.for_keep(self.keep)
            segments = preset.segments if self.segments == "keep" else self.segments
            cfg = replace(
                preset,
                batch_turns=self.batch_turns,
                schedule="inline",
                cost_gate=not self.immediate,
                segments=segments,
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
        for m in p.messages:  # stubs and cut markers name the archive of what they replaced
            content = m.get("content")
            if isinstance(content, str) and RECALL_CALL in content:
                self.artifacts.update(_ART.findall(content))
        return Rendered(p.messages, p.tools, p.tail_start, frozenset(self.artifacts))

    def recall_text(self, artifact_id: str) -> str | None:
        r = self.pilot.store.recall(self.sid, artifact_id)
        return r.text if r.found else None

    def close(self) -> None:
        s = self.pilot._sessions.get(self.sid)
        if s is not None and s.lifecycle is not None:
            s.lifecycle.close()


def oracle_methods(every: int = 1, lag: int = 0) -> list[Method]:
    """`oracle` (TokenPilot's ingestion, then the best eviction schedule) and `oracle_raw`
    (the agent's own prompt, then the same search)."""
    return [
        HindsightOracle(TokenPilotMethod(batch_turns=None, name="tokenpilot_global"), "oracle", every, lag),
        HindsightOracle(Vanilla(), "oracle_raw", every, lag),
    ]


def default_methods(
    b_sweep: Sequence[int | None] = (1, 3, 5, None), *, peers: bool | Collection[str] = False
) -> list[Method]:
    """Every method of the bench, in report order: vanilla, the hindsight oracles (the
    most any eviction could save), sketches, peers (other products' own code: `True`
    for all, or the names wanted; `ConfigError` when one is not installed), then
    TokenPilot: global only, the B sweep, the immediate ablation."""
    methods: list[Method] = [Vanilla(), *oracle_methods(), KeepLastN(), *context_editing_methods()]
    if peers:
        from .peers import peer_methods

        methods.extend(peer_methods(None if peers is True else peers))
    methods.append(TokenPilotMethod(batch_turns=None, name="tokenpilot_global"))
    for b in b_sweep:
        label = "inf" if b is None else str(b)
        if b == 3:  # the default (its gate priced for the cache profile), and the dial's other positions
            methods.append(TokenPilotMethod(name="tokenpilot"))
            methods.extend(TokenPilotMethod(keep=k, name=f"tokenpilot_{k}") for k in KEEP if k != "balanced")
            continue
        methods.append(TokenPilotMethod(batch_turns=b, name=f"tokenpilot_B{label}"))
    methods.append(TokenPilotMethod(batch_turns=3, immediate=True, name="tokenpilot_immediate"))
    return methods


_RULE_FIELDS = {
    "superseded_reads": {"superseded_reads": False},
    "superseded_writes": {"superseded_writes": False},
    "superseded_commands": {"superseded_commands": False},
    "consumed_listings": {"consumed_listings": False},
    "stale_outputs": {"stale_after_turns": None},
    "stale_after_action": {"stale_after_action": False},
    "answer_is_action": {"answer_is_action": False},
    "written_horizon": {"stale_written_after_turns": None},
}


def ablation_methods() -> list[Method]:
    """Vanilla, TokenPilot, and TokenPilot with one thing taken away each: every segment
    rule (the stale rule's horizon back at 8 turns, the agent's written files aging like
    any output, a write's call kept when its output goes), each tail rule (and the shrink
    of what the agent looked through, off by default), the window rule, the window's exemption for what the last turns used, all
    segment rules (whole tasks only, as in the paper), compact line numbers, the
    segment-aware gate's minimum, the gate's recall risk, each content-aware pass, the lossless JSON re-encoding (and its rows),
    re-shown lines, and the whole history shown to a compaction request (its summary then
    sees the managed history); one thing added: the paper's truncation at the 2,200-char
    gate (`truncating_at`); then the batch sweep (B = 1, 5, ∞)."""
    full = SegmentRules()
    methods: list[Method] = [Vanilla(), TokenPilotMethod(name="tokenpilot")]
    for rule, off in _RULE_FIELDS.items():
        methods.append(TokenPilotMethod(segments=replace(full, **off), name=f"tokenpilot_no_{rule}"))
    methods.append(
        TokenPilotMethod(segments=replace(full, stale_after_turns=8), name="tokenpilot_stale_after_8")
    )
    methods.append(
        TokenPilotMethod(
            segments=replace(full, keep_written_calls=True), name="tokenpilot_written_keep_calls"
        )
    )
    methods.append(TokenPilotMethod(lifecycle={"tail": None}, name="tokenpilot_no_tail"))
    methods.append(
        TokenPilotMethod(lifecycle={"tail": TailRules(images=False)}, name="tokenpilot_no_tail_images")
    )
    methods.append(
        TokenPilotMethod(lifecycle={"tail": TailRules(uncitable=False)}, name="tokenpilot_no_tail_uncitable")
    )
    methods.append(
        TokenPilotMethod(lifecycle={"tail": TailRules(shrink=True)}, name="tokenpilot_tail_shrink")
    )
    methods.append(
        TokenPilotMethod(lifecycle={"tail": TailRules(recalled=False)}, name="tokenpilot_keep_recalled")
    )
    methods.append(
        TokenPilotMethod(
            lifecycle={"tail": TailRules(recall_turns=False)}, name="tokenpilot_recall_turns_kept"
        )
    )
    methods.append(TokenPilotMethod(lifecycle={"window": None}, name="tokenpilot_no_window"))
    methods.append(
        TokenPilotMethod(
            lifecycle={"window": WindowRule(keep_used_turns=None)}, name="tokenpilot_window_cuts_used"
        )
    )
    methods.append(TokenPilotMethod(segments=None, lifecycle={"window": None}, name="tokenpilot_tasks_only"))
    methods.append(
        TokenPilotMethod(config=Config(line_numbers="strip"), name="tokenpilot_strip_line_numbers")
    )
    methods.append(TokenPilotMethod(lifecycle={"min_evict_tokens": 0}, name="tokenpilot_no_min_evict"))
    methods.append(TokenPilotMethod(lifecycle={"recall_risk": 0.0}, name="tokenpilot_no_recall_risk"))
    for name in sorted(CONTENT_PASSES):  # each content-aware pass taken out of every profile
        methods.append(TokenPilotMethod(config=_without_pass(name), name=f"tokenpilot_no_{name}"))
    methods.append(TokenPilotMethod(config=Config(small_json_minify=False), name="tokenpilot_no_small_json"))
    methods.append(
        TokenPilotMethod(config=Config(small_json_rows=False), name="tokenpilot_no_small_json_rows")
    )
    methods.append(TokenPilotMethod(config=Config(reshown=False), name="tokenpilot_no_reshown"))
    methods.append(TokenPilotMethod(config=truncating_at(2200), name="tokenpilot_truncate_at_gate"))
    methods.append(
        TokenPilotMethod(config=Config(compaction_markers=()), name="tokenpilot_compaction_sees_plan")
    )
    for b in (1, 5, None):
        methods.append(TokenPilotMethod(batch_turns=b, name=f"tokenpilot_B{'inf' if b is None else b}"))
    return methods


def truncating_at(limit: int) -> Config:
    """The default config with every tool family that has a truncation limit (shells,
    searches, writes) cut at `limit` chars instead, to the paper's 600/400 preview; reads
    and fetches stay unlimited. At the 2,200-char gate this is the paper's truncation
    applied to everything it may cut: how far a preview goes, and what it costs."""
    limits = {family: (None if cap is None else min(cap, limit)) for family, cap in DEFAULT_LIMITS.items()}
    return Config(truncation_limits=limits)


def _without_pass(name: str) -> Config:
    cfg = Config()
    profiles = {tool: tuple(p for p in prof if p != name) for tool, prof in cfg.profiles.items()}
    return cfg.replace(passes=tuple(p for p in cfg.passes if p != name), profiles=profiles)


def method_names(*, ablation: bool = False) -> list[str]:
    """Every name `--methods` knows: the built-in methods and every peer's, installed or not."""
    return [m.name for m in (ablation_methods() if ablation else default_methods())] + peer_names()


def peer_names() -> list[str]:
    from .peers import peer_method_names

    return list(peer_method_names())
