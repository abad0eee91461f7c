"""The lifecycle scheduler: batches, one-pass evictions, background runs, restarts."""

from __future__ import annotations

import json
import threading
import time

import pytest
from builders import DictArchive, Session
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.errors import ConfigError
from tokenpilot.estimator import EstimatorView, OfflineEstimator
from tokenpilot.lifecycle.schedule import Lifecycle, LifecycleConfig, RenderPlan
from tokenpilot.messages.pairing import validate_pairing
from tokenpilot.messages.turns import segment_turns

TOPICS = [
    ("Write a haiku about autumn leaves into poem.txt", "poem.txt"),
    ("Compute the 30th Fibonacci number with fib.py", "fib.py"),
    ("Draft a packing checklist for the Iceland trip in packing.md", "packing.md"),
    ("Convert the sales figures in q3_sales.csv into a bar chart chart.png", "chart.png"),
    ("Translate the welcome letter into Spanish as carta.txt", "carta.txt"),
]


def unrelated_session(n_tasks: int = 5, big: int = 0) -> Session:
    """Independent one-shot tasks; `big` chars of tool output in each."""
    s = Session()
    for i in range(n_tasks):
        prompt, path = TOPICS[i % len(TOPICS)]
        s.user(prompt)
        s.call("read", {"path": f"input_{i}.dat"}, ("x" * big) or "data")
        s.call("write", {"path": path, "content": "..."}, "ok")
        s.final(f"Wrote {path}.")
    return s


class Counting:
    """Wraps an estimator; records each view it gets."""

    def __init__(self, inner=None, sleep: float = 0.0, fail: bool = False) -> None:
        self.inner = inner or OfflineEstimator()
        self.views: list[EstimatorView] = []
        self.sleep = sleep
        self.fail = fail

    def estimate(self, view: EstimatorView) -> dict:
        self.views.append(view)
        if self.sleep:
            time.sleep(self.sleep)
        if self.fail:
            raise RuntimeError("estimator down")
        return self.inner.estimate(view)


def make(batch=3, schedule="inline", cost_gate=False, stub=True, estimator=None, **more):
    cfg = LifecycleConfig(batch_turns=batch, schedule=schedule, cost_gate=cost_gate, stub=stub, **more)
    est = estimator or Counting()
    return Lifecycle(cfg, est, DictArchive()), est


def drive(lc: Lifecycle, s: Session, points=None):
    renders, versions = [], []
    for p in points if points is not None else s.points + [len(s.msgs)]:
        h = s.msgs[:p]
        lc.observe(h)
        plan = lc.view(h)
        out = plan.apply(h)
        assert validate_pairing(out) == []
        renders.append(out)
        versions.append(plan.version)
    return renders, versions


def is_prefix(a: list, b: list) -> bool:
    return len(a) <= len(b) and b[: len(a)] == a


# ---------------------------------------------------------------------------


def test_estimator_runs_only_every_b_turns():
    for batch in (1, 2, 3, 5):
        lc, est = make(batch=batch)
        s = unrelated_session(5)
        drive(lc, s)
        n_turns = 15  # 3 turns per task
        assert len(est.views) == n_turns // batch == lc.stats["estimator_runs"]
        assert all(len(v.new_turns) == batch for v in est.views)
        seen = [r.turn_id for v in est.views for r in v.new_turns]
        assert len(seen) == len(set(seen))  # each turn offered once


def test_batch_none_never_runs_and_never_evicts():
    lc, est = make(batch=None)
    renders, versions = drive(lc, unrelated_session(5))
    assert est.views == [] and lc.stats["estimator_runs"] == 0
    assert versions == [0] * len(versions)
    assert lc.view([]) == RenderPlan()


def test_eviction_changes_the_render_only_at_batch_boundaries():
    lc, est = make(batch=3)
    s = unrelated_session(5)
    runs = []
    renders, versions = [], []
    for p in s.points + [len(s.msgs)]:
        h = s.msgs[:p]
        lc.observe(h)
        runs.append(len(est.views))
        plan = lc.view(h)
        renders.append(plan.apply(h))
        versions.append(plan.version)
    breaks = 0
    for k in range(1, len(renders)):
        if not is_prefix(renders[k - 1], renders[k]):
            breaks += 1
            assert versions[k] == versions[k - 1] + 1  # a plan change, and only then
            assert runs[k] == runs[k - 1] + 1  # ... right after a batch's estimator run
        else:
            assert versions[k] == versions[k - 1]
    assert breaks == lc.stats["prefix_breaks"] > 0
    assert lc.stats["evictions"] >= breaks and lc.stats["tokens_evicted"] > 0
    # Evicted tasks are gone from the final view, the live one is not.
    final = renders[-1]
    assert not any(m.get("content") == TOPICS[0][0] for m in final)
    assert any(m.get("content") == TOPICS[4][0] for m in final)
    assert sum(1 for m in final if str(m.get("content", "")).startswith("[tokenpilot: evicted task")) >= 1


def test_plan_is_cumulative_and_resumed_task_stays_evicted():
    """Decision: a resumed task's evicted turns stay evicted (stub + recall), so the
    cache does not break a second time."""
    lc, est = make(batch=3)
    s = unrelated_session(3)
    drive(lc, s)
    plan = lc.view(s.msgs)
    assert plan.drop
    evicted_task = lc.segments[0].task_ids[0]
    # The user returns to the evicted task; a scripted estimator resumes it.
    s.user("Back to the haiku: make it rhyme")
    s.call("edit", {"path": "poem.txt", "content": "rhyme"}, "ok")
    s.call("read", {"path": "poem.txt"}, "rhyme")
    s.final("Done.")
    s.user("thanks")

    class Resume:
        def estimate(self, view):
            return {
                "baseVersion": view.base_version,
                "taskUpdates": [
                    {
                        "taskId": evicted_task,
                        "objective": "haiku",
                        "lifecycle": "active",
                        "coveredTurnAbsIds": [r.turn_id for r in view.new_turns],
                    }
                ],
            }

    lc.estimator = Resume()
    drive(lc, s, points=[len(s.msgs)])
    assert lc.registry.get(evicted_task).lifecycle == "active"
    after = lc.view(s.msgs)
    assert plan.drop <= after.drop and all(after.stubs[i] == stub for i, stub in plan.stubs.items())


def test_background_mode_never_blocks_observe():
    est = Counting(sleep=2.0)
    lc, _ = make(batch=3, schedule="background", estimator=est)
    s = unrelated_session(5)
    try:
        worst = 0.0
        for p in s.points:
            h = s.msgs[:p]
            t0 = time.monotonic()
            lc.observe(h)
            worst = max(worst, time.monotonic() - t0)
            lc.view(h)
        assert worst < 0.5, worst
        assert len(est.views) == 1  # one in flight at a time; later batches wait
        assert lc.stats["estimator_skipped_busy"] > 0
        h = s.msgs
        assert lc.view(h).version == 0  # nothing applied while the run is in flight
        assert lc.wait(10)
        plan = lc.view(h)  # the finished result is applied now, in one pass
        assert lc.stats["estimator_runs"] == 1 and lc.stats["deltas_applied"] == 1
        est.sleep = 0
        lc.observe(h)  # the turns seen meanwhile go to the next run
        assert lc.wait(10)
        plan = lc.view(h)
        assert plan.version >= 1 and plan.drop
        assert len(est.views) == 2 and est.views[1].new_turns[0].seq == len(est.views[0].new_turns)
    finally:
        lc.close()


def test_failing_estimator_leaves_history_unchanged():
    est = Counting(fail=True)
    lc, _ = make(batch=2, estimator=est)
    s = unrelated_session(4)
    renders, versions = drive(lc, s)
    assert renders[-1] == s.msgs and set(versions) == {0}
    assert lc.stats["estimator_failures"] == lc.stats["estimator_runs"] > 1
    assert lc.registry.version == 0
    # Failed turns are offered again with the next batch, not dropped.
    assert est.views[1].new_turns[0].seq == 0
    # Once the estimator recovers, the same session is evicted normally.
    est.fail = False
    s.user("Write a limerick about cats into cats.txt")
    s.call("write", {"path": "cats.txt", "content": "..."}, "ok")
    s.final("Wrote cats.txt.")
    s.user("One more request: summarize the news digest in digest.md")
    s.call("read", {"path": "digest.md"}, "news")
    drive(lc, s, points=[len(s.msgs)])
    assert lc.view(s.msgs).drop


def test_to_dict_from_dict_resumes_identically():
    s = unrelated_session(5)
    points = s.points + [len(s.msgs)]
    half = len(points) // 2
    ref, _ = make(batch=2)
    ref_renders, _ = drive(ref, s, points)

    first, _ = make(batch=2)
    drive(first, s, points[:half])
    saved = json.loads(json.dumps(first.to_dict()))
    restored = Lifecycle.from_dict(saved, Counting(), first.archive)
    assert restored.to_dict() == saved
    rest, _ = drive(restored, s, points[half:])
    assert rest == ref_renders[half:]
    assert restored.registry.to_dict() == ref.registry.to_dict()
    assert {k: v for k, v in restored.stats.items()} == ref.stats
    # load_dict restores in place (what the facade's import_session calls).
    again, _ = make(batch=2)
    again.load_dict(saved)
    assert again.to_dict() == saved
    rest2, _ = drive(again, s, points[half:])
    assert rest2 == ref_renders[half:]


def test_pending_result_survives_a_checkpoint():
    s = unrelated_session(3)
    lc, _ = make(batch=3)
    h = s.msgs[: s.points[-1]]
    for p in s.points:
        lc.observe(s.msgs[:p])  # no view: results wait
    saved = json.loads(json.dumps(lc.to_dict()))
    assert saved["ready"]
    restored = Lifecycle.from_dict(saved, Counting(), lc.archive)
    assert restored.view(h) == lc.view(h)


def test_cost_gate_defers_small_evictions_and_records_numbers():
    # Small finished tasks, long live tail: re-prefilling costs more than it saves. (The
    # outputs here name nothing, which the tail rules would cut: off, to weigh the gate alone.)
    lc, _ = make(batch=3, cost_gate=True, tail=None)
    s = unrelated_session(2)
    s.user("Now analyse the server logs in server.log")
    for i in range(4):
        s.call("read", {"path": "server.log", "offset": i}, "log line " * 400)
    drive(lc, s)
    decisions = lc.stats["gate_decisions"]
    assert decisions and not any(d["evict"] for d in decisions)
    assert lc.stats["prefix_breaks"] == 0 and lc.archive.data == {}  # nothing stored for nothing
    d = decisions[0]
    assert d["tokensAfterCut"] > d["evictedTokens"] > 0 and d["expectedRemainingCalls"] >= 3
    assert d["costUsd"] >= d["savingUsd"]

    # Big finished tasks and a small tail: eviction pays.
    lc, _ = make(batch=3, cost_gate=True, tail=None)
    s = unrelated_session(5, big=40_000)
    drive(lc, s)
    assert any(d["evict"] for d in lc.stats["gate_decisions"]) and lc.stats["prefix_breaks"] >= 1
    for seg in lc.segments:
        assert json.loads(lc.archive.data[seg.artifact_id]) == s.msgs[seg.start : seg.end]


def test_cost_gate_counts_the_head_an_eviction_sends_again_when_it_adds_the_recall_tool():
    """The same eviction that pays when only what follows the cut is re-sent does not pay
    when the recall tool joins with it: the tools come first, so the whole prompt is."""
    lc, _ = make(batch=3, cost_gate=True, tail=None)
    s = unrelated_session(5, big=40_000)
    drive(lc, s)
    assert any(d["evict"] for d in lc.stats["gate_decisions"])
    lc, _ = make(batch=3, cost_gate=True, tail=None)
    lc.head_refill_tokens = 200_000  # a long system prompt and tools, cached until now
    drive(lc, s)
    decisions = lc.stats["gate_decisions"]
    assert decisions and not any(d["evict"] for d in decisions)
    assert all(d["tokensAfterCut"] > 200_000 for d in decisions)


def test_concurrent_observe_and_view_are_safe():
    lc, _ = make(batch=1, schedule="background", estimator=Counting())
    s = unrelated_session(5)
    errors = []

    def worker():
        try:
            for p in s.points:
                h = s.msgs[:p]
                lc.observe(h)
                assert validate_pairing(lc.view(h).apply(h)) == []
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    lc.wait(10)
    lc.close()
    assert errors == []


def test_config_is_validated():
    for bad in (
        {"batch_turns": 0},
        {"batch_turns": True},
        {"schedule": "sometimes"},
        {"expected_calls_min": 0},
    ):
        with pytest.raises(ConfigError):
            LifecycleConfig(**bad)
    with pytest.raises(ConfigError):
        Lifecycle(LifecycleConfig(), OfflineEstimator(), None)
    cfg = LifecycleConfig(batch_turns=None, stub=False)
    assert LifecycleConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_no_stub_mode_drops_without_placeholder():
    lc, _ = make(batch=3, stub=False)
    s = unrelated_session(3)
    renders, _ = drive(lc, s)
    assert lc.stats["evictions"] > 0
    assert not any(str(m.get("content", "")).startswith("[tokenpilot") for m in renders[-1])
    assert len(renders[-1]) < len(s.msgs)


def one_turn_tasks(prompts: list[str]) -> Session:
    s = Session()
    for prompt in prompts:
        s.user(prompt)
        s.final("Here it is.")
    return s


def test_the_batch_that_triggered_a_run_is_never_evicted_by_it():
    s = one_turn_tasks([p.replace("Write", "Recite") for p, _ in TOPICS] + ["Name three moons of Jupiter"])
    lc, est = make(batch=3)
    drive(lc, s, points=[*s.points[1:], len(s.msgs)])
    assert len(est.views) == 2
    evicted = {tid for seg in lc.segments for tid in seg.turn_ids}
    first_batch = {r.turn_id for r in est.views[0].new_turns}
    assert [t.lifecycle for t in lc.registry.tasks] == ["evictable"] * 5 + ["completed"]
    assert evicted == first_batch  # the second batch's evictable tasks wait for the next run


def test_pending_eviction_is_reprieved_when_later_work_needs_the_task():
    # Task 0 is marked evictable at the first run but protected as part of that
    # batch; before the next run, the user comes back to poem.txt.
    prompts = [p.replace("Write", "Recite") for p, _ in TOPICS]
    s = one_turn_tasks(prompts + ["Read poem.txt aloud, slowly"])
    lc, est = make(batch=3)
    drive(lc, s, points=[*s.points[1:], len(s.msgs)])
    poem = lc.registry.tasks[0]
    assert poem.lifecycle == "completed"
    evicted = {tid for seg in lc.segments for tid in seg.turn_ids}
    assert poem.turn_ids[0] not in evicted
    assert evicted == {r.turn_id for r in est.views[0].new_turns} - set(poem.turn_ids)


@st.composite
def agent_sessions(draw):
    """Random multi-task sessions: topics, files shared or not, parallel calls, questions."""
    s = Session()
    files = ["notes.md", "data.csv", "report.txt", "main.py", "todo.md", "plot.png"]
    verbs = ["Summarize", "Clean up", "Review", "Explain", "Plot", "Refactor"]
    for t in range(draw(st.integers(1, 6))):
        f = draw(st.sampled_from(files))
        if t and draw(st.integers(0, 4)) == 0:
            s.user("also double-check it")
        else:
            s.user(
                f"{draw(st.sampled_from(verbs))} the {draw(st.sampled_from(['alpha', 'beta', 'gamma']))} part of {f}"
            )
        for _ in range(draw(st.integers(0, 3))):
            n = draw(st.integers(1, 3))
            calls, results = [], []
            for _j in range(n):
                s.k += 1
                cid = f"c{s.k}"
                calls.append(
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "read", "arguments": json.dumps({"path": f})},
                    }
                )
                results.append(
                    {"role": "tool", "tool_call_id": cid, "content": "x" * draw(st.integers(1, 3000))}
                )
            s.msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
            s.msgs.extend(draw(st.permutations(results)))
            s.points.append(len(s.msgs))
        s.final(draw(st.sampled_from(["Done.", "Updated the file.", "Which format do you want?"])))
    return s


@settings(max_examples=60, deadline=None)
@given(s=agent_sessions(), batch=st.integers(1, 4), gate=st.booleans(), stub=st.booleans())
def test_property_renders_extend_each_other_between_plan_changes(s, batch, gate, stub):
    lc, _ = make(batch=batch, cost_gate=gate, stub=stub)
    renders, versions = drive(lc, s)  # drive checks pairing on every render
    changes = 0
    for k in range(1, len(renders)):
        if versions[k] != versions[k - 1]:
            changes += 1
        else:
            assert is_prefix(renders[k - 1], renders[k])
    assert changes == lc.stats["prefix_breaks"] == versions[-1]
    # Live tasks' turns leave the view only as tool bundles a segment rule retired, each
    # with its reason; whole-task eviction never touches them.
    live = {tid for t in lc.registry.tasks if t.lifecycle != "evictable" for tid in t.turn_ids}
    assert not live & {tid for seg in lc.segments if not seg.reasons for tid in seg.turn_ids}
    assert all(len(seg.reasons) == len(seg.turn_ids) for seg in lc.segments if seg.reasons)


def test_rewritten_history_invalidates_stale_segments():
    lc, _ = make(batch=3)
    s = unrelated_session(3)
    drive(lc, s)
    plan = lc.view(s.msgs)
    assert plan.drop
    # The caller keeps the first task but rewrites what follows: its segment stays.
    first = lc.segments[0]
    kept = s.msgs[: first.end] + [{"role": "user", "content": "hello"}]
    assert lc.view(kept).drop == frozenset(range(first.start, first.end))
    # A different conversation altogether: no stale segment survives.
    other = one_turn_tasks(["hello", "how are you?"]).msgs
    new_plan = lc.view(other)
    assert new_plan.drop == frozenset() and new_plan.version == plan.version + 2
    assert lc.stats["segments_invalidated"] == len(plan.stubs)
    assert new_plan.apply(other) == other


def test_batches_fire_again_after_the_caller_compacts_its_history():
    """A compaction (Claude Code's own, say) replaces a long history with a short one:
    batches count from the new history, not from the old one's length."""
    lc, est = make(batch=3)
    long = unrelated_session(5)  # 15 turns
    drive(lc, long)
    runs = len(est.views)
    compacted = Session()
    compacted.user("Summary of the earlier work: five files written.")
    for i in range(3):
        compacted.call("read", {"path": f"next_{i}.txt"}, "data")
    renders, _ = drive(lc, compacted)
    assert len(est.views) == runs + 1  # the new history's first batch ran
    newest = est.views[-1].new_turns
    assert [r.turn_id for r in newest] == [t.turn_id for t in segment_turns(compacted.msgs)][-len(newest) :]
    # The same history, unchanged, does not start over.
    lc.observe(compacted.msgs)
    assert len(est.views) == runs + 1


def test_manual_schedule_waits_for_the_host():
    """schedule="manual": observe only marks the batch due; run_pending runs it."""
    from tokenpilot import TokenPilot
    from tokenpilot.lifecycle.schedule import LifecycleConfig

    tp = TokenPilot(lifecycle=LifecycleConfig(batch_turns=1, schedule="manual", cost_gate=False))
    msgs = [
        {"role": "user", "content": "list the files in src"},
        {"role": "assistant", "content": "src has a.py"},
    ]
    tp.prepare(msgs, session_id="m")
    assert tp.estimator_due("m")
    assert tp.lifecycle_stats("m")["estimator_runs"] == 0
    assert tp.run_estimator("m") is True
    assert not tp.estimator_due("m") and tp.run_estimator("m") is False
    assert tp.lifecycle_stats("m")["estimator_runs"] == 1


def test_the_cost_gates_decisions_kept_in_the_state_are_bounded():
    from tokenpilot.lifecycle.plan import GATE_DECISIONS_KEPT, remember_decision

    decisions: list[dict] = []
    for i in range(GATE_DECISIONS_KEPT * 3):
        remember_decision(decisions, {"n": i})
    assert len(decisions) == GATE_DECISIONS_KEPT
    assert decisions[0]["n"] == GATE_DECISIONS_KEPT * 2 and decisions[-1]["n"] == GATE_DECISIONS_KEPT * 3 - 1


def test_without_stubs_a_task_evicted_around_a_cut_turn_leaves_a_user_message_first():
    """A turn cut in place keeps its messages: evicting the rest of its task without a stub
    must not leave its assistant message first after the system prompt (found by the
    property above; the cut segment's indices were counted as hidden)."""
    calls = [
        {"id": c, "type": "function", "function": {"name": "read", "arguments": "{}"}}
        for c in ("c1", "c2", "c3")
    ]
    msgs = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "Summarize the alpha part of notes.md"},
        {"role": "assistant", "content": None, "tool_calls": calls[:1]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": calls[1:]},
        {"role": "tool", "tool_call_id": "c2", "content": "x" * 3000},
        {"role": "tool", "tool_call_id": "c3", "content": "x"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Summarize the beta part of data.csv"},
        {"role": "assistant", "content": "Done."},
    ]

    class Fixed:
        points = [2, 4, 7, 9]

    Fixed.msgs = msgs
    lc, _ = make(batch=1, cost_gate=False, stub=False)
    renders, _ = drive(lc, Fixed)  # drive checks the pairing (a user message first) on every render
    assert any(seg.cuts for seg in lc.segments), "the tail cut the output that names nothing"
    assert renders[-1][1]["role"] == "user"
