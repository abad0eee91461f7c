"""OpenHands-like tool shapes (`str_replace_editor` view/create/str_replace, `execute_bash`):
the segment rules read them as reads, edits and commands (issue #26). Nothing in the
shared corpus is OpenHands, so the session is synthetic, in OpenHands' CodeAct shape."""

from __future__ import annotations

from builders import DictArchive, Session

from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.lifecycle.schedule import Lifecycle, LifecycleConfig
from tokenpilot.lifecycle.segments import SegmentRules, bundle_record, evictable_bundles
from tokenpilot.messages.turns import segment_turns

APP = "\n".join(f"     {i}\tdef handler_{i}(request): return request.args.get('k{i}')" for i in range(1, 400))
FAIL = "FAILED tests/test_app.py::test_handler_7 - AssertionError\n" + "E   assert None == 'x'\n" * 150
PASS = "tests/test_app.py ....................\n20 passed in 0.31s"


def editor(command: str, path: str, **extra) -> dict:
    return {"command": command, "path": path, **extra}


def openhands_session() -> Session:
    s = Session()
    s.user("Fix the failing handler test in /workspace/app.py")
    s.call(
        "str_replace_editor",
        editor("view", "/workspace/app.py"),
        "Here's the result of running `cat -n`:\n" + APP,
    )
    s.call("execute_bash", {"command": "cd /workspace && python -m pytest tests/test_app.py"}, FAIL)
    s.call(
        "str_replace_editor",
        editor("str_replace", "/workspace/app.py", old_str="k7'", new_str="x'"),
        "The file /workspace/app.py has been edited.",
    )
    s.call("execute_bash", {"command": "cd /workspace && python -m pytest tests/test_app.py"}, PASS)
    s.call(
        "str_replace_editor",
        editor("view", "/workspace/app.py"),
        "Here's the result of running `cat -n`:\n" + APP,
    )
    s.call(
        "str_replace_editor", editor("create", "/workspace/NOTES.md", file_text="fixed k7"), "File created."
    )
    s.call("str_replace_editor", editor("view", "/workspace/app.py", view_range=[1, 20]), APP[:800])
    s.call("execute_bash", {"command": "git -C /workspace diff --stat"}, " app.py | 2 +-")
    s.final("Fixed handler_7; the tests pass.")
    return s


def test_the_tool_shapes_are_read_edit_write_and_command():
    s = openhands_session()
    records = [bundle_record(s.msgs, t) for t in segment_turns(s.msgs)]
    kinds = [(r.kind, r.paths, r.whole_read) for r in records]
    assert kinds[0] == ("read", ("/workspace/app.py",), True)
    assert kinds[1][0] == "command"
    assert kinds[2] == ("edit", ("/workspace/app.py",), False)
    assert kinds[4] == ("read", ("/workspace/app.py",), True)
    assert kinds[5][:2] == ("write", ("/workspace/NOTES.md",))
    assert kinds[6] == ("read", ("/workspace/app.py",), False)  # a ranged view


def test_a_second_view_supersedes_the_first_and_a_rerun_the_first_run():
    s = openhands_session()
    records = [bundle_record(s.msgs, t) for t in segment_turns(s.msgs)]
    retired = evictable_bundles(records, SegmentRules(stale_after_turns=None))
    assert retired[0].startswith("superseded read")
    assert retired[1].startswith("superseded command")
    assert 4 not in retired  # the newest whole view stays: nothing read the file again whole
    assert 2 not in retired and 3 not in retired  # the edit and the passing run stay


def test_the_lifecycle_evicts_them_with_stubs_and_valid_pairing():
    s = openhands_session()
    cfg = LifecycleConfig(batch_turns=3, schedule="inline", cost_gate=False)
    lc = Lifecycle(cfg, None, DictArchive())
    for p in [*s.points, len(s.msgs)]:
        lc.observe(s.msgs[:p])
        out = lc.view(s.msgs[:p]).apply(s.msgs[:p])
        assert validate_pairing(out) == []
    text = "\n".join(str(m.get("content")) for m in out)
    # each rule said once in the stub, in words
    assert (
        FAIL not in text
        and "the same call ran again later" in text
        and "read again or rewritten later" in text
    )
    assert lc.stats["bundle_reasons"].get("superseded read") and lc.stats["bundle_reasons"].get(
        "superseded command"
    )
