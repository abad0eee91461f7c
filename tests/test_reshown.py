"""Runs of lines a tool output shows again (a file read twice, a window scrolled back)
fold into one marker that names where the context already shows them.

Properties: every marker tells the truth (its lines are, byte for byte, the lines it
names in the earlier output), expanding the markers gives the original back, and the
fold is a function of the frozen history: a session exported and imported elsewhere
folds the next output the same way.
"""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot import Config, TokenPilot
from tokenpilot.ingest.reshown import MIN_RUN_LINES, RESHOWN_NOTE, ShownLines, expand_reshown, fold_reshown
from tokenpilot.lifecycle.segments import SegmentRules, bundle_record, evictable_bundles
from tokenpilot.messages.turns import segment_turns

_MARK = re.compile(
    r"^\[… (\d+) lines " + re.escape(RESHOWN_NOTE) + r" as lines (\d+)–(\d+) of the output of `(.*)`\]$"
)


def code(name: str, n: int, *, changed: int | None = None) -> str:
    """A source file of `n` distinct lines, long enough to be worth folding."""
    lines = [f"value_{name}_{i} = compute_something({i}, name='{name}')  # line {i}" for i in range(n)]
    if changed is not None:
        lines[changed] = f"value_{name}_{changed} = 'edited by the agent'"
    return "\n".join(lines) + "\n"


def expand(text: str, shown: ShownLines) -> str:
    """The text with each marker replaced by the lines it names (`expand_reshown`)."""
    return expand_reshown(text, [(b.label, "".join(b.lines)) for b in shown.blocks.values()])


def test_a_run_shown_earlier_becomes_one_marker_and_the_rest_stays():
    shown = ShownLines()
    shown.add(code("a", 40), "cat a.py", 3)
    again = code("a", 40, changed=20)
    folded = fold_reshown(again, shown)
    assert folded is not None and len(folded) < len(again) / 2
    assert "value_a_20 = 'edited by the agent'\n" in folded  # the changed line is shown
    assert folded.count(RESHOWN_NOTE) == 2  # the runs before and after it
    assert "as lines 1–20 of the output of `cat a.py`" in folded
    assert expand(folded, shown) == again


def test_a_short_run_or_an_unseen_text_is_left_alone():
    shown = ShownLines()
    shown.add(code("a", 40), "cat a.py", 1)
    assert fold_reshown(code("b", 40), shown) is None
    short = "".join(code("a", 40).splitlines(keepends=True)[: MIN_RUN_LINES - 1]) + code("c", 30)
    assert fold_reshown(short, shown) is None
    assert fold_reshown(code("a", 40), ShownLines()) is None


def test_an_output_the_plan_hides_is_never_pointed_at():
    """The agent reads a file again because its first read was evicted: it gets it whole."""
    shown = ShownLines()
    shown.add(code("a", 40), "cat a.py", 5)
    shown.hidden = frozenset({5})
    assert fold_reshown(code("a", 40), shown) is None
    shown.hidden = frozenset()
    assert fold_reshown(code("a", 40), shown) is not None


def test_the_index_is_bounded_and_drops_the_oldest_outputs_first():
    shown = ShownLines()
    per = 2_000
    for k in range(40):  # 80,000 lines offered, more than the cap
        shown.add("".join(f"output {k} line {i} with some words in it\n" for i in range(per)), f"run {k}", k)
    total = sum(len(b.lines) for b in shown.blocks.values())
    assert total <= 50_000
    assert min(b.entry for b in shown.blocks.values()) > 0  # the first outputs went first
    assert sum(len(v) for v in shown.where.values()) == total  # nothing left behind by a drop


def test_many_equal_lines_fold_in_linear_time_and_expand_back():
    shown = ShownLines()
    shown.add("same line of a noisy log output\n" * 5_000, "tail log", 0)
    text = ("same line of a noisy log output\n" * 3_000 + "ERROR at the end\n") * 20
    folded = fold_reshown(text, shown)
    assert folded is not None and folded.count("ERROR at the end") == 20
    assert expand(folded, shown) == text


block_text = st.lists(
    st.text(alphabet="abcxyz (){}=_:", min_size=0, max_size=30).map(lambda s: s + "\n"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    earlier=st.lists(block_text, min_size=1, max_size=4),
    picks=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(1, 40), block_text), max_size=6
    ),
)
def test_every_marker_tells_the_truth_and_expanding_gives_the_original(earlier, picks):
    shown = ShownLines()
    for k, lines in enumerate(earlier):
        shown.add("".join(lines), f"read {k}", k)
    parts: list[str] = []
    for b, start, n, noise in picks:  # slices of earlier outputs between new lines
        src = earlier[b % len(earlier)]
        parts.extend(src[start : start + n])
        parts.extend(noise)
    text = "".join(parts)
    folded = fold_reshown(text, shown)
    if folded is None:
        return
    assert len(folded) < len(text)
    assert expand(folded, shown) == text


# -- through TokenPilot, as a user constructs it -------------------------------------
def read_call(i: int, path: str) -> dict:
    args = json.dumps({"command": f"cat {path}"})
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": args}}],
    }


def session(*outputs: str | tuple[str, str]) -> list[dict]:
    """Reads of a.py (or of the path given with an output)."""
    history = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix a.py"},
    ]
    for i, out in enumerate(outputs):
        path, text = out if isinstance(out, tuple) else ("a.py", out)
        history += [read_call(i, path), {"role": "tool", "tool_call_id": f"c{i}", "content": text}]
    return history


def rendered_tools(p) -> list[str]:
    return [m["content"] for m in p.messages if m.get("role") == "tool"]


def test_a_file_read_again_is_folded_against_the_first_read_and_nothing_is_stored(tmp_path):
    tp = TokenPilot(store=tmp_path, lifecycle=False)
    first, again = code("a", 60), code("a", 60, changed=30)
    p1 = tp.prepare(session(first), session_id="s")
    p2 = tp.prepare(session(first, again), session_id="s")
    assert p2.messages[: len(p1.messages)] == p1.messages  # append-only
    out1, out2 = rendered_tools(p2)
    assert out1 == first
    assert RESHOWN_NOTE in out2 and "'edited by the agent'" in out2 and len(out2) < len(again) / 3
    assert "as lines 1–30 of the output of `bash cat a.py`" in out2
    assert not p2.stats.artifacts  # nothing cut that the context does not hold
    p3 = tp.prepare(session(first, again) + [{"role": "user", "content": "thanks"}], session_id="s")
    assert p3.messages[: len(p2.messages)] == p2.messages


def test_a_session_moved_to_another_process_folds_the_next_read_the_same_way(tmp_path):
    history = session(code("a", 60), ("b.py", code("b", 50)))
    nxt = session(code("a", 60), ("b.py", code("b", 50)), code("a", 60, changed=5))
    here = TokenPilot(store=tmp_path, lifecycle=False)
    here.prepare(history, session_id="s")
    moved = TokenPilot(store=tmp_path, lifecycle=False)
    moved.import_session(here.export_session("s"))
    want = here.prepare(nxt, session_id="s").messages
    got = moved.prepare(nxt, session_id="s").messages
    assert got == want and RESHOWN_NOTE in want[-1]["content"]


def test_the_fold_is_an_option():
    history = session(code("a", 60), code("a", 60, changed=30))
    p = TokenPilot(Config(reshown=False), lifecycle=False).prepare(history, session_id="s")
    assert all(RESHOWN_NOTE not in c for c in rendered_tools(p))


def test_a_read_that_points_at_an_earlier_read_does_not_supersede_it():
    """The re-read holds markers, not the lines: the first read must stay while it stands."""
    tp = TokenPilot(lifecycle=False)
    history = session(code("a", 60), code("a", 60, changed=30))
    history += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
    msgs = tp.prepare(history, session_id="s").messages
    turns = segment_turns(msgs)
    records = [bundle_record(msgs, t) for t in turns]
    reads = [r for r in records if r.kind == "read"]
    assert len(reads) == 2 and reads[1].repeat
    evicted = evictable_bundles(records, SegmentRules(min_age_turns=0, stale_after_turns=None))
    assert not any(records[i].kind == "read" for i in evicted)


def test_a_marker_names_only_the_latest_output_of_its_label():
    """Two runs of one command: a third that repeats the first is not folded against it,
    since `the output of <label>` names the latest run (and the rules pin that one)."""
    shown = ShownLines()
    shown.add(code("a", 40), "bash pytest", 0)
    shown.add(code("b", 40), "bash pytest", 1)
    assert fold_reshown(code("a", 40), shown) is None
    assert fold_reshown(code("b", 40), shown) is not None


def test_a_read_whose_first_copy_was_evicted_arrives_whole():
    """Through `TokenPilot` with eviction: the window retires the first read of a.py; the
    agent reads a.py again, and since the model no longer sees the first copy, the
    second is not folded against it."""
    from tokenpilot.estimator import OfflineEstimator
    from tokenpilot.lifecycle.schedule import Lifecycle, LifecycleConfig
    from tokenpilot.lifecycle.segments import WindowRule

    cfg = LifecycleConfig(
        batch_turns=1,
        schedule="inline",
        cost_gate=False,
        window=WindowRule(trigger_tokens=3_000, keep_calls=2, keep_used_turns=None),
    )
    tp = TokenPilot(
        lifecycle=False, lifecycle_factory=lambda sid, archive: Lifecycle(cfg, OfflineEstimator(), archive)
    )
    outputs: list = [code("a", 120)]
    for k in range(5):
        outputs.append((f"x{k}.py", code(f"x{k}", 60)))
        p = tp.prepare(session(*outputs), session_id="s")
    assert code("a", 120) not in [m.get("content") for m in p.messages]  # the first read is evicted
    p = tp.prepare(session(*outputs, code("a", 120, changed=3)), session_id="s")
    assert p.messages[-1]["content"] == code("a", 120, changed=3)


def test_malformed_ids_are_passed_through_and_name_no_output():
    """Lenient mode passes a message with a list for a tool-call id: indexing it, and
    expanding the outputs after it, must not fail on the id."""
    from tokenpilot.ingest.reshown import expand_in_context

    bad = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": ["x"], "function": {"name": "bash"}}]},
        {"role": "tool", "tool_call_id": ["x"], "content": code("a", 40)},
    ]
    history = session(code("a", 60))[:2] + bad + session(code("a", 60))[2:]
    p = TokenPilot(lifecycle=False).prepare(history, session_id="s")
    assert "of the output of `a tool`" in p.messages[-1]["content"]  # the passed-through output, shown
    assert expand_in_context(p.messages, len(p.messages) - 1) == code("a", 60)
    assert expand_in_context([*bad, {"role": "tool", "content": "plain"}, 7], 2) == "plain"
