"""The SWE-agent importer replays what SWE-agent sent: each step's recorded prompt
(`trajectory[i].messages`, its history processors already applied) where the file has
them, `history` only where it has not (issue #26)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import shared_path

from tokenpilot.measure.bench.methods import Vanilla
from tokenpilot.measure.bench.replay import jobs, replay
from tokenpilot.measure.traces import load
from tokenpilot.measure.traces.build import pairing_problems

ELIDED = "Old environment output:"


def _recorded(name: str) -> Path:
    root = shared_path("traces", "swe_agent")
    return next(p for p in sorted(root.rglob("*.traj")) if name in str(p))


def _strip(msg: dict) -> tuple:
    content = msg.get("content")
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return msg.get("role"), content


def test_each_call_is_sent_the_previous_steps_recorded_prompt():
    path = _recorded("function_calling_replace_from_source")
    data = json.loads(path.read_text())
    (session,) = load(path)
    assert session.meta["prompts"] == "trajectory"
    steps = data["trajectory"]
    assert len(session.calls) == len(steps)
    for i, call in enumerate(session.calls[1:], start=1):
        prompt = session.prompt(call)
        recorded = steps[i - 1]["messages"]
        assert [_strip(m) for m in prompt] == [_strip(m) for m in recorded], i
    assert pairing_problems(session.prompt(session.calls[-1])) == []


def test_the_rolling_elision_advances_call_by_call_and_rewrites_an_earlier_message():
    (session,) = load(_recorded("function_calling_replace_from_source"))
    elided = [sum(str(m["content"]).startswith(ELIDED) for m in session.prompt(c)) for c in session.calls]
    assert elided == sorted(elided) and elided[0] == 0 and elided[-1] >= 5
    grew = [k for k in range(1, len(elided)) if elided[k] > elided[k - 1]]
    assert len(grew) >= 5  # a new elision on each of those calls: an earlier message rewritten
    for k in grew:
        before, after = session.prompt(session.calls[k - 1]), session.prompt(session.calls[k])
        assert any(a != b for a, b in zip(before, after)), k  # not append-only


def test_vanilla_replay_breaks_the_cache_where_swe_agent_rewrote_its_history():
    (session,) = load(_recorded("function_calling_replace_from_source"))
    result = replay([session], Vanilla())
    breaks = sum(c.prefix_break for c in result.calls)
    assert breaks >= 5
    # replaying `history` instead (no recorded prompts) is append-only: no breaks at all
    for call in session.calls:
        call.sent = None
    assert sum(c.prefix_break for c in replay([session], Vanilla()).calls) == 0


def test_files_without_recorded_prompts_replay_history_unchanged():
    path = _recorded("function_calling_replace__install-1")
    data = json.loads(path.read_text())
    (session,) = load(path)
    assert session.meta["prompts"] == "history"
    assert all(c.sent is None for c in session.calls)
    history = [m for m in data["history"] if isinstance(m, dict)]
    last = session.prompt(session.calls[-1])
    assert [_strip(m)[1] for m in last] == [_strip(m)[1] for m in history[: len(last)]]


def test_isolated_mode_keeps_the_sent_forms():
    (session,) = load(_recorded("function_calling_replace_from_source"))
    continuous = [j.prompt for j in jobs(session, "continuous")]
    isolated = [j.prompt for j in jobs(session, "isolated")]
    assert isolated == continuous  # one task: the same prompts, elisions included
