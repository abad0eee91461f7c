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

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..messages.model import role_and_text
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
    return _recall_risk(len(bundle_tokens), sum(bundle_tokens), prompt_tokens, reuse, prices, profile)


def _recall_risk(
    bundles: int, tokens: int, prompt_tokens: int, reuse: float, prices: Prices | None, profile: str
) -> float:
    """`recall_risk_usd` from the bundles' count and their tokens' sum: a cut's bundles are
    a suffix of the plan's, so `best_cut` keeps both as running totals."""
    if reuse <= 0 or not bundles:
        return 0.0
    p = prices or Prices()
    trip = prompt_tokens * p.hit + RECALL_CALL_TOKENS * p.output
    return reuse * (bundles * trip + tokens * p.write_price(profile)) / 1e6


def stub_tokens(stub: Mapping[str, Any]) -> int:
    """Tokens of a stub message. A stub the planner made (a role and a text) is remembered
    by its text, as markers are: the gate weighs each deferred segment's stub at every batch."""
    plain = role_and_text(stub)
    return _role_text_tokens(*plain) if plain is not None else message_tokens(stub)


@functools.lru_cache(maxsize=4096)
def _role_text_tokens(role: str, text: str) -> int:
    return message_tokens({"role": role, "content": text})


@functools.lru_cache(maxsize=4096)
def marker_tokens(text: str) -> int:
    """Tokens of an output shown as a marker (a tool message holding only the marker).
    Remembered by text: the gate weighs every marker of the plan at every batch."""
    return message_tokens({"role": "tool", "content": text})


@dataclass(frozen=True, slots=True)
class Rendering:
    """A history as the current plan renders it: what a new plan is weighed against."""

    counts: Sequence[int]  # tokens of each message, sent whole
    drop: Collection[int]
    stubs: Mapping[int, Sequence[Mapping[str, Any]]]
    replace: Mapping[int, str]  # outputs shown as a marker
    stub_counts: Mapping[int, int] | None = None  # tokens of `stubs` per index, when known

    def stub_tokens(self) -> Mapping[int, int]:
        if self.stub_counts is not None:
            return self.stub_counts
        return {i: sum(message_tokens(m) for m in ms) for i, ms in self.stubs.items()}

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
    nothing names goes on the economics alone.

    The plan's segments are disjoint (`plan_eviction` walks the turns once), so from a cut
    on the request is the whole new plan's and before it the current one's: each cut's
    sums are read off running totals (`_Weights`), once per batch instead of once per cut."""
    segments = sorted(plan.segments, key=lambda s: s.start)
    w = _Weights(segments, now, head_refill)
    # Per segment, the recalls a rule's retirement risks (one per reason): each segment's
    # list is made once, and a cut's bundles are those of the segments from it on.
    # risked_n[j], risked_tokens[j]: how many bundles the segments from j on risk, and their tokens.
    risked_n = [0] * (len(segments) + 1)
    risked_tokens = [0] * (len(segments) + 1)
    tasks_only = [True] * (len(segments) + 1)  # tasks_only[j]: no segment from j on retired by a rule
    for j in range(len(segments) - 1, -1, -1):
        s = segments[j]
        per = _recalled_tokens(s, now.counts) // len(s.reasons) if s.reasons else 0
        risked_n[j] = risked_n[j + 1] + len(s.reasons)
        risked_tokens[j] = risked_tokens[j + 1] + per * len(s.reasons)
        tasks_only[j] = tasks_only[j + 1] and not s.reasons
    best: tuple[float, Decision, int] | None = None
    first: tuple[Decision, int] | None = None
    for j, seg in enumerate(segments):
        if j and segments[j - 1].start == seg.start:
            continue
        cut = seg.start
        evicted, refill, prompt = w.at(cut)
        risk = 0.0
        if recall_risk:
            # A bundle a rule retired may be wanted back (a task the estimator closed is
            # revived by name instead): each is priced as a recall, times how often one was.
            risk = _recall_risk(risked_n[j], risked_tokens[j], prompt, recall_risk, prices, profile)
        whole_tasks = tasks_only[j]
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


class _Weights:
    """Running totals of a history under the current plan (`now`) and under the whole new
    plan, so that a cut's E, A and prompt are a few subtractions.

    With disjoint segments, a message at or after a cut is shown as the whole new plan
    shows it (every segment that covers it starts at or after the cut), and one before it
    as the current plan shows it; the same holds for the stubs at each index."""

    __slots__ = ("_after", "_before", "_evicted", "_head", "_late_stubs", "_n", "_stubs_before")

    def __init__(self, segments: Sequence[Any], now: Rendering, head_refill: int | None) -> None:
        for a, b in zip(segments, segments[1:]):
            if b.start < a.end:
                raise ValueError(f"overlapping segments: [{a.start}, {a.end}) and [{b.start}, {b.end})")
        n = self._n = len(now.counts)
        dropped = {i for s in segments if not s.cuts for i in range(s.start, s.end)}
        cuts = {s.start + offset: text for s in segments for offset, text in s.cuts}
        drop = set(now.drop) | dropped
        replace = {**now.replace, **cuts}
        stubs_now = now.stub_tokens()
        stubs = {**stubs_now, **{s.start: stub_tokens(s.stub) for s in segments if s.stub is not None}}
        leaving = [0] * (n + 1)  # what each index takes out of a request: evicted, less its stub
        for s in segments:
            if s.stub and s.start < n:
                leaving[s.start] -= stub_tokens(s.stub)
        # _evicted[c]: E from c on; _after[c]: the new plan's messages and stubs from c to the
        # history's end; _before[c]: the current plan's messages before c; _stubs_before[c]:
        # its stubs before c; _late_stubs: stubs past the history's end (in the prompt only).
        self._evicted = [0] * (n + 1)
        self._after = [0] * (n + 1)
        for i in range(n - 1, -1, -1):
            if i in dropped:
                leaving[i] += now.counts[i]
            if i in cuts:
                leaving[i] += now.counts[i] - marker_tokens(cuts[i])
            self._evicted[i] = self._evicted[i + 1] + leaving[i]
            shown = 0 if i in drop else now.shown(i, replace)
            self._after[i] = self._after[i + 1] + shown + stubs.get(i, 0)
        self._before = [0] * (n + 1)
        self._stubs_before = [0] * (n + 1)
        for i in range(n):
            self._before[i + 1] = self._before[i] + (0 if i in now.drop else now.shown(i))
            self._stubs_before[i + 1] = self._stubs_before[i] + stubs_now.get(i, 0)
        self._late_stubs = sum(t for i, t in stubs.items() if i >= n)
        self._head = head_refill

    def at(self, cut: int) -> tuple[int, int, int]:
        """(E, A, prompt) when the new plan applies from `cut` on."""
        c = min(cut, self._n)
        refill = self._after[c]
        prompt = self._before[c] + self._stubs_before[c] + self._after[c] + self._late_stubs
        if self._head is not None:  # the tools change: everything is sent again
            refill += self._head + self._before[c]
            prompt += self._head
        return self._evicted[c], refill, prompt


def _recalled_tokens(segment: Any, counts: Sequence[int]) -> int:
    """What a recall of a segment's content brings back: its cut outputs, or all of it."""
    if segment.cuts:
        return sum(counts[segment.start + offset] for offset, _ in segment.cuts)
    return sum(counts[i] for i in range(segment.start, segment.end))
