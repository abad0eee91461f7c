"""The cost gate: whether an eviction is worth the cache it breaks, said in one place.

An eviction removes E tokens from every later request, so each later call reads E fewer
tokens from the cache; it also changes the request from its first evicted message on,
so everything after that point (A tokens) is sent again once, uncached, where it would
have been a cache hit. And what goes may be needed again: each bundle a rule retired
comes back with some probability, at the price of one more round trip. The gate evicts
only when

    E · p_hit · R  >  A · (p_write − p_hit)  +  Σ_bundles  q · (P · p_hit + n_b · p_write + 40 · p_out)

with R the calls the session is expected to have left (`expected_remaining_calls`: a
fifth of the calls so far, at least 3; the fewest, 3, once the agent is wrapping up),
p_write the profile's price of an uncached token (OpenAI 1x, Anthropic's cache write
1.25x of an input token), q the share of retired bundles wanted back (`recall_risk`),
P the prompt a recall re-sends and n_b each bundle's tokens. A decision at the prompt's
tail has A close to zero: only what the call after the output appended, which the next
request sends uncached anyway. `best_cut` weighs every possible cut of a plan (evicting
only from a later point re-sends less) and keeps the one that saves the most.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..pricing import Prices
from ..tokens import message_tokens


class Planned(Protocol):
    """A plan as the gate reads it: its segments (`evict.EvictionPlan`)."""

    @property
    def segments(self) -> Sequence[Any]: ...


__all__ = [
    "EXPECTED_CALLS_RATIO",
    "MIN_EXPECTED_CALLS",
    "RECALL_CALL_TOKENS",
    "Decision",
    "Rendering",
    "best_cut",
    "expected_remaining_calls",
    "marker_tokens",
    "recall_risk_usd",
    "should_evict",
]

MIN_EXPECTED_CALLS = 3
EXPECTED_CALLS_RATIO = 0.2


def expected_remaining_calls(
    calls_so_far: int, minimum: int = MIN_EXPECTED_CALLS, ratio: float = EXPECTED_CALLS_RATIO
) -> int:
    """A fifth of the calls so far, at least `minimum`. The Lindy estimate (as many
    again) proved optimistic on short conversations (tau-bench: sessions end once the
    task is done), where evictions then cost more re-prefill than they saved; half the
    calls still evicted too eagerly on Claude Code (0.821x at 96.6% retention against
    0.803x at 97.5% with a fifth: fewer breaks, fewer recalls)."""
    return max(int(calls_so_far * ratio), minimum)


@dataclass(frozen=True, slots=True)
class Decision:
    """One gate decision and the numbers it was made from."""

    evict: bool
    evicted_tokens: int
    tokens_after_cut: int
    expected_remaining_calls: int
    p_hit: float
    p_miss: float
    saving_usd: float
    cost_usd: float
    reason: str
    risk_usd: float = 0.0  # expected price of recalls of what goes (`recall_risk_usd`)

    def to_dict(self) -> dict[str, Any]:
        return {
            "evict": self.evict,
            "evictedTokens": self.evicted_tokens,
            "tokensAfterCut": self.tokens_after_cut,
            "expectedRemainingCalls": self.expected_remaining_calls,
            "pHit": self.p_hit,
            "pMiss": self.p_miss,
            "savingUsd": self.saving_usd,
            "costUsd": self.cost_usd,
            "riskUsd": self.risk_usd,
            "reason": self.reason,
        }


def should_evict(
    evicted_tokens: int,
    tokens_after_cut: int,
    expected_remaining_calls: int,
    prices: Prices | None = None,
    profile: str = "openai",
    min_tokens: int = 0,
    risk_usd: float = 0.0,
) -> Decision:
    """Evict only when evicted × p_hit × calls > after_cut × (p_write − p_hit) + risk.

    Left: what later calls save by not reading the evicted tokens from the cache.
    Right: the one-time price of re-prefilling everything after the cut, which
    would otherwise have been a cache hit; the provider charges it as a cache write
    (`profile`: Anthropic 1.25× an uncached token, OpenAI 1×). At most `min_tokens`
    evicted is never worth a break: a small saving is the likeliest to be needed back.
    """
    p = prices or Prices()
    saving = evicted_tokens * p.hit * expected_remaining_calls / 1e6
    cost = tokens_after_cut * (p.write_price(profile) - p.hit) / 1e6
    evict = evicted_tokens > max(min_tokens, 0) and saving > cost + risk_usd
    if evicted_tokens <= 0:
        reason = "nothing to evict"
    elif evicted_tokens <= min_tokens:
        reason = f"{evicted_tokens} tokens are not worth a cache break (minimum {min_tokens})"
    elif evict:
        reason = f"saves ${saving:.6f} over {expected_remaining_calls} calls > re-prefill ${cost:.6f}"
    else:
        reason = f"re-prefill ${cost:.6f} >= saving ${saving:.6f} over {expected_remaining_calls} calls"
    if risk_usd and evicted_tokens > max(min_tokens, 0):
        reason += f" (recall risk ${risk_usd:.6f})"
    return Decision(
        evict,
        evicted_tokens,
        tokens_after_cut,
        expected_remaining_calls,
        p.hit,
        p.miss,
        saving,
        cost,
        reason,
        risk_usd,
    )


RECALL_CALL_TOKENS = 40
"""Output tokens of the model's `recall_artifact` call: the name, an id, a little JSON."""


def recall_risk_usd(
    bundle_tokens: Sequence[int],
    prompt_tokens: int,
    reuse: float,
    prices: Prices | None = None,
    profile: str = "openai",
) -> float:
    """What the recalls of retired bundles are expected to cost: each bundle comes back
    with probability `reuse`, and a recall is one more round trip, the whole prompt again
    (from the cache) plus the bundle's text (new) plus the model's short call for it."""
    if reuse <= 0 or not bundle_tokens:
        return 0.0
    p = prices or Prices()
    trip = prompt_tokens * p.hit + RECALL_CALL_TOKENS * p.output
    return reuse * sum(trip + n * p.write_price(profile) for n in bundle_tokens) / 1e6


def marker_tokens(text: str) -> int:
    """Tokens of an output shown as a marker (a tool message holding only the marker)."""
    return message_tokens({"role": "tool", "content": text})


@dataclass(frozen=True, slots=True)
class Rendering:
    """A history as the current plan renders it: what a new plan is weighed against."""

    counts: Sequence[int]  # tokens of each message, sent whole
    drop: Collection[int]
    stubs: Mapping[int, Sequence[Mapping[str, Any]]]
    replace: Mapping[int, str]  # outputs shown as a marker

    def shown(self, i: int, replace: Mapping[int, str] | None = None) -> int:
        cut = self.replace if replace is None else replace
        return marker_tokens(cut[i]) if i in cut else self.counts[i]


def best_cut(
    plan: Planned,
    now: Rendering,
    calls: int,
    head_refill: int | None,
    *,
    prices: Prices,
    profile: str,
    min_tokens: int,
    recall_risk: float,
) -> tuple[Decision, int]:
    """The gate over every possible cut of `plan`: evicting only the segments from a later
    start on re-sends less. Returns the decision with the largest net saving (or, when
    none pays, the one for the whole plan) and its cut.

    Per cut: E (`evicted_tokens`) is what leaves every later request (dropped messages
    and cut outputs, less the stubs and markers that stand in for them); A is what the
    request holds from the cut on under the new plan, plus everything ahead of the
    history when the tools change (`head_refill`). The floor `min_tokens` is for segment
    rules (a small retired bundle is the likeliest to be needed back); a finished task
    nothing names goes on the economics alone."""
    best: tuple[float, Decision, int] | None = None
    first: tuple[Decision, int] | None = None
    n = len(now.counts)
    for cut in sorted({s.start for s in plan.segments}):
        segs = [s for s in plan.segments if s.start >= cut]
        dropped = {i for s in segs if not s.cuts for i in range(s.start, s.end)}
        cuts = {s.start + offset: text for s in segs for offset, text in s.cuts}
        stub_tokens = sum(message_tokens(s.stub) for s in segs if s.stub)
        evicted = sum(now.counts[i] for i in dropped) - stub_tokens
        evicted += sum(now.counts[i] - marker_tokens(text) for i, text in cuts.items())
        drop = set(now.drop) | dropped
        stubs = {**now.stubs, **{s.start: (s.stub,) for s in segs if s.stub is not None}}
        replace = {**now.replace, **cuts}
        stubbed = {i: sum(message_tokens(m) for m in ms) for i, ms in stubs.items()}
        refill = sum(now.shown(i, replace) for i in range(cut, n) if i not in drop)
        refill += sum(t for i, t in stubbed.items() if cut <= i < n)
        if head_refill is not None:  # the tools change: everything is sent again
            refill += head_refill + sum(now.shown(i) for i in range(cut) if i not in now.drop)
        risk = 0.0
        if recall_risk:
            # A bundle a rule retired may be wanted back (a task the estimator closed is
            # revived by name instead): each is priced as a recall, times how often one was.
            prompt = sum(now.shown(i, replace) for i in range(n) if i not in drop)
            prompt += sum(stubbed.values()) + (head_refill or 0)
            bundles = [
                _recalled_tokens(s, now.counts) // len(s.reasons)
                for s in segs
                if s.reasons
                for _ in s.reasons
            ]
            risk = recall_risk_usd(bundles, prompt, recall_risk, prices, profile)
        whole_tasks = all(not s.reasons for s in segs)
        decision = should_evict(
            evicted, refill, calls, prices, profile, 0 if whole_tasks else min_tokens, risk
        )
        if first is None:
            first = (decision, cut)
        net = decision.saving_usd - decision.cost_usd
        if decision.evict and (best is None or net > best[0]):
            best = (net, decision, cut)
    assert first is not None
    return (best[1], best[2]) if best is not None else first


def _recalled_tokens(segment: Any, counts: Sequence[int]) -> int:
    """What a recall of a segment's content brings back: its cut outputs, or all of it."""
    if segment.cuts:
        return sum(counts[segment.start + offset] for offset, _ in segment.cuts)
    return sum(counts[i] for i in range(segment.start, segment.end))
