"""The cost gate weighs every cut from running totals (`gate._Weights`, issue #49): the
same decision and cut, bit for bit, as weighing each cut by walking the whole history,
which is what it did before (kept here as the reference)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.lifecycle.evict import Segment
from tokenpilot.lifecycle.gate import (
    Rendering,
    _recalled_tokens,
    best_cut,
    marker_tokens,
    recall_risk_usd,
    should_evict,
)
from tokenpilot.pricing import Prices
from tokenpilot.tokens import message_tokens


class _Plan:
    def __init__(self, segments: list[Segment]) -> None:
        self.segments = segments


def _reference(
    plan: _Plan, now: Rendering, calls: int, head_refill: int | None, **kw: Any
) -> tuple[Any, int]:
    """Each cut weighed on its own, over the whole history (the gate before running totals)."""
    prices, profile, min_tokens, recall_risk = (
        kw["prices"],
        kw["profile"],
        kw["min_tokens"],
        kw["recall_risk"],
    )
    best, first, n = None, None, len(now.counts)
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
        if head_refill is not None:
            refill += head_refill + sum(now.shown(i) for i in range(cut) if i not in now.drop)
        risk = 0.0
        if recall_risk:
            prompt = sum(now.shown(i, replace) for i in range(n) if i not in drop)
            prompt += sum(stubbed.values()) + (head_refill or 0)
            bundles = [
                _recalled_tokens(s, now.counts) // len(s.reasons)
                for s in segs
                if s.reasons
                for _ in s.reasons
            ]
            risk = recall_risk_usd(bundles, prompt, recall_risk, prices, profile)
        whole = all(not s.reasons for s in segs)
        decision = should_evict(evicted, refill, calls, prices, profile, 0 if whole else min_tokens, risk)
        if first is None:
            first = (decision, cut)
        net = decision.saving_usd - decision.cost_usd
        if decision.evict and (best is None or net > best[0]):
            best = (net, decision, cut)
    return (best[1], best[2]) if best is not None else first


def _stub(k: int) -> dict[str, Any]:
    return {"role": "user", "content": f"[evicted {k}: recall_artifact('a{k}')] " + "x" * (k % 7)}


@st.composite
def _case(draw: Any) -> tuple[_Plan, Rendering, int | None]:
    n = draw(st.integers(4, 60))
    counts = draw(st.lists(st.integers(1, 4000), min_size=n, max_size=n))
    # the current plan: some dropped, some stubs, some outputs shown as markers
    now_drop = set(draw(st.lists(st.integers(0, n - 1), max_size=5)))
    now_stubs = {i: (_stub(i),) for i in draw(st.lists(st.integers(0, n), max_size=3))}
    now_replace = {
        i: f"[cut {i}]" for i in draw(st.lists(st.integers(0, n - 1), max_size=3)) if i not in now_drop
    }
    # the new plan: disjoint segments, in the order a walk over the turns makes them
    bounds = sorted(set(draw(st.lists(st.integers(0, n), min_size=2, max_size=12))))
    segments = []
    for a, b in zip(bounds, bounds[1:]):
        if b <= a or draw(st.booleans()):
            continue
        reasons = tuple(draw(st.sampled_from(["stale", "written"])) for _ in range(draw(st.integers(0, 2))))
        if draw(st.booleans()):
            offsets = sorted(set(draw(st.lists(st.integers(0, b - a - 1), min_size=1, max_size=3))))
            cuts = tuple((o, f"[marker {a + o}]") for o in offsets)
            segments.append(Segment(a, b, ("t",), (), f"a{a}", None, reasons, cuts))
        else:
            segments.append(Segment(a, b, ("t",), (), f"a{a}", _stub(a), reasons))
    if not segments:
        segments.append(Segment(0, 1, ("t",), (), "a0", _stub(0)))
    head = draw(st.one_of(st.none(), st.integers(0, 20000)))
    return _Plan(segments), Rendering(counts, now_drop, now_stubs, now_replace), head


@settings(max_examples=300, deadline=None)
@given(
    _case(), st.integers(1, 40), st.sampled_from([0.0, 0.05, 0.3]), st.sampled_from(["openai", "anthropic"])
)
def test_running_totals_decide_as_each_cut_weighed_alone(case, calls, risk, profile) -> None:
    plan, now, head = case
    kw = {"prices": Prices(), "profile": profile, "min_tokens": 500, "recall_risk": risk}
    got = best_cut(plan, now, calls, head, **kw)
    want = _reference(plan, now, calls, head, **kw)
    assert got[1] == want[1]
    assert got[0] == want[0]


def test_overlapping_segments_are_refused_with_their_ranges() -> None:
    plan = _Plan([Segment(0, 5, ("t",), (), "a", _stub(0)), Segment(3, 8, ("u",), (), "b", _stub(3))])
    now = Rendering([10] * 8, set(), {}, {})
    with pytest.raises(ValueError, match=r"\[0, 5\) and \[3, 8\)"):
        best_cut(plan, now, 5, None, prices=Prices(), profile="openai", min_tokens=0, recall_risk=0.0)
