"""A lifecycle's segments and gate decisions are exported sealed (made once, reused by the
journal at each save): every save cuts the same head and chunks as plain dicts would, and
a segment that changes is exported anew."""

from __future__ import annotations

import tempfile
from typing import Any

from drills.crashdrill import TOOLS, system_prompt, tool_turn
from tokenpilot import TokenPilot
from tokenpilot.lifecycle.evict import Segment
from tokenpilot.lifecycle.plan import Planner
from tokenpilot.lifecycle.segments import SegmentRules
from tokenpilot.lifecycle.settings import LifecycleConfig
from tokenpilot.messages.turns import TurnSegmenter
from tokenpilot.store import journal
from tokenpilot.store.journal import Sealed


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _parts(data: dict[str, Any]) -> tuple[str, dict[str, str]]:
    got = journal.split(data)
    return got.body, got.chunks


def test_a_session_with_evictions_splits_as_plain_dicts_at_every_save() -> None:
    # The gate on re-prefill alone: this short drill's cuts do not pay for a recall risk.
    # The gate on re-prefill alone, and stale outputs with no file changed since: this
    # drill only runs commands, and it needs evictions to seal.
    cfg = LifecycleConfig(recall_risk=0.0, segments=SegmentRules(stale_after_action=False))
    tp = TokenPilot(store=tempfile.mkdtemp(), lifecycle=cfg)
    hist: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt("2026-12-02")},
        {"role": "user", "content": "case 0"},
    ]
    sealed_seen = 0
    for step in range(45):
        hist.extend(tool_turn(0, step))
        tp.prepare(hist, tools=TOOLS, session_id="s")
        state = tp.export_session("s")
        lc = state["lifecycle"]
        sealed_seen += sum(type(x) is Sealed for x in lc["segments"] + lc["stats"]["gate_decisions"])
        for _ in range(2):  # the second save answers from the memo
            assert _parts(state) == _parts(_plain(state))
    assert tp.lifecycle_stats("s")["evictions"] > 0 and sealed_seen > 0


def test_a_changed_segment_is_exported_anew() -> None:
    plan = Planner(LifecycleConfig(), lambda text: "art_x", {}, TurnSegmenter())
    first = Segment(2, 5, ("t_a",), ("task",), "art_1", {"role": "user", "content": "stub"})
    plan.segments = [first]
    assert plan.segment_exports() == [first.to_dict()]
    moved = Segment(4, 7, ("t_a",), ("task",), "art_1", {"role": "user", "content": "stub"})
    plan.segments = [moved]  # in its place, as follow_rewrite relocates one
    assert plan.segment_exports() == [moved.to_dict()]
    plan.segments = [moved, first]
    assert plan.segment_exports() == [moved.to_dict(), first.to_dict()]
    assert len(plan._exports) == 2
