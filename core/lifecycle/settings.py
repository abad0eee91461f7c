"""Eviction settings (`LifecycleConfig`): the batch, the schedule, the cost gate's
prices and floors, the segment and window rules. Shared by the schedule
(`lifecycle.py`) and the plan (`lifecycle_plan.py`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError
from .gate import EXPECTED_CALLS_RATIO, Prices
from .segments import SegmentRules, WindowRule
from .tail import TailRules


@dataclass(frozen=True, slots=True)
class LifecycleConfig:
    """Eviction settings. `batch_turns=None` turns eviction off entirely.

    `schedule`: "inline" runs the estimator inside `observe` (deterministic replays),
    "background" on a worker thread, "manual" leaves it to the host (`due`,
    `run_pending`), e.g. a LangGraph node beside the agent node.
    `expected_calls_min`: floor of the gate's expected remaining calls (which is
    otherwise `expected_calls_ratio` times the calls so far). `max_view_turns`: at most this many new
    turns go to one estimator run (older unseen ones stay unowned, hence kept).
    """

    batch_turns: int | None = 3
    stub: bool = True
    cost_gate: bool = True
    schedule: Literal["inline", "background", "manual"] = "background"
    prices: Prices = field(default_factory=Prices)
    expected_calls_min: int = 3
    expected_calls_ratio: float = EXPECTED_CALLS_RATIO
    min_evict_tokens: int = 5000
    """The gate never breaks the cache for this many evicted tokens or fewer."""
    max_view_turns: int = 24
    segments: SegmentRules | None = field(default_factory=SegmentRules)
    """Segment-level rules (see `segments.py`): tool bundles inside a live task that
    may go. None: only whole tasks are evicted, as in the paper."""
    cache_profile: str = "openai"
    """Provider cache the gate prices a re-prefill for: a cache write costs the
    profile's multiple of an uncached token (Anthropic 1.25x, OpenAI 1x)."""
    window: WindowRule | None = field(default_factory=WindowRule)
    """The window rule (see `segments.WindowRule`): once the rendered history passes
    `trigger_tokens`, every tool bundle but the last `keep_calls` calls' goes in one cut,
    gated like the rest, and the next cut waits for the trigger again. None: off."""
    tail: TailRules | None = field(default_factory=TailRules)
    """Decisions at the prompt's tail (see `tail.TailRules`): once the agent has answered
    a turn, images it has seen and outputs with nothing to cite are cut in place, the
    call staying as written. None: off."""
    recall_risk: float = 0.1
    """The share of rule-retired bundles the gate expects to be wanted back: each one it
    evicts is charged this much of a recall round trip (`gate.recall_risk_usd`). 0: off.
    A recall re-sends the whole prompt and the bundle's text uncached, as much as keeping
    the bundle for 10-20 calls, so a cut that barely pays on re-prefill alone loses once
    one of its bundles is needed back. Measured on the three Claude Code sets, a later
    turn used 4.5%, 15% and 26% of the rule-retired bundles again after their eviction
    (mclaude, codemie, spotter); 0.1 sits in the lower part of that range, the same on
    every set. With it (and `SegmentRules.stale_after_action`), openai profile:
    claude_code_codemie 1.007x -> 0.938x of vanilla (29 -> 13 recalls, retention 91.6% ->
    96.5%); the price is cuts deferred where they would have paid: mini-swe-agent 0.797x
    -> 0.816x, the built-in workload 0.2106x -> 0.2121x (one cut of 20.9k tokens a batch
    later). 0.2 deferred so many cuts that later window cuts grew (spotter retention 96.1%)."""
    job_lease_s: float = 120.0
    """How long a background estimator job claimed by one process (a replica) keeps other
    processes sharing the session state from running that batch themselves. Past it, the
    owner is taken for dead and the batch's turns are offered again. Longer than an LLM
    estimator's call with its repair retry (2 x 30 s by default)."""

    def __post_init__(self) -> None:
        if self.batch_turns is not None and (
            not isinstance(self.batch_turns, int)
            or isinstance(self.batch_turns, bool)
            or self.batch_turns < 1
        ):
            raise ConfigError(f"batch_turns must be a positive integer or None, not {self.batch_turns!r}")
        if self.schedule not in ("inline", "background", "manual"):
            raise ConfigError(f"schedule must be 'inline' or 'background', not {self.schedule!r}")
        if not 0 < self.expected_calls_ratio <= 10:
            raise ConfigError("expected_calls_ratio must be in (0, 10]")
        if self.expected_calls_min < 1 or self.max_view_turns < 1:
            raise ConfigError("expected_calls_min and max_view_turns must be >= 1")
        if self.prices.miss < self.prices.hit or self.prices.hit < 0:
            raise ConfigError("prices need 0 <= hit <= miss")
        if not 0 <= self.recall_risk <= 1:
            raise ConfigError("recall_risk must be in [0, 1]")
        if not self.job_lease_s > 0:
            raise ConfigError("job_lease_s must be positive")

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_turns": self.batch_turns,
            "stub": self.stub,
            "cost_gate": self.cost_gate,
            "schedule": self.schedule,
            "prices": {
                "hit": self.prices.hit,
                "miss": self.prices.miss,
                "output": self.prices.output,
                "write": self.prices.write,
            },
            "expected_calls_min": self.expected_calls_min,
            "expected_calls_ratio": self.expected_calls_ratio,
            "min_evict_tokens": self.min_evict_tokens,
            "max_view_turns": self.max_view_turns,
            "segments": self.segments.to_dict() if self.segments is not None else None,
            "cache_profile": self.cache_profile,
            "window": self.window.to_dict() if self.window is not None else None,
            "job_lease_s": self.job_lease_s,
            "recall_risk": self.recall_risk,
            "tail": self.tail.to_dict() if self.tail is not None else None,
        }

    @classmethod
    def for_profile(cls, profile: str, **overrides: Any) -> LifecycleConfig:
        """Defaults for a provider's cache economics: the cost gate prices a re-prefill as
        the profile does (OpenAI: 1x, cached in 128-token steps; Anthropic: a cache write
        at 1.25x). The batch stays 3 turns on both: with the gate expecting a fifth of the
        calls so far to remain, B = 3 beat B = 5 on Anthropic too (Claude Code 0.847x vs
        0.857x, mini-swe-agent 0.873x vs 0.875x, the built-in workload 0.562x vs 0.682x);
        B = 5 won there only under the old, more eager gate."""
        return cls(**{"cache_profile": profile, **overrides})

    @classmethod
    def for_keep(cls, keep: str = "balanced", **overrides: Any) -> LifecycleConfig:
        """The settings of one position of the retention dial (`KEEP`); `overrides` on top.

        - "all": what the agent wrote itself stays as long as anything is used (its
          file writes keep their calls and go stale after 24 turns, outputs after 8),
          and the window waits for 100,000 tokens of history (where Anthropic's own
          context editing starts clearing by default).
        - "balanced" (the default): outputs go stale after 4 unnamed turns, the agent's
          own file text after 12; at least 95% of what later answers use stays in view
          on every shared recording (docs/frontier.md).
        - "lean": the agent's file text ages like any output, and the window keeps the
          history under 40,000 tokens (the mean peak working context, 41k, of the
          cheapest layer in a live graded comparison behind Claude Code): fewer tokens,
          more recalls, less kept in view.
        """
        try:
            preset = KEEP_PRESETS[keep]
        except KeyError:
            raise ConfigError(f"keep must be one of {', '.join(KEEP)}, not {keep!r}") from None
        return cls(**{**preset(), **overrides})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LifecycleConfig:
        d = dict(d)
        if "prices" in d:
            d["prices"] = Prices(**d["prices"])
        if "segments" in d:
            d["segments"] = SegmentRules.from_dict(d["segments"]) if d["segments"] is not None else None
        if d.get("window") is not None:
            d["window"] = WindowRule.from_dict(d["window"])
        if d.get("tail") is not None:
            d["tail"] = TailRules.from_dict(d["tail"])
        return cls(**d)


KEEP = ("all", "balanced", "lean")
"""The retention dial's positions, from the most kept to the least (`LifecycleConfig.for_keep`)."""

KEEP_PRESETS: dict[str, Callable[[], dict[str, Any]]] = {
    "all": lambda: {
        "segments": SegmentRules(stale_after_turns=8, stale_written_after_turns=24, keep_written_calls=True),
        "window": WindowRule(trigger_tokens=100_000),
    },
    "balanced": lambda: {},
    "lean": lambda: {
        "segments": SegmentRules(stale_after_turns=4, stale_written_after_turns=4),
        "window": WindowRule(trigger_tokens=40_000),
    },
}
