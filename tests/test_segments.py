"""Segment-level lifecycle: each rule, a use named in words, the user's words kept,
and whole-session properties (I1, I3, I4, I6) with bundle eviction on."""

from __future__ import annotations

import json
import re

import pytest
from builders import DictArchive, Session
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.errors import ConfigError
from tokenpilot.estimator import OfflineEstimator
from tokenpilot.lifecycle.schedule import Lifecycle, LifecycleConfig
from tokenpilot.lifecycle.segments import (
    SegmentRules,
    WindowRule,
    bundle_record,
    evictable_bundles,
    last_uses,
    rule_of,
    window_bundles,
)
from tokenpilot.messages.call_kinds import shell_action
from tokenpilot.messages.pairing import validate_pairing
from tokenpilot.messages.turns import segment_turns

BIG = "\n".join(f"line {i}: value_{i} = compute_thing_{i}(x)" for i in range(120))  # ~1.2k tokens


def retired(s: Session, rules: SegmentRules | None = None) -> dict[int, str]:
    """turn index -> reason, over the whole session."""
    turns = segment_turns(s.msgs)
    records = [bundle_record(s.msgs, t) for t in turns]
    return evictable_bundles(records, rules or SegmentRules())


def filler(s: Session, n: int) -> None:
    for i in range(n):
        s.call("exec", {"command": f"echo step {i}"}, f"step {i}")


def coding_session() -> Session:
    s = Session()
    s.user("Fix the failing test in parser.py")
    s.call("read", {"path": "src/parser.py"}, BIG)  # turn 0 (opens with the user message)
    s.call("bash", {"command": "pytest -q"}, "1 failed: test_parse_header\n" + BIG)  # turn 1
    s.call("grep", {"pattern": "parse_header"}, "src/parser.py:12\nsrc/legacy.py:40")  # turn 2
    s.call("edit", {"path": "src/parser.py", "old": "a", "new": "b"}, "ok")  # turn 3
    s.call("read", {"path": "src/parser.py"}, BIG + "\n# fixed")  # turn 4
    s.call("bash", {"command": "pytest -q"}, "all passed")  # turn 5
    filler(s, 4)
    return s


# ---------------------------------------------------------------------------
# the rules, one by one
# ---------------------------------------------------------------------------
def test_superseded_read_and_command_and_consumed_listing():
    out = retired(coding_session(), SegmentRules(stale_after_turns=None))
    assert rule_of(out[0]) == "superseded read"  # read again whole in turn 4
    assert rule_of(out[1]) == "superseded command"  # pytest ran again in turn 5
    assert rule_of(out[2]) == "consumed listing"  # parser.py opened; legacy.py never named again
    assert 3 not in out and 4 not in out and 5 not in out  # the edit and the latest read and run stay


def test_each_rule_can_be_switched_off():
    s = coding_session()
    assert 0 not in retired(s, SegmentRules(superseded_reads=False, stale_after_turns=None))
    assert 1 not in retired(s, SegmentRules(superseded_commands=False, stale_after_turns=None))
    assert 2 not in retired(s, SegmentRules(consumed_listings=False, stale_after_turns=None))
    off = SegmentRules(False, False, False, None, superseded_writes=False)
    assert not off.enabled and retired(s, off) == {}


def written_twice(second: tuple[str, dict, str]) -> Session:
    """A whole write of b.py (its content in the agent's arguments), then `second`, then filler."""
    s = Session()
    s.user("write the helper")
    s.call("bash", {"command": "cat > src/b.py << 'EOF'\n" + BIG + "\nEOF"}, "")  # turn 0
    s.call(*second)  # turn 1
    filler(s, 4)
    return s


def test_a_whole_write_is_superseded_by_a_later_whole_write_or_whole_read():
    rules = SegmentRules(stale_after_turns=None)
    again = written_twice(("write", {"path": "b.py", "content": "v2"}, "ok"))
    assert rule_of(retired(again, rules)[0]) == "superseded write"
    assert 1 not in retired(again, rules)  # the latest write stands
    read = written_twice(("bash", {"command": "cat src/b.py"}, BIG))
    assert rule_of(retired(read, rules)[0]) == "superseded write"
    assert 0 not in retired(read, SegmentRules(stale_after_turns=None, superseded_writes=False))


def test_an_append_or_a_partial_read_or_an_edit_does_not_supersede_a_whole_write():
    rules = SegmentRules(stale_after_turns=None)
    for second in (
        ("bash", {"command": "echo 'x = 1' >> src/b.py"}, ""),  # an append: the first content stays
        ("bash", {"command": "sed -n 1,20p src/b.py"}, BIG[:400]),  # part of the file only
        ("edit", {"path": "src/b.py", "old_string": "a", "new_string": "b"}, "ok"),
        ("write", {"path": "src/other.py", "content": "v2"}, "ok"),  # another file
    ):
        assert 0 not in retired(written_twice(second), rules), second
    assert shell_action("echo x >> f.py") == ("write", "f.py", False)
    assert shell_action("cat > f.py << 'EOF'\nx\nEOF") == ("write", "f.py", True)


def test_a_heredoc_that_redirects_after_its_word_is_a_write_and_a_piped_one_not_authored():
    assert shell_action("cat <<'EOF' > src/b.py\nx > y\nEOF") == ("write", "src/b.py", True)
    assert shell_action("cat <<-EOF >> src/b.py\n\tx\nEOF") == ("write", "src/b.py", False)
    assert shell_action("python - <<'PY'\nprint(1 > 2)\nPY") == ("command", None, False)
    later = ("bash", {"command": "cat <<'EOF' > src/b.py\nv2\nEOF"}, "")
    assert (
        rule_of(retired(written_twice(later), SegmentRules(stale_after_turns=None))[0]) == "superseded write"
    )
    piped = Session()
    piped.user("generate it")
    piped.call("bash", {"command": "cat << 'EOF' | python > src/b.py\nprint(1)\nEOF"}, "warning: x")
    piped.call("write", {"path": "src/b.py", "content": "v2"}, "ok")
    filler(piped, 4)
    assert 0 not in retired(piped, SegmentRules(stale_after_turns=None))  # python wrote it, not the heredoc


def test_a_programs_output_sent_to_a_file_is_left_to_the_other_rules():
    """`run > out.txt` writes out.txt whole, but its text is not in the arguments, and what
    the run printed beside it may still matter: a later write of the file does not retire it."""
    s = Session()
    s.user("run it")
    s.call("bash", {"command": "python gen.py > out.txt; cat out.txt"}, BIG)  # turn 0
    s.call("bash", {"command": "echo done > out.txt"}, "")  # turn 1: out.txt written whole again
    filler(s, 4)
    assert 0 not in retired(s, SegmentRules(stale_after_turns=None))
    assert 0 in retired(
        written_twice(("bash", {"command": "echo done > src/b.py"}, "")), SegmentRules(stale_after_turns=None)
    )


def test_rules_from_a_newer_state_load_with_the_unknown_rule_skipped():
    d = {**SegmentRules(stale_after_turns=5).to_dict(), "a_rule_of_a_later_version": True}
    assert SegmentRules.from_dict(d) == SegmentRules(stale_after_turns=5)


def test_a_ranged_read_does_not_supersede_a_whole_one_but_a_write_does():
    s = Session()
    s.user("look")
    s.call("read", {"path": "a.py"}, BIG)
    s.call("read", {"path": "a.py", "offset": 40, "limit": 10}, BIG[:300])
    filler(s, 4)
    assert 0 not in retired(s, SegmentRules(stale_after_turns=None))
    s.call("write", {"path": "a.py", "content": "new"}, "ok")
    filler(s, 3)
    assert rule_of(retired(s, SegmentRules(stale_after_turns=None))[0]) == "superseded read"


def test_edit_supersedes_a_read_only_when_asked():
    s = Session()
    s.user("change it")
    s.call("read", {"path": "a.py"}, BIG)
    s.call("edit", {"path": "a.py", "old_string": "x", "new_string": "y"}, "ok")
    filler(s, 4)
    assert 0 not in retired(s, SegmentRules(stale_after_turns=None))
    assert 0 in retired(s, SegmentRules(stale_after_turns=None, edit_supersedes_read=True))


def test_a_deduplicated_repeat_supersedes_nothing():
    # TokenPilot turned the second identical output into a preview of the first: the first must stay.
    s = Session()
    s.user("run it")
    s.call("bash", {"command": "make"}, BIG)
    s.call(
        "bash",
        {"command": "make"},
        "[tokenpilot: identical to an earlier output of bash in this conversation]",
    )
    filler(s, 4)
    assert 0 not in retired(s, SegmentRules(stale_after_turns=None))


@pytest.mark.parametrize(
    "second",
    [
        ("read", {"path": "a.py"}, "Error: file is locked"),  # a failed re-read
        ("bash", {"command": "echo 'y = 2' >> a.py"}, ""),  # an append: the read's text still stands
    ],
)
def test_a_failed_reread_or_an_append_supersedes_nothing(second):
    s = Session()
    s.user("look")
    s.call("read", {"path": "a.py"}, BIG)
    s.call(*second)
    filler(s, 4)
    assert 0 not in retired(s, SegmentRules(stale_after_turns=None))


def test_stale_output_after_k_unused_turns_and_small_outputs_stay():
    s = Session()
    s.user("explore")
    s.call("bash", {"command": "env"}, BIG)
    s.call("bash", {"command": "date"}, "Tue")
    s.call("edit", {"path": "src/app.py", "old": "a", "new": "b"}, "ok")
    filler(s, 9)
    out = retired(s, SegmentRules(stale_after_turns=8))
    assert rule_of(out[0]) == "stale output" and "not used for" in out[0]
    assert 1 not in out  # far below stale_min_tokens
    assert 0 not in retired(s, SegmentRules(stale_after_turns=20))


def test_what_the_agent_gathered_stays_until_it_changes_a_file():
    """Gather, then report: outputs unnamed for many turns stay while no later turn has
    changed a file; the first edit after them lets them go stale."""
    s = Session()
    s.user("why are the nightly jobs failing?")
    s.call("bash", {"command": "ssh host journalctl -u backup"}, BIG)
    filler(s, 9)
    assert 0 not in retired(s, SegmentRules(stale_after_turns=8))
    assert 0 in retired(s, SegmentRules(stale_after_turns=8, stale_after_action=False))
    s.call("edit", {"path": "etc/backup.conf", "old": "a", "new": "b"}, "ok")
    filler(s, 3)
    assert rule_of(retired(s, SegmentRules(stale_after_turns=8))[0]) == "stale output"
    failed = Session()
    failed.user("why are the nightly jobs failing?")
    failed.call("bash", {"command": "ssh host journalctl -u backup"}, BIG)
    filler(failed, 9)
    failed.call("edit", {"path": "etc/backup.conf"}, "Error: old_string not found")
    filler(failed, 3)
    assert 0 not in retired(failed, SegmentRules(stale_after_turns=8))  # a failed edit changed nothing


def test_use_named_in_words_keeps_a_bundle_alive():
    """I6: paths and identifiers the user or the assistant names count as use."""
    base = Session()
    base.user("explore")
    base.call("bash", {"command": "env"}, BIG)
    base.call("edit", {"path": "src/app.py", "old": "a", "new": "b"}, "ok")
    filler(base, 8)
    assert 0 in retired(base)
    for speaker in ("user", "assistant"):
        s = Session()
        s.user("explore")
        s.call("bash", {"command": "env"}, BIG)
        s.call("edit", {"path": "src/app.py", "old": "a", "new": "b"}, "ok")
        filler(s, 5)
        if speaker == "user":
            s.user("What does compute_thing_17 return?")
        else:
            s.call("exec", {"command": "true"}, "ok", text="compute_thing_17 is the one to change.")
        filler(s, 2)
        assert 0 not in retired(s), speaker


def test_young_bundles_are_never_retired():
    s = Session()
    s.user("go")
    s.call("bash", {"command": "pytest"}, BIG)
    s.call("bash", {"command": "pytest"}, BIG + "x")
    assert retired(s, SegmentRules(min_age_turns=3)) == {}


@pytest.mark.parametrize(
    ("command", "want"),
    [
        ("cat django/db/models/enums.py", ("read", "django/db/models/enums.py", True)),
        ("sed -n '85,600p' django/x.py | head -200", ("read", "django/x.py", False)),
        ("cd /testbed && cat > t.py << 'EOF'\nimport os\nEOF", ("write", "t.py", True)),
        ("sed -i s/a/b/ x.py", ("edit", "x.py", False)),
        ('grep -rn "TextChoices" django/', ("search", None, False)),
        ("python reproduce.py 2>&1", ("command", None, False)),
        ('echo "unterminated', ("command", None, False)),
    ],
)
def test_shell_commands_are_classified(command, want):
    assert shell_action(command) == want


# ---------------------------------------------------------------------------
# through the lifecycle
# ---------------------------------------------------------------------------
def lifecycle(rules: SegmentRules | None = None, gate: bool = False, **more) -> tuple[Lifecycle, DictArchive]:
    archive = DictArchive()
    cfg = LifecycleConfig(
        batch_turns=3, schedule="inline", cost_gate=gate, segments=rules or SegmentRules(), **more
    )
    return Lifecycle(cfg, OfflineEstimator(), archive), archive


def drive(lc: Lifecycle, s: Session) -> list[tuple[int, list[dict]]]:
    out = []
    for p in [*s.points, len(s.msgs)]:
        h = s.msgs[:p]
        lc.observe(h)
        plan = lc.view(h)
        rendered = plan.apply(h)
        assert validate_pairing(rendered) == []
        out.append((plan.version, rendered))
    return out


def test_a_coding_session_sheds_bundles_with_recallable_stubs():
    s = coding_session()
    filler(s, 6)
    lc, archive = lifecycle()
    renders = drive(lc, s)
    final = renders[-1][1]
    stubs = [m for m in final if str(m.get("content", "")).startswith("[tokenpilot: evicted")]
    assert stubs and lc.stats["bundles_evicted"] > 0
    assert set(lc.stats["bundle_reasons"]) <= {
        "superseded read",
        "superseded command",
        "consumed listing",
        "stale output",
    }
    # the user's request stays word for word, though its turn's bundle went
    assert final[1] == {"role": "user", "content": "Fix the failing test in parser.py"}
    # every stub names what was there and gives it back byte for byte (I3)
    for seg in lc.segments:
        assert json.loads(archive.data[seg.artifact_id]) == s.msgs[seg.start : seg.end]
        assert seg.artifact_id in seg.stub["content"] and "pytest" in "".join(m["content"] for m in stubs)
    # the plan changed only at batch boundaries, and is append-only in between (I1)
    for (v1, a), (v2, b) in zip(renders, renders[1:]):
        if v1 == v2:
            assert b[: len(a)] == a


def test_segment_rules_off_keeps_a_single_task_session_whole():
    s = coding_session()
    filler(s, 6)
    lc, _ = lifecycle(SegmentRules(False, False, False, None))
    drive(lc, s)
    assert lc.segments == []


def test_the_cost_gate_still_decides_and_the_whole_plan_archives_the_chosen_cut():
    s = coding_session()
    filler(s, 30)
    lc, archive = lifecycle(gate=True)
    drive(lc, s)
    decisions = lc.stats["gate_decisions"]
    assert decisions and all("reason" in d for d in decisions)
    stored = set(archive.data)
    assert {seg.artifact_id for seg in lc.segments} <= stored


def test_lifecycle_state_round_trips_with_segment_rules():
    s = coding_session()
    filler(s, 6)
    lc, archive = lifecycle(SegmentRules(stale_after_turns=5))
    drive(lc, s)
    saved = json.loads(json.dumps(lc.to_dict()))
    again = Lifecycle.from_dict(saved, OfflineEstimator(), archive)
    assert again.config.segments == SegmentRules(stale_after_turns=5)
    h = s.msgs
    assert again.view(h).apply(h) == lc.view(h).apply(h)


# ---------------------------------------------------------------------------
# the window rule
# ---------------------------------------------------------------------------
NO_RULES = SegmentRules(False, False, False, None)
WINDOW = WindowRule(trigger_tokens=5000, keep_calls=3)


def reading_session(n: int) -> Session:
    """One long task: n reads of n different files, each ~1.2k tokens, none ever superseded."""
    s = Session()
    s.user("Refactor the whole package")
    for i in range(n):
        s.call("read", {"path": f"src/m{i}.py"}, BIG + f"\n# m{i}")
    return s


def test_window_bundles_fire_only_past_the_trigger_and_spare_the_last_calls():
    calls = [True, True, False, True, True, True]
    assert window_bundles(calls, WINDOW, 5000) == {}
    assert window_bundles(calls, None, 10**6) == {}
    out = window_bundles(calls, WINDOW, 5001)
    assert set(out) == {0, 1} and rule_of(out[0]) == "window"  # turn 2 has no call; 3..5 are the last 3
    assert set(window_bundles(calls, WindowRule(5000, 3, text_turns=True), 5001)) == {0, 1, 2}
    assert window_bundles(calls[:3], WINDOW, 10**6) == {}


def test_window_rule_is_validated_and_round_trips():
    for bad in (
        {"trigger_tokens": 0},
        {"keep_calls": 0},
        {"keep_calls": True},
        {"trigger_tokens": 1.5},
        {"keep_used_turns": 0},
        {"keep_used_turns": "2"},
    ):
        with pytest.raises(ConfigError):
            WindowRule(**bad)
    assert LifecycleConfig().window == WindowRule()  # on by default
    for window in (None, WindowRule(1234, 7, text_turns=True), WindowRule(keep_used_turns=None)):
        cfg = LifecycleConfig(window=window)
        assert LifecycleConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_window_bundles_spare_what_the_last_turns_used():
    calls = [True] * 6
    last_use = [5, 1, 3, 3, 4, 5]  # turn 0 used by the last turn, turn 2 by turn 3
    rule = WindowRule(5000, 2, keep_used_turns=2)
    assert set(window_bundles(calls, rule, 5001, last_use)) == {1, 2, 3}  # 2 was used 2 turns ago: too long
    assert set(window_bundles(calls, WindowRule(5000, 2, keep_used_turns=3), 5001, last_use)) == {1, 3}
    assert set(window_bundles(calls, WindowRule(5000, 2, keep_used_turns=None), 5001, last_use)) == {
        0,
        1,
        2,
        3,
    }
    assert set(window_bundles(calls, rule, 5001)) == {0, 1, 2, 3}  # no uses known: the plain cut


def working_file_session() -> Session:
    """A long task whose first read holds the function the agent keeps talking about."""
    s = Session()
    s.user("Fix the rounding bug")
    s.call("read", {"path": "src/core.py"}, BIG + "\ndef round_half_even_zz(x):\n    return x")
    for i in range(8):
        s.call(
            "read", {"path": f"src/m{i}.py"}, BIG + f"\n# m{i}", text=f"Does m{i} call round_half_even_zz?"
        )
    s.call(
        "edit",
        {"path": "src/core.py", "old": "return x", "new": "return round(x)"},
        "ok",
        text="round_half_even_zz still truncates; patching it.",
    )
    s.call("read", {"path": "src/m9.py"}, BIG + "\n# m9")
    return s


def test_the_window_keeps_the_file_being_worked_on_and_cuts_the_rest():
    s = working_file_session()
    kept, _ = lifecycle(NO_RULES, window=WINDOW)
    cut, _ = lifecycle(NO_RULES, window=WindowRule(5000, 3, keep_used_turns=None))
    final_kept = drive(kept, s)[-1][1]
    final_cut = drive(cut, s)[-1][1]
    core_read = s.msgs[3]
    assert core_read in final_kept and core_read not in final_cut
    assert s.msgs[5] not in final_kept  # src/m0.py: nothing used it, the window took it
    turns = segment_turns(s.msgs)
    uses = last_uses([bundle_record(s.msgs, t) for t in turns])
    assert uses[0] == len(turns) - 2  # the read of src/core.py (turn 0) is charged to the edit


def test_the_window_cuts_everything_but_the_last_calls_in_one_pass_and_sticks():
    s = reading_session(16)
    lc, archive = lifecycle(NO_RULES, window=WINDOW)
    renders = drive(lc, s)
    versions = [v for v, _ in renders]
    first = versions.index(1)
    before, after = renders[first - 1][1], renders[first][1]
    assert len(before) == len(s.msgs[: s.points[first - 1]])  # nothing went before the first cut
    # One pass: one stub stands for every bundle but the last three calls'.
    stubs = [m for m in after if str(m.get("content", "")).startswith("[tokenpilot: evicted")]
    assert len(stubs) == 1 and "from before the last 3 calls" in stubs[0]["content"]
    kept_calls = [m for m in after if m["role"] == "assistant"]
    assert len(kept_calls) == 3
    assert after[1] == {"role": "user", "content": "Refactor the whole package"}  # the user's words stay
    reasons = [r for seg in lc.segments for r in seg.reasons]
    assert {rule_of(r) for r in reasons} == {"window"} and lc.stats["bundle_reasons"] == {
        "window": len(reasons)
    }
    # The stub names each bundle with its own recall id, and each gives it back byte for byte (I3).
    seg = lc.segments[0]
    assert json.loads(archive.data[seg.artifact_id]) == s.msgs[seg.start : seg.end]
    ids = re.findall(r"= (art_[0-9a-f]{24})", stubs[0]["content"])
    assert len(ids) == len(seg.reasons) == len(s.msgs[seg.start : seg.end]) // 2
    for aid in ids:
        bundle = json.loads(archive.data[aid])
        assert [m["role"] for m in bundle] == ["assistant", "tool"]
        k = s.msgs.index(bundle[0])
        assert s.msgs[k : k + 2] == bundle and seg.start <= k < seg.end
        assert json.loads(bundle[0]["tool_calls"][0]["function"]["arguments"])["path"] in stubs[0]["content"]
    # Sticky: the renders extend each other until the history passes the trigger again.
    for (v1, a), (v2, b) in zip(renders, renders[1:]):
        if v1 == v2:
            assert b[: len(a)] == a
    assert lc.stats["prefix_breaks"] == versions[-1] >= 2  # a sawtooth: one break per cut
    assert versions[first + 1] == 1


def test_the_window_stays_below_the_trigger_and_keeps_answers():
    s = reading_session(3)
    s.final("All three modules read.")
    for i in range(3, 6):
        s.call("read", {"path": f"src/m{i}.py"}, BIG)
    lc, _ = lifecycle(NO_RULES, window=WINDOW)
    drive(lc, s)
    final = lc.view(s.msgs).apply(s.msgs)
    assert {"role": "assistant", "content": "All three modules read."} in final  # not a tool bundle
    small, _ = lifecycle(NO_RULES, window=WindowRule(trigger_tokens=10**6, keep_calls=1))
    drive(small, s)
    assert small.segments == []  # below the trigger nothing goes


def test_the_cost_gate_still_decides_a_window_cut():
    s = reading_session(16)
    lc, _ = lifecycle(NO_RULES, gate=True, window=WINDOW, min_evict_tokens=10**6)
    drive(lc, s)
    assert lc.segments == [] and lc.stats["gate_decisions"]  # refused, and said why
    assert all(not d["evict"] for d in lc.stats["gate_decisions"])
    # On re-prefill alone (no recall risk: this small session's cut pays only without it)
    lc, _ = lifecycle(NO_RULES, gate=True, window=WINDOW, recall_risk=0.0)
    drive(lc, s)
    assert lc.segments and any(d["evict"] for d in lc.stats["gate_decisions"])


def test_the_gate_charges_rule_bundles_their_expected_recalls():
    s = reading_session(16)
    free, _ = lifecycle(NO_RULES, gate=True, window=WINDOW, recall_risk=0.0)
    drive(free, s)
    assert free.segments and all(d["riskUsd"] == 0.0 for d in free.stats["gate_decisions"])
    sure, _ = lifecycle(NO_RULES, gate=True, window=WINDOW, recall_risk=1.0)
    drive(sure, s)  # every bundle wanted back: each costs a round trip, no cut pays
    assert sure.segments == [] and sure.stats["gate_decisions"]
    assert all(not d["evict"] and d["riskUsd"] > 0 for d in sure.stats["gate_decisions"])
    assert all("recall risk" in d["reason"] for d in sure.stats["gate_decisions"])


def test_the_window_never_splits_parallel_calls():
    s = reading_session(8)
    s.msgs.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"par_{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
                for k in range(3)
            ],
        }
    )
    s.msgs += [{"role": "tool", "tool_call_id": f"par_{k}", "content": BIG} for k in range(3)]
    s.points.append(len(s.msgs))
    for i in range(8):
        s.call("read", {"path": f"src/z{i}.py"}, BIG)
    lc, _ = lifecycle(NO_RULES, window=WINDOW)
    renders = drive(lc, s)  # validate_pairing on every render
    assert any(v for v, _ in renders)


# ---------------------------------------------------------------------------
# properties over random coding sessions
# ---------------------------------------------------------------------------
_ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["read", "bash", "grep", "edit", "write", "user"]),
        st.integers(0, 3),  # which file / command
        st.booleans(),  # big output?
    ),
    min_size=4,
    max_size=40,
)


def random_session(actions) -> Session:
    s = Session()
    s.user("Work on the repo")
    for k, (kind, which, big) in enumerate(actions):
        path = f"src/mod_{which}.py"
        body = (BIG if big else "short") + f"\n# {k}"
        if kind == "user":
            s.user(f"Now look at mod_{which}.py")
        elif kind == "read":
            s.call("read", {"path": path}, body)
        elif kind == "bash":
            s.call("bash", {"command": f"pytest tests/test_{which}.py"}, body)
        elif kind == "grep":
            s.call("grep", {"pattern": f"def f{which}"}, f"{path}:3\nsrc/other_{which}.py:9")
        elif kind == "edit":
            s.call("edit", {"path": path, "old_string": "a", "new_string": str(k)}, "ok")
        else:
            s.call("write", {"path": path, "content": body}, "ok")
    return s


@settings(max_examples=150, deadline=None)
@given(
    actions=_ACTIONS,
    gate=st.booleans(),
    k=st.sampled_from([2, 4, 8]),
    window=st.sampled_from([None, WindowRule(1500, 2), WindowRule(4000, 4, text_turns=True)]),
)
def test_property_invariants_hold_with_segment_eviction(actions, gate, k, window):
    s = random_session(actions)
    lc, archive = lifecycle(
        SegmentRules(stale_after_turns=k, stale_min_tokens=50, min_age_turns=1), gate=gate, window=window
    )
    renders = drive(lc, s)  # I4 checked on every render
    for (v1, a), (v2, b) in zip(renders, renders[1:]):
        if v1 == v2:
            assert b[: len(a)] == a  # I1 between evictions
    final = renders[-1][1]
    users = [m for m in s.msgs if m["role"] == "user"]
    assert [
        m for m in final if m["role"] == "user" and not str(m["content"]).startswith("[tokenpilot")
    ] == users
    for seg in lc.segments:  # I3: every evicted byte comes back
        assert json.loads(archive.data[seg.artifact_id]) == s.msgs[seg.start : seg.end]
    # I6: nothing from the last batch (the three newest turns) is evicted
    turns = segment_turns(s.msgs)
    gone = {i for seg in lc.segments for i in range(seg.start, seg.end)}
    for t in turns[-3:]:
        assert not gone.intersection(range(t.start, t.end))


@pytest.mark.parametrize(
    ("args", "command"),
    [
        ({"command": "sed -n '1,20p' a.py"}, "sed -n '1,20p' a.py"),
        ({"cmd": "cat a.py"}, "cat a.py"),  # Codex CLI's exec_command
        ({"command": ["bash", "-lc", "cat a.py"]}, "cat a.py"),  # Codex CLI's shell: an argv list
        ({"command": ["ls", "-la"]}, "ls -la"),
        ({"command": 3}, None),
        ({}, None),
    ],
)
def test_a_shell_call_s_command_line_under_every_agent_s_spelling(args, command):
    from tokenpilot.messages.call_kinds import call_kind, shell_command

    assert shell_command(args) == command
    if command == "cat a.py":
        assert call_kind("exec_command", args) == "read"
        assert call_kind("shell", args) == "read"
