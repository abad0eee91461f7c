"""Issue #26's per-session floors: once the agent wraps its work up (exports its change,
submits) and has changed no file since, the cost gate expects only its fewest remaining
calls (`segments.closing`): an eviction in a run's last calls never paid back
(mini-swe-agent django-14752 ended at 1.031x of vanilla)."""

from __future__ import annotations

from builders import DictArchive, Session
from shell_session import BIG, SRC, bash, records, working_on_a_file

from tokenpilot.estimator import OfflineEstimator
from tokenpilot.lifecycle.schedule import Lifecycle, LifecycleConfig
from tokenpilot.lifecycle.segments import SegmentRules, bundle_record, closing
from tokenpilot.messages.observations import closing_action
from tokenpilot.messages.turns import segment_turns


# ---------------------------------------------------------------------------
# the agent wrapping up: the gate expects its fewest calls
# ---------------------------------------------------------------------------
def test_closing_actions_are_declared_markers_of_actions():
    assert closing_action("bash", "cd /testbed && git diff -- django/x.py > patch.txt")
    assert closing_action("bash", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt")
    assert closing_action("submit", "{}")
    assert closing_action("observation", "submit")
    assert not closing_action("bash", "python -m pytest tests/test_diff.py")
    assert not closing_action("bash", "cat differ.py")


def test_closing_lasts_until_a_file_changes_or_the_person_speaks():
    s = working_on_a_file(1)
    bash(s, "git diff > patch.txt", "")
    assert closing(records(s))
    bash(s, "cat patch.txt", "diff --git a/x b/x")  # reviewing the patch: still closing
    assert closing(records(s))
    s.call("edit", {"path": SRC, "old": "a", "new": "b"}, "ok")  # back to work
    assert not closing(records(s))
    bash(s, "git diff", "diff --git a/x b/x")
    s.user("Thanks. Now add a test for it.")
    bash(s, "ls tests", "test_base.py")
    assert not closing(records(s))


def last_gate_decision(wrap_up: str) -> dict:
    """The cost gate's last decision on a session whose big read is superseded only after
    the agent ran `wrap_up` (then it reviews its patch, changing nothing)."""
    s = Session()
    s.user("Fix it.")
    bash(s, f"cat {SRC}", BIG * 5)  # turn 0
    for i in range(30):
        bash(s, f"python step_{i}.py", f"ok {i}")
    bash(s, wrap_up, "")
    bash(s, f"cat {SRC}", BIG * 5 + "\n# v2")  # supersedes turn 0
    for i in range(6):
        bash(s, f"head -{i + 1} patch.txt", "diff --git a/x b/x")
    cfg = LifecycleConfig(
        batch_turns=3,
        schedule="inline",
        min_evict_tokens=0,
        expected_calls_ratio=10.0,  # an eager gate: it evicts unless it expects few calls
        window=None,
        segments=SegmentRules(stale_after_turns=None),
    )
    lc = Lifecycle(cfg, OfflineEstimator(), DictArchive())
    for p in s.points:
        h = s.msgs[:p]
        lc.observe(h)
        lc.view(h)
    return lc.stats["gate_decisions"][-1]


def test_the_gate_expects_the_fewest_calls_once_the_agent_exports_its_change():
    closing_decision = last_gate_decision("git diff > patch.txt")
    working_decision = last_gate_decision("python -m pytest -q > out.txt")
    assert working_decision["evict"] and working_decision["expectedRemainingCalls"] > 3
    assert not closing_decision["evict"]
    assert closing_decision["expectedRemainingCalls"] == LifecycleConfig().expected_calls_min


def test_every_shared_mini_swe_agent_run_wraps_up_with_a_declared_closing_action():
    """On the shared recordings: each SWE-bench run's last action submits, and the first
    closing action comes late (the wrap-up is a run's last stretch, not its middle)."""
    from conftest import shared_path

    from tokenpilot.measure.traces import load

    runs = [s for s in load(str(shared_path("traces", "mini_swe_agent"))) if "django" in s.id]
    assert len(runs) >= 10
    for s in runs:
        recs = records_of(s.messages)
        closes = [i for i, r in enumerate(recs) if r.closes]
        assert closes and closes[-1] == len(recs) - 1, s.id
        assert closes[0] >= len(recs) * 0.7, s.id


def records_of(messages: list) -> list:
    return [bundle_record(messages, t) for t in segment_turns(messages)]
