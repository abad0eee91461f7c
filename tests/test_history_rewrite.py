"""A caller that rewrites its own history (a compaction, a condenser, elided observations):
the new history is the new base; evicted segments stay evicted where their turns went,
nothing is shown again, and it is logged at INFO and counted, never warned (issue #26)."""

from __future__ import annotations

import logging

from builders import DictArchive, Session

from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.lifecycle.schedule import Lifecycle, LifecycleConfig
from tokenpilot.messages.turns import segment_turns


def _tasks(n: int) -> Session:
    s = Session()
    for i in range(n):
        s.user(f"Write report_{i}.md from input_{i}.dat")
        s.call("read", {"path": f"input_{i}.dat"}, f"row {i}\n" * 200)
        s.call("write", {"path": f"report_{i}.md", "content": "..."}, "ok")
        s.final(f"Wrote report_{i}.md.")
    return s


def _evicting(**more) -> Lifecycle:
    # The reads here name nothing (`row 3` 200 times), which the tail rules would cut at
    # once: off, so the tasks' segments are what moves (a tail cut's: its own test below).
    cfg = LifecycleConfig(batch_turns=3, schedule="inline", cost_gate=False, **{"tail": None, **more})
    return Lifecycle(cfg, None, DictArchive())


def _drive(lc: Lifecycle, s: Session) -> None:
    for p in [*s.points, len(s.msgs)]:
        lc.observe(s.msgs[:p])
        lc.view(s.msgs[:p])


def test_a_compaction_keeps_later_segments_evicted_at_their_new_place(caplog):
    s = _tasks(5)
    lc = _evicting()
    _drive(lc, s)
    assert len(lc.segments) >= 2
    first = lc.segments[0]
    # The caller replaces everything before the second segment with one summary message.
    second = lc.segments[1]
    summary = {"role": "user", "content": "Summary of the earlier work: reports written."}
    ack = {"role": "assistant", "content": "Understood."}
    compacted = [s.msgs[0], summary, ack, *s.msgs[second.start :]]
    shift = second.start - 3
    with caplog.at_level(logging.INFO, logger="tokenpilot"):
        plan = lc.view(compacted)
    out = plan.apply(compacted)
    assert validate_pairing(out) == []
    moved = lc.segments[0]
    assert (moved.start, moved.end, moved.turn_ids) == (
        second.start - shift,
        second.end - shift,
        second.turn_ids,
    )
    assert set(range(moved.start, moved.end)) <= plan.drop
    for i in range(moved.start, moved.end):  # none of the evicted content is shown again
        assert compacted[i] not in out
    assert first.turn_ids[0] not in {t for seg in lc.segments for t in seg.turn_ids}
    assert lc.stats["history_rewrites"] == 1 and lc.stats["segments_remapped"] == len(lc.segments)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("history rewritten by the caller" in r.getMessage() for r in caplog.records)


def test_an_elided_tool_result_in_place_keeps_the_plan():
    """SWE-agent's observation masking rewrites an old result's text in place: the turn
    ids (which leave results out) are the same, so the plan does not move."""
    s = _tasks(4)
    lc = _evicting()
    _drive(lc, s)
    before = lc.view(s.msgs)
    assert before.drop
    elided = [dict(m) for m in s.msgs]
    kept = [t for t in segment_turns(elided) if not set(range(t.start, t.end)) & before.drop]
    tool = next(i for t in kept for i in range(t.start, t.end) if elided[i]["role"] == "tool")
    elided[tool] = {**elided[tool], "content": "Old environment output: (200 lines omitted)"}
    after = lc.view(elided)
    assert after.drop == before.drop and after.version == before.version
    assert lc.stats["history_rewrites"] == 0


def test_a_history_that_drops_the_middle_of_a_segment_forgets_it_without_splitting_tool_groups():
    s = _tasks(5)
    lc = _evicting()
    _drive(lc, s)
    seg = lc.segments[0]
    assert len(seg.turn_ids) > 1
    turns = {t.turn_id: t for t in segment_turns(s.msgs)}
    cut = turns[seg.turn_ids[1]]
    rewritten = s.msgs[: cut.start] + s.msgs[cut.end :]
    plan = lc.view(rewritten)
    assert seg.turn_ids[0] not in {t for g in lc.segments for t in g.turn_ids}
    assert validate_pairing(plan.apply(rewritten)) == []


def test_an_output_cut_at_the_tail_stays_cut_at_its_new_place_after_a_compaction():
    """A segment cut in place moves with its turn: after the caller drops the turns before
    it, the output still shows its marker and its call stays as written."""
    from tokenpilot.lifecycle.tail import TailRules

    s = _tasks(3)
    lc = _evicting(tail=TailRules(), segments=None, window=None)
    _drive(lc, s)
    cuts = [seg for seg in lc.segments if seg.cuts]
    assert cuts, "the reads that name nothing are cut at the tail"
    last = cuts[-1]
    keep_from = min(t.start for t in segment_turns(s.msgs) if t.turn_id == last.turn_ids[0])
    summary = [
        {"role": "user", "content": "Summary of the earlier work."},
        {"role": "assistant", "content": "Ok."},
    ]
    compacted = [*summary, *s.msgs[keep_from:]]
    shift = keep_from - 2
    plan = lc.view(compacted)
    moved = next(seg for seg in lc.segments if seg.turn_ids == last.turn_ids)
    assert (moved.start, moved.end, moved.cuts) == (last.start - shift, last.end - shift, last.cuts)
    out = plan.apply(compacted)
    assert validate_pairing(out) == []
    ((offset, marker),) = moved.cuts
    assert out[moved.start + offset]["content"] == marker
    assert out[moved.start] == compacted[moved.start]  # the call as written
