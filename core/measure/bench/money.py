"""Where the money goes: a method's cost above the oracle's, split by cause.

A call's prompt costs `P·hit + U·(miss − hit)` (U: its uncached tokens; for Anthropic,
its writes at the write price), so the difference between two runs of the same calls
splits exactly into what their prompt sizes and their uncached tokens cost:

- *too late*: the larger prompts, every token read at the hit price
  (`Σ (P − P_oracle) · hit`): content kept after the last call that needed it;
- *cache writes*: uncached tokens beyond what the call appended (`U − max(0, P − P_prev)`),
  the re-prefill after a prefix changed, at `miss − hit`, above the oracle's own;
- *recalls*: the round trips paid to get back what was evicted and needed;
- *rest*: what is left (uncached new content, side calls, output).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...pricing import Prices
from .replay import CallResult, RunResult


@dataclass(frozen=True, slots=True)
class MoneySplit:
    """Dollars a run costs above a reference run (the oracle), by cause."""

    above: float
    too_late: float
    cache_writes: float
    recalls: float
    rest: float


def _refill(calls: Sequence[CallResult]) -> list[int]:
    """Per call, uncached tokens beyond what it appended to its session's previous prompt."""
    last: dict[str, int] = {}
    out = []
    for c in calls:
        grew = max(0, c.prompt_tokens - last.get(c.session_id, 0))
        last[c.session_id] = c.prompt_tokens
        out.append(max(0, c.miss_tokens + c.write_tokens - grew))
    return out


def money_split(run: RunResult, reference: RunResult, prices: Prices | None = None) -> MoneySplit:
    """`run`'s cost above `reference`'s on the same calls, by cause (see the module)."""
    prices = prices or Prices()
    if len(run.calls) != len(reference.calls):
        raise ValueError("the two runs must replay the same calls")
    profile = run.cache_profile
    uncached = prices.write_price(profile) if profile == "anthropic" else prices.miss
    too_late = sum(a.prompt_tokens - b.prompt_tokens for a, b in zip(run.calls, reference.calls, strict=True))
    refill = sum(_refill(run.calls)) - sum(_refill(reference.calls))
    above = sum(c.cost_usd for c in run.calls) - sum(c.cost_usd for c in reference.calls)
    late_usd = too_late * prices.hit / 1e6
    writes_usd = refill * (uncached - prices.hit) / 1e6
    recalls = sum(c.recall_usd for c in run.calls) - sum(c.recall_usd for c in reference.calls)
    return MoneySplit(above, late_usd, writes_usd, recalls, above - late_usd - writes_usd - recalls)
