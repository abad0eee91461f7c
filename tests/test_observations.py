"""Text-action agents' observations (SWE-agent, old mini-swe-agent): user-role tool output,
recognised by the markers declared in `observations.py` and treated as environment
(DESIGN.md I5); every other user message stays untouched (issue #26)."""

from __future__ import annotations

import json

from conftest import shared_path

from tokenpilot import TokenPilot
from tokenpilot.lifecycle.segments import bundle_record
from tokenpilot.messages.observations import MARKERS, is_observation, text_action
from tokenpilot.messages.turns import segment_turns

FOOTER = "\n(Open file: /repo/setup.py)\n(Current directory: /repo)\nbash-$"
ACTION = {"role": "assistant", "content": "Let's look.\n```\nopen setup.py\n```"}


def _swe_agent_histories() -> list[list[dict]]:
    files = sorted(shared_path("traces", "swe_agent").rglob("*.traj"))
    out = []
    for f in files:
        history = json.loads(f.read_text()).get("history") or []
        out.append([m for m in history if isinstance(m, dict) and not m.get("is_demo")])
    return out


def test_every_swe_agent_observation_in_the_shared_recordings_is_recognised():
    """Messages SWE-agent typed `observation` after an action are all recognised; the task
    prompt (typed `observation` too, and ending with the same footer) is not: it follows
    the system prompt, not an action."""
    seen = 0
    for history in _swe_agent_histories():
        for i, m in enumerate(history):
            if m.get("role") != "user" or m.get("message_type") != "observation":
                continue
            after_action = i > 0 and history[i - 1].get("role") == "assistant"
            assert is_observation(m, history[i - 1] if i else None) == after_action, (
                i,
                str(m["content"])[-120:],
            )
            seen += after_action
    assert seen >= 30


def test_mini_swe_agent_returncode_messages_are_recognised_and_the_task_is_not():
    files = sorted(shared_path("traces", "mini_swe_agent", "tests").glob("*.traj.json"))
    recognised = 0
    for f in files:
        msgs = json.loads(f.read_text())
        for i, m in enumerate(msgs):
            if m.get("role") != "user":
                continue
            hit = is_observation(m, msgs[i - 1] if i else None)
            assert hit == str(m["content"]).startswith("<returncode>"), str(m["content"])[:60]
            recognised += hit
    assert recognised >= 9


def test_user_words_are_never_observations():
    for text in (
        "Please fix the bug in setup.py",
        "OBSERVATIONS: none",
        "<returncode> is a tag",
        "(Open file: x)",
    ):
        assert not is_observation({"role": "user", "content": "I think " + text}, ACTION)
    obs = {"role": "user", "content": "1:import re" + FOOTER}
    assert is_observation(obs, ACTION)
    assert not is_observation(obs, {"role": "system", "content": "x"})  # the task prompt's place
    assert not is_observation({**obs, "role": "assistant"}, ACTION)
    assert {m.agent for m in MARKERS} == {"swe-agent", "mini-swe-agent"}


def test_text_action_is_the_last_fenced_block():
    assert text_action(ACTION["content"]) == "open setup.py"
    assert text_action("THOUGHT: run it\n\n```bash\npython reproduce.py\n```") == "python reproduce.py"
    assert text_action("no command here") is None


def _text_session(big: str) -> list[dict]:
    return [
        {"role": "system", "content": "You are SWE-agent."},
        {"role": "user", "content": "Fix the issue." + FOOTER},
        ACTION,
        {"role": "user", "content": big + FOOTER},
        {"role": "assistant", "content": "Run it.\n```\npython reproduce.py\n```"},
        {"role": "user", "content": "Traceback: boom" + FOOTER},
    ]


def test_an_observation_is_attached_to_its_action_and_read_as_its_result():
    msgs = _text_session("1:import re\n" * 10)
    turns = segment_turns(msgs)
    assert [(t.start, t.end) for t in turns] == [(1, 4), (4, 6)]
    first, second = (bundle_record(msgs, t) for t in turns)
    assert first.kind == "read" and first.paths == ("setup.py",) and first.has_calls
    assert second.kind == "command" and "Traceback" not in " ".join(second.said)
    assert first.opens_with_user  # the task prompt opened it: it stays with the user's words


def test_the_pilot_reduces_a_large_observation_and_never_the_task_prompt():
    big = "\n".join(f"{i}: " + "x" * 120 for i in range(2000))  # ~250 KB of shell output
    msgs = _text_session(big)
    msgs[1] = {"role": "user", "content": big + FOOTER}  # a task prompt as large: untouched
    tp = TokenPilot(lifecycle=False)
    p = tp.prepare(msgs, session_id="s")
    out = p.messages
    assert out[1]["content"] == msgs[1]["content"]
    assert out[3]["role"] == "user" and len(out[3]["content"]) < len(msgs[3]["content"]) // 2
    assert "art_" in out[3]["content"] and out[3]["content"].endswith("bash-$")
    aid = next(w for w in out[3]["content"].replace('"', " ").split() if w.startswith("art_"))
    assert tp.recall(aid.strip(".,)]"), session_id="s").text == msgs[3]["content"]
    assert out[5]["content"] == msgs[5]["content"]  # small: nothing to reduce
