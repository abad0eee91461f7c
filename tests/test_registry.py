"""The task registry: valid transitions only, versioned deltas, round-trip."""

from __future__ import annotations

import json
import logging

from tokenpilot.registry import Task, TaskRegistry

TURNS = [f"t_{i:012x}" for i in range(10)]


def reg_with_turns(n: int = 6) -> TaskRegistry:
    reg = TaskRegistry()
    reg.note_turns(TURNS[:n])
    return reg


def delta(base: int, *updates: dict) -> dict:
    return {"baseVersion": base, "taskUpdates": list(updates)}


def upd(task_id: str, lifecycle: str = "active", **kw) -> dict:
    return {
        "taskId": task_id,
        "objective": kw.pop("objective", f"do {task_id}"),
        "lifecycle": lifecycle,
        **kw,
    }


def two_tasks(reg: TaskRegistry) -> None:
    """A: turns 0-1 completed; B: turns 2-3 active."""
    r = reg.apply(
        delta(
            reg.version,
            upd("A", "completed", coveredTurnAbsIds=TURNS[:2], completionEvidence=["wrote a.md"]),
            upd("B", coveredTurnAbsIds=TURNS[2:4]),
        )
    )
    assert not r.rejected and not r.dropped


def test_create_task_with_turns_and_reject_unknown_parts(caplog):
    reg = reg_with_turns()
    caplog.set_level(logging.INFO, "tokenpilot")
    r = reg.apply(
        delta(
            0,
            upd("A", coveredTurnAbsIds=[TURNS[0], "t_nope"], title="Task A", bogus=1),
            upd("ghost"),  # unknown task without turns
            {"objective": "no id"},
            "not an object",
        )
    )
    assert reg.version == 1 and r.version_after == 1 and r.changed_tasks == ["A"]
    a = reg.get("A")
    assert a is not None and a.turn_ids == [TURNS[0]] and a.title == "Task A"
    parts = {(x.task_id, x.part) for x in r.rejected}
    assert ("A", "turn t_nope") in parts and ("A", "bogus") in parts and ("ghost", "update") in parts
    assert len(r.rejected) == 5
    assert reg.get("ghost") is None
    assert "unknown turn id" in caplog.text and "ghost" in caplog.text


def test_completed_needs_evidence_in_update_or_recorded():
    reg = reg_with_turns()
    reg.apply(delta(0, upd("A", coveredTurnAbsIds=TURNS[:1])))
    r = reg.apply(delta(1, upd("A", "completed")))
    assert (
        reg.get("A").lifecycle == "active" and r.rejected[0].reason == "completed needs completion evidence"
    )
    assert reg.version == 1  # nothing changed
    reg.apply(delta(1, upd("A", "completed", completionEvidence=["final answer given"])))
    assert reg.get("A").lifecycle == "completed"
    reg.apply(delta(2, upd("A", "active")))  # reopened
    r = reg.apply(delta(3, upd("A", "completed")))  # evidence already recorded
    assert not r.rejected and reg.get("A").lifecycle == "completed"


def test_evictable_rules():
    reg = reg_with_turns()
    reg.apply(delta(0, upd("A", coveredTurnAbsIds=TURNS[:2])))
    # Not moved on: A is the only task.
    r = reg.apply(delta(1, upd("A", "evictable", completionEvidence=["done"])))
    assert reg.get("A").lifecycle == "active"
    assert any("moved on" in x.reason for x in r.rejected)
    # Evidence was still recorded (valid part).
    assert reg.get("A").completion_evidence == ["done"]
    # Active -> evictable needs evidence in the same update, even once moved on.
    reg.apply(delta(reg.version, upd("B", coveredTurnAbsIds=TURNS[2:3])))
    r = reg.apply(delta(reg.version, upd("A", "evictable")))
    assert reg.get("A").lifecycle == "active" and "same update" in r.rejected[0].reason
    # Open questions block eviction.
    r = reg.apply(
        delta(reg.version, upd("A", "evictable", completionEvidence=["done"], unresolvedQuestions=["which?"]))
    )
    assert reg.get("A").lifecycle == "active" and "unresolved" in r.rejected[0].reason
    r = reg.apply(
        delta(reg.version, upd("A", "evictable", completionEvidence=["done"], unresolvedQuestions=[]))
    )
    assert not r.rejected and reg.get("A").lifecycle == "evictable"


def test_evictable_in_the_same_delta_that_creates_the_newer_task():
    reg = reg_with_turns()
    reg.apply(delta(0, upd("A", "completed", coveredTurnAbsIds=TURNS[:2], completionEvidence=["ok"])))
    r = reg.apply(
        delta(1, upd("A", "evictable", evictableReason="unrelated"), upd("B", coveredTurnAbsIds=TURNS[2:3]))
    )
    assert not r.rejected
    assert reg.get("A").lifecycle == "evictable" and reg.get("A").evictable_reason == "unrelated"


def test_blocked_completed_evictable_without_evidence_rejected():
    reg = reg_with_turns()
    two_tasks(reg)
    reg.apply(delta(reg.version, upd("B", "blocked", unresolvedQuestions=["which file?"])))
    assert reg.get("B").lifecycle == "blocked"
    reg.apply(delta(reg.version, upd("C", coveredTurnAbsIds=TURNS[4:5])))
    r = reg.apply(delta(reg.version, upd("B", "evictable")))
    assert reg.get("B").lifecycle == "blocked" and r.rejected


def test_resume_evictable_only_with_later_turn():
    reg = reg_with_turns()
    two_tasks(reg)
    reg.apply(delta(reg.version, upd("A", "evictable")))
    assert reg.get("A").lifecycle == "evictable"
    r = reg.apply(delta(reg.version, upd("A", "active")))
    assert reg.get("A").lifecycle == "evictable" and "later turn" in r.rejected[0].reason
    r = reg.apply(delta(reg.version, upd("A", "blocked")))
    assert reg.get("A").lifecycle == "evictable" and r.rejected
    # Another task cannot claim a turn of the evictable task.
    r = reg.apply(delta(reg.version, upd("B", coveredTurnAbsIds=[TURNS[0]])))
    assert TURNS[0] not in reg.get("B").turn_ids and "evictable task" in r.rejected[0].reason
    # An earlier turn does not resume it.
    r = reg.apply(delta(reg.version, upd("A", "active", coveredTurnAbsIds=[TURNS[1]])))
    assert reg.get("A").lifecycle == "evictable"
    # A later turn does.
    r = reg.apply(delta(reg.version, upd("A", "active", coveredTurnAbsIds=[TURNS[4]])))
    assert reg.get("A").lifecycle == "active" and reg.get("A").turn_ids == [*TURNS[:2], TURNS[4]]
    # Resumed while the update still says evictable: live again, evictable part rejected.
    reg.apply(delta(reg.version, upd("A", "completed")))
    reg.apply(delta(reg.version, upd("B", coveredTurnAbsIds=[TURNS[5]])))
    reg.apply(delta(reg.version, upd("A", "evictable")))
    assert reg.get("A").lifecycle == "evictable"
    reg.note_turns([TURNS[6]])
    r = reg.apply(delta(reg.version, upd("A", "evictable", coveredTurnAbsIds=[TURNS[6]])))
    assert reg.get("A").lifecycle == "active" and r.rejected


def test_shared_turns_and_owners():
    reg = reg_with_turns()
    two_tasks(reg)
    reg.apply(delta(reg.version, upd("B", coveredTurnAbsIds=[TURNS[1]])))
    assert reg.turn_owners()[TURNS[1]] == ["A", "B"]
    assert reg.get("B").turn_ids == [TURNS[1], TURNS[2], TURNS[3]]


def test_field_types_and_unknown_fields_are_rejected_parts():
    reg = reg_with_turns()
    r = reg.apply(
        delta(
            0,
            {
                "taskId": "A",
                "objective": 3,
                "lifecycle": "done",
                "coveredTurnAbsIds": [TURNS[0]],
                "completionEvidence": "x",
                "status": "completed",
            },
        )
    )
    assert reg.get("A") is not None and reg.get("A").lifecycle == "active"
    assert {x.part for x in r.rejected} == {"objective", "lifecycle", "completionEvidence", "status"}


def test_malformed_deltas_are_dropped(caplog):
    reg = reg_with_turns()
    for bad in (None, [], {"taskUpdates": []}, {"baseVersion": "0", "taskUpdates": []}, {"baseVersion": 0}):
        r = reg.apply(bad)
        assert r.dropped and r.drop_reason
    assert reg.version == 0 and "dropped" in caplog.text
    r = reg.apply(delta(5, upd("A", coveredTurnAbsIds=[TURNS[0]])))
    assert r.dropped and "newer" in r.drop_reason and reg.get("A") is None


def test_noop_delta_keeps_version():
    reg = reg_with_turns()
    two_tasks(reg)
    v = reg.version
    r = reg.apply(delta(v, upd("B", coveredTurnAbsIds=TURNS[2:4])))
    assert not r.changed and reg.version == v


def test_stale_delta_rebased_when_touched_tasks_unchanged():
    reg = reg_with_turns()
    two_tasks(reg)  # version 1
    reg.apply(delta(1, upd("B", "completed", completionEvidence=["ok"])))  # version 2 touches B only
    r = reg.apply(delta(1, upd("A", "evictable")))  # computed at 1, touches A (unchanged since 1)
    assert r.rebased and not r.dropped and reg.get("A").lifecycle == "evictable" and reg.version == 3


def test_stale_delta_dropped_when_a_touched_task_changed():
    reg = reg_with_turns()
    two_tasks(reg)  # version 1
    reg.apply(delta(1, upd("B", "completed", completionEvidence=["ok"])))  # version 2
    r = reg.apply(delta(1, upd("B", "active", currentSubgoal="stale"), upd("A", "evictable")))
    assert r.dropped and "changed at version 2" in r.drop_reason
    assert reg.get("B").lifecycle == "completed" and reg.get("A").lifecycle == "completed"
    assert reg.version == 2
    # A stale creation of a task that someone else created meanwhile is dropped too.
    reg.apply(delta(2, upd("C", coveredTurnAbsIds=[TURNS[4]])))
    r = reg.apply(delta(2, upd("C", coveredTurnAbsIds=[TURNS[5]])))
    assert r.dropped and reg.get("C").turn_ids == [TURNS[4]]


def test_round_trip_is_json_safe_and_identical():
    reg = reg_with_turns()
    two_tasks(reg)
    reg.apply(delta(reg.version, upd("B", "blocked", unresolvedQuestions=["which?"], currentSubgoal="ask")))
    d = reg.to_dict()
    again = TaskRegistry.from_dict(json.loads(json.dumps(d)))
    assert again.to_dict() == d
    assert again.version == reg.version and again.turn_ids == reg.turn_ids
    # Identical behaviour afterwards, including versioned rebase decisions.
    follow = delta(1, upd("A", "evictable"))
    assert reg.apply(follow).rebased == again.apply(follow).rebased
    assert reg.to_dict() == again.to_dict()
    assert Task.from_dict(reg.get("B").to_dict()) == reg.get("B")


def test_pending_eviction_can_be_reprieved_to_completed():
    reg = reg_with_turns()
    two_tasks(reg)
    reg.apply(delta(reg.version, upd("A", "evictable")))
    r = reg.apply(delta(reg.version, upd("A", "completed")))
    assert not r.rejected and reg.get("A").lifecycle == "completed"
