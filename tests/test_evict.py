"""Eviction plans: whole bundles only, recallable stubs, provider pairing rules, cost gate."""

from __future__ import annotations

import json
import re

import pytest
from builders import DictArchive
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot._canonical import canonical_json
from tokenpilot.lifecycle.evict import plan_eviction, render
from tokenpilot.lifecycle.gate import Prices, expected_remaining_calls, should_evict
from tokenpilot.messages.pairing import validate_pairing
from tokenpilot.messages.turns import segment_turns
from tokenpilot.registry import TaskRegistry
from tokenpilot.store.artifacts import ArtifactStore

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def tc(cid: str, name: str = "read", args: dict | None = None) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args or {})}}


def registry_for(turn_ids: list[str], tasks: list[tuple[str, str, list[int]]]) -> TaskRegistry:
    """tasks: (task_id, lifecycle, turn indices)."""
    return TaskRegistry.from_dict(
        {
            "version": 1,
            "turns": turn_ids,
            "tasks": [
                {
                    "taskId": tid,
                    "title": f"title of {tid}",
                    "objective": f"objective of {tid}",
                    "lifecycle": life,
                    "coveredTurnAbsIds": [turn_ids[i] for i in idx],
                    "completionEvidence": ["wrote out.md"] if life in ("completed", "evictable") else [],
                }
                for tid, life, idx in tasks
            ],
        }
    )


def sample_session() -> list[dict]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task one: read a and b"},  # 1   turn 0: 1-4
        {"role": "assistant", "content": None, "tool_calls": [tc("c1"), tc("c2")]},
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "assistant", "content": "done one"},  # 5   turn 1: 5
        {"role": "user", "content": "task two"},  # 6   turn 2: 6-8
        {"role": "assistant", "content": None, "tool_calls": [tc("c3")]},
        {"role": "tool", "tool_call_id": "c3", "content": "C"},
        {"role": "assistant", "content": "done two"},  # 9   turn 3: 9
        {"role": "user", "content": "task three"},  # 10  turn 4: 10-11
        {"role": "assistant", "content": "working"},
    ]


# ---------------------------------------------------------------------------
# validate_pairing
# ---------------------------------------------------------------------------


def test_validate_pairing_accepts_valid_and_names_each_problem():
    msgs = sample_session()
    assert validate_pairing(msgs) == []
    missing = [m for i, m in enumerate(msgs) if i != 3]
    assert any("'c2' has no result" in p for p in validate_pairing(missing))
    orphan = [m for i, m in enumerate(msgs) if i != 2]
    assert any("does not follow an assistant" in p for p in validate_pairing(orphan))
    late = msgs[:3] + msgs[4:5] + [{"role": "user", "content": "hi"}] + msgs[3:4] + msgs[5:]
    problems = validate_pairing(late)
    assert any("'c2' has no result" in p for p in problems)
    dup = msgs + [{"role": "assistant", "content": None, "tool_calls": [tc("c1")]}]
    dup.append({"role": "tool", "tool_call_id": "c1", "content": "again"})
    assert any("used twice" in p for p in validate_pairing(dup))
    twice = msgs[:5] + [{"role": "tool", "tool_call_id": "c1", "content": "A2"}] + msgs[5:]
    assert any("second result" in p for p in validate_pairing(twice))
    bad_args = json.loads(json.dumps(msgs))
    bad_args[7]["tool_calls"][0]["function"]["arguments"] = "{not json"
    assert any("not a JSON object" in p for p in validate_pairing(bad_args))
    assistant_first = [msgs[0]] + msgs[5:]
    assert any("not 'user'" in p for p in validate_pairing(assistant_first))
    assert any("unknown role" in p for p in validate_pairing(msgs + [{"role": "robot", "content": "x"}]))


# ---------------------------------------------------------------------------
# plan_eviction
# ---------------------------------------------------------------------------


def test_evicts_whole_bundles_with_recallable_stub():
    msgs = sample_session()
    turns = segment_turns(msgs)
    ids = [t.turn_id for t in turns]
    reg = registry_for(ids, [("A", "evictable", [0, 1]), ("B", "completed", [2, 3]), ("C", "active", [4])])
    store = ArtifactStore()
    plan = plan_eviction(msgs, turns, reg, archive=lambda text: store.put("s1", text))
    assert plan.evicted == frozenset(range(1, 6))
    (seg,) = plan.segments
    assert (seg.start, seg.end, seg.task_ids) == (1, 6, ("A",))
    content = seg.stub["content"]
    assert seg.stub["role"] == "user" and "\n" not in content
    assert content.startswith('[tokenpilot: evicted task "title of A" (wrote out.md), messages 1..5; ')
    assert f'recall_artifact(artifact_id="{seg.artifact_id}") returns them]' in content
    recalled = store.recall("s1", seg.artifact_id)
    assert recalled.found and json.loads(recalled.text) == msgs[1:6]
    assert recalled.text == canonical_json(msgs[1:6])
    out = plan.apply(msgs)
    assert out == [msgs[0], seg.stub] + msgs[6:]
    assert validate_pairing(out) == []


def test_a_retired_bundle_of_parallel_calls_names_each_result_with_its_own_recall():
    """Two reads in one assistant message, retired by a rule: the stub names each result
    with an id that recalls that result alone, so a recall re-sends only the file needed."""
    msgs = sample_session()
    msgs[2]["tool_calls"] = [tc("c1", "read", {"file_path": "a.py"}), tc("c2", "read", {"file_path": "b.py"})]
    turns = segment_turns(msgs)
    archive = DictArchive()
    plan = plan_eviction(
        msgs, turns, TaskRegistry(), archive=archive, bundles={0: "stale output: not used for 8 turns"}
    )
    (seg,) = plan.segments
    content = seg.stub["content"]
    ids = {m.group(1): m.group(2) for m in re.finditer(r"read (\S+) = (art_[0-9a-f]+)", content)}
    assert set(ids) == {"a.py", "b.py"}, content
    assert json.loads(archive.data[ids["a.py"]]) == [msgs[4]]  # c1's result, wherever it stands
    assert json.loads(archive.data[ids["b.py"]]) == [msgs[3]]
    assert json.loads(archive.data[seg.artifact_id]) == msgs[2:5]  # and the whole bundle at once
    assert content.startswith("[tokenpilot: evicted 2 tool result(s) not named for 5+ turns: read ")


def test_live_shared_last_and_current_batch_are_kept():
    msgs = sample_session()
    turns = segment_turns(msgs)
    ids = [t.turn_id for t in turns]
    archive = DictArchive()
    # Turn 1 shared by evictable A and live B: kept (and A's turn 0 goes alone).
    reg = registry_for(ids, [("A", "evictable", [0, 1]), ("B", "completed", [1, 2, 3]), ("C", "active", [4])])
    plan = plan_eviction(msgs, turns, reg, archive=archive)
    assert plan.evicted == frozenset(range(1, 5))
    # Everything evictable: the last turn still stays.
    reg = registry_for(ids, [("A", "evictable", [0, 1, 2, 3]), ("Z", "evictable", [4])])
    assert plan_eviction(msgs, turns, reg, archive=archive).evicted == frozenset(range(1, 10))
    # A task goes in one piece: one that owns the last turn waits entirely.
    reg = registry_for(ids, [("A", "evictable", [0, 1, 2, 3, 4])])
    assert plan_eviction(msgs, turns, reg, archive=archive).evicted == frozenset()
    # The current batch (from message 7 on) stays, and with it all of B.
    reg = registry_for(ids, [("A", "evictable", [0, 1]), ("B", "evictable", [2, 3]), ("C", "active", [4])])
    assert plan_eviction(msgs, turns, reg, archive=archive, keep_from=7).evicted == frozenset(range(1, 6))
    assert plan_eviction(msgs, turns, reg, archive=archive, keep_from=10).evicted == frozenset(range(1, 10))
    # Unowned turns stay.
    reg = registry_for(ids, [("A", "evictable", [2])])
    assert plan_eviction(msgs, turns, reg, archive=archive).evicted == frozenset(range(6, 9))
    # Blocked / active / completed are never evicted.
    for life in ("active", "blocked", "completed"):
        reg = registry_for(ids, [("A", life, [0, 1, 2, 3])])
        assert plan_eviction(msgs, turns, reg, archive=archive).evicted == frozenset()


def test_segments_split_per_task_and_never_merge_with_earlier_evictions():
    msgs = sample_session()
    turns = segment_turns(msgs)
    ids = [t.turn_id for t in turns]
    archive = DictArchive()
    reg = registry_for(ids, [("A", "evictable", [0, 1]), ("B", "evictable", [2, 3]), ("C", "active", [4])])
    plan = plan_eviction(msgs, turns, reg, archive=archive)
    assert [(s.start, s.end, s.task_ids) for s in plan.segments] == [(1, 6, ("A",)), (6, 10, ("B",))]
    # With A already evicted earlier, only B is planned, as its own segment.
    again = plan_eviction(msgs, turns, reg, archive=archive, already_evicted=frozenset(range(1, 6)))
    assert [(s.start, s.end) for s in again.segments] == [(6, 10)]


def test_tool_call_links_across_turns_are_evicted_together_or_not_at_all():
    msgs = sample_session()
    # A malformed history where turn 2's tool result also answers c1 of turn 0.
    msgs[8] = {"role": "tool", "tool_call_id": "c1", "content": "C"}
    msgs[7] = {"role": "assistant", "content": None, "tool_calls": [tc("c1")]}
    turns = segment_turns(msgs)
    ids = [t.turn_id for t in turns]
    reg = registry_for(ids, [("A", "evictable", [0, 1]), ("B", "active", [2, 3, 4])])
    assert plan_eviction(msgs, turns, reg, archive=DictArchive()).evicted == frozenset({5})


def test_no_stub_mode_keeps_a_user_message_first():
    msgs = sample_session()
    turns = segment_turns(msgs)
    ids = [t.turn_id for t in turns]
    reg = registry_for(ids, [("A", "evictable", [0]), ("B", "active", [1, 2, 3, 4])])
    # Evicting turn 0 alone would leave assistant message 5 first: not allowed without a stub.
    assert plan_eviction(msgs, turns, reg, stub=False, archive=DictArchive()).evicted == frozenset()
    with_stub = plan_eviction(msgs, turns, reg, stub=True, archive=DictArchive())
    assert with_stub.evicted == frozenset(range(1, 5))
    assert validate_pairing(with_stub.apply(msgs)) == []
    reg = registry_for(ids, [("A", "evictable", [0, 1]), ("B", "active", [2, 3, 4])])
    plan = plan_eviction(msgs, turns, reg, stub=False, archive=DictArchive())
    assert plan.evicted == frozenset(range(1, 6)) and plan.stubs == {}
    assert plan.apply(msgs) == [msgs[0]] + msgs[6:]


def test_incomplete_turn_is_never_evicted():
    msgs = sample_session()[:3]  # c1, c2 without results
    msgs += [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    turns = segment_turns(msgs)
    assert not turns[0].complete
    reg = registry_for([t.turn_id for t in turns], [("A", "evictable", [0]), ("B", "active", [1])])
    assert plan_eviction(msgs, turns, reg, archive=DictArchive()).evicted == frozenset()


# ---------------------------------------------------------------------------
# property: random sessions, random registries, pairing always holds
# ---------------------------------------------------------------------------


@st.composite
def sessions(draw):
    n_turns = draw(st.integers(1, 12))
    msgs: list[dict] = [{"role": "system", "content": "sys"}]
    k = 0
    for t in range(n_turns):
        if t == 0 or draw(st.booleans()):
            msgs.append({"role": "user", "content": f"u{t}"})
        n_calls = draw(st.integers(0, 3))
        if n_calls == 0:
            msgs.append({"role": "assistant", "content": f"a{t}"})
            continue
        ids = []
        for _ in range(n_calls):
            k += 1
            ids.append(f"call_{k}")
        msgs.append({"role": "assistant", "content": None, "tool_calls": [tc(i, args={"n": i}) for i in ids]})
        order = draw(st.permutations(ids))
        msgs.extend({"role": "tool", "tool_call_id": i, "content": f"r{i}"} for i in order)
    return msgs


@st.composite
def registries(draw, n_turns: int):
    lifecycles = st.sampled_from(["active", "blocked", "completed", "evictable"])
    tasks = []
    i = 0
    n = 0
    while i < n_turns:
        size = draw(st.integers(1, 4))
        idx = list(range(i, min(n_turns, i + size)))
        if draw(st.booleans()) and i > 0:
            idx = [i - 1, *idx]  # share the previous task's last turn
        if draw(st.integers(0, 5)) > 0:  # sometimes leave turns unowned
            tasks.append((f"T{n}", draw(lifecycles), idx))
        n += 1
        i += size
    return tasks


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_property_pairing_holds_after_every_purge(data):
    msgs = data.draw(sessions())
    assert validate_pairing(msgs) == []
    turns = segment_turns(msgs)
    ids = [t.turn_id for t in turns]
    archive = DictArchive()
    stub = data.draw(st.booleans())
    drop: set[int] = set()
    stubs: dict[int, tuple] = {}
    for _round in range(2):  # cumulative, like the lifecycle
        reg = registry_for(ids, data.draw(registries(len(turns))))
        keep_from = data.draw(st.one_of(st.none(), st.integers(0, len(msgs))))
        plan = plan_eviction(
            msgs, turns, reg, stub=stub, archive=archive, keep_from=keep_from, already_evicted=drop
        )
        assert not (plan.evicted & drop)
        owners = reg.turn_owners()
        by_id = {t.task_id: t for t in reg.tasks}
        for t_i, turn in enumerate(turns):
            span = set(range(turn.start, turn.end))
            inside = span & plan.evicted
            assert not inside or inside == span  # whole turns only
            if inside:
                own = owners.get(turn.turn_id, [])
                assert own and all(by_id[o].lifecycle == "evictable" for o in own)
                assert t_i != len(turns) - 1
                assert keep_from is None or turn.end <= keep_from
                for o in own:  # the task goes in one piece
                    for other in by_id[o].turn_ids:
                        k = ids.index(other)
                        assert k != len(turns) - 1 and (keep_from is None or turns[k].end <= keep_from)
        for seg in plan.segments:
            assert json.loads(archive.data[seg.artifact_id]) == msgs[seg.start : seg.end]
            if stub:
                assert seg.artifact_id in seg.stub["content"]
        drop |= plan.evicted
        stubs.update(plan.stubs)
        out = render(msgs, drop, stubs)
        assert validate_pairing(out) == [], (out, validate_pairing(out))


# ---------------------------------------------------------------------------
# cost gate
# ---------------------------------------------------------------------------


def test_cost_gate_compares_saving_with_one_time_reprefill():
    d = should_evict(10_000, 2_000, 5)
    # saving 10k * 0.075 * 5 = 3750e-6 $; cost 2k * 0.675 = 1350e-6 $
    assert d.evict and d.saving_usd == pytest.approx(0.00375) and d.cost_usd == pytest.approx(0.00135)
    assert (d.evicted_tokens, d.tokens_after_cut, d.expected_remaining_calls) == (10_000, 2_000, 5)
    assert (d.p_hit, d.p_miss) == (0.075, 0.75)
    no = should_evict(1_000, 50_000, 5)
    assert not no.evict and "re-prefill" in no.reason
    assert not should_evict(0, 0, 100).evict
    # Equal-ish prices make any cut cheap.
    assert should_evict(1_000, 50_000, 5, Prices(hit=0.1, miss=0.1)).evict
    assert set(d.to_dict()) >= {"evict", "evictedTokens", "tokensAfterCut", "savingUsd", "costUsd", "reason"}


def test_expected_remaining_calls_is_a_fifth_of_the_calls_so_far_min_three():
    assert expected_remaining_calls(0) == 3
    assert expected_remaining_calls(2) == 3
    assert expected_remaining_calls(40) == 8
    assert expected_remaining_calls(40, ratio=0.5) == 20
    assert expected_remaining_calls(1, minimum=5) == 5


def test_cost_gate_prices_a_reprefill_as_the_profiles_cache_write_and_has_a_minimum():
    openai = should_evict(10_000, 2_000, 5)
    anthropic = should_evict(10_000, 2_000, 5, profile="anthropic")
    assert anthropic.cost_usd == pytest.approx(2_000 * (0.75 * 1.25 - 0.075) / 1e6)
    assert anthropic.cost_usd > openai.cost_usd
    small = should_evict(4_000, 0, 100, min_tokens=5_000)
    assert not small.evict and "not worth a cache break" in small.reason
    assert should_evict(6_000, 0, 100, min_tokens=5_000).evict
    assert expected_remaining_calls(40, ratio=0.25) == 10


def test_recall_risk_prices_one_round_trip_per_bundle_times_the_reuse_share():
    from tokenpilot.lifecycle.gate import RECALL_CALL_TOKENS, recall_risk_usd

    p = Prices()
    trip = 50_000 * p.hit + RECALL_CALL_TOKENS * p.output
    want = 0.1 * ((trip + 2_000 * p.miss) + (trip + 8_000 * p.miss)) / 1e6
    assert recall_risk_usd([2_000, 8_000], 50_000, 0.1, p) == pytest.approx(want)
    assert recall_risk_usd([2_000], 50_000, 0.0, p) == 0.0
    assert recall_risk_usd([], 50_000, 0.5, p) == 0.0
    # Anthropic writes the recalled text at 1.25x
    assert recall_risk_usd([8_000], 0, 1.0, p, "anthropic") > recall_risk_usd([8_000], 0, 1.0, p, "openai")


def test_should_evict_weighs_the_recall_risk_with_the_re_prefill():
    base = should_evict(20_000, 10_000, 10)
    assert base.evict and base.risk_usd == 0.0
    margin = base.saving_usd - base.cost_usd
    risky = should_evict(20_000, 10_000, 10, risk_usd=margin * 1.01)
    assert not risky.evict and "recall risk" in risky.reason and risky.to_dict()["riskUsd"] > 0
    assert should_evict(20_000, 10_000, 10, risk_usd=margin * 0.99).evict


def test_a_deferred_stale_stub_keeps_its_text_from_batch_to_batch() -> None:
    """The count in a stale stub steps on 1, 2, 5 × 10^k, so the stub of a bundle the gate
    keeps deferring is the same text at the next batch (its tokens are remembered by text)
    and stays true ("at least")."""
    from tokenpilot.lifecycle.stubs import segment_stub_text

    def label(turns: int) -> str:
        text = segment_stub_text([(f"stale output: not used for {turns} turns", "read a.py")], 3, 5, "art_x")
        return text.split("not named for ")[1].split(" turns")[0]

    assert [label(n) for n in (1, 4, 5, 9, 10, 19, 20, 49, 50, 117, 199, 200, 999, 1000)] == [
        "1+", "2+", "5+", "5+", "10+", "10+", "20+", "20+", "50+", "100+", "100+", "200+", "500+", "1000+",
    ]  # fmt: skip
    assert label(113) == label(117) == label(140)
