"""Text-action agents' observations (SWE-agent, old mini-swe-agent, OpenHands prompting a
model for its tools in text): user-role tool output,
recognised by the markers declared in `observations.py` and treated as environment
(DESIGN.md I5); every other user message stays untouched (issue #26)."""

from __future__ import annotations

import json
import re

from conftest import shared_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpilot import TokenPilot
from tokenpilot.lifecycle.segments import bundle_record
from tokenpilot.messages.observations import MARKERS, is_observation, text_action, text_call
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
    assert {m.agent for m in MARKERS} == {"swe-agent", "mini-swe-agent", "openhands"}


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


# -- OpenHands' text form of tool calls (`openhands/llm/fn_call_converter.py`) ----------------

OH_SYSTEM = {
    "role": "system",
    "content": "You are OpenHands agent.\nYou have access to the following functions: ...",
}
OH_TASK = {
    "role": "user",
    "content": "Here's a running example of how to perform a task with the provided tools.\n"
    "USER: EXECUTION RESULT of [execute_bash]:\n/workspace\n--- END OF EXAMPLE ---\nFix the failing test.",
}


def _oh_call(words: str, name: str, **params: str) -> dict:
    """An assistant message as OpenHands' converter writes a tool call into it."""
    body = "".join(
        f"<parameter={k}>" + (f"\n{v}\n" if "\n" in v else v) + "</parameter>\n" for k, v in params.items()
    )
    return {"role": "assistant", "content": f"{words}\n\n<function={name}>\n{body}</function>"}


def _oh_result(name: str, text: str) -> dict:
    return {"role": "user", "content": f"EXECUTION RESULT of [{name}]:\n{text}"}


def test_openhands_results_are_observations_and_the_task_with_its_example_is_not():
    view = _oh_call("Let me look.", "str_replace_editor", command="view", path="/workspace/app/models.py")
    result = _oh_result("str_replace_editor", "     1\timport re\n     2\tclass Model: ...")
    assert is_observation(result, view)
    assert not is_observation(
        OH_TASK, OH_SYSTEM
    )  # its example quotes a result, mid-text, after the system prompt
    assert not is_observation({"role": "user", "content": "Look at the EXECUTION RESULT of [x]: above"}, view)
    assert not is_observation(result, OH_SYSTEM)


def test_text_call_reads_openhands_functions_and_falls_back_to_the_fenced_command():
    view = _oh_call("Look.", "str_replace_editor", command="view", path="/workspace/app/models.py")
    assert text_call(view["content"]) == (
        "str_replace_editor",
        {"command": "view", "path": "/workspace/app/models.py"},
    )
    multi = _oh_call("Run.", "execute_bash", command="cd /workspace &&\npython -m pytest -q")
    assert text_call(multi["content"]) == (
        "execute_bash",
        {"command": "cd /workspace &&\npython -m pytest -q"},
    )
    unclosed = "Run it.\n<function=execute_bash>\n<parameter=command>ls</parameter>\n"  # the stop word ate it
    assert text_call(unclosed) == ("execute_bash", {"command": "ls"})
    assert text_call(ACTION["content"]) == ("bash", {"command": "open setup.py"})
    assert text_call("no command here") is None
    # hostile: one linear pass (the first block, as OpenHands' parser reads it; unclosed runs to the end)
    assert text_call("<function=x>" * 50_000 + "<parameter=a>" * 20_000) == ("x", {})
    assert text_call("<function=\n" * 100_000) is None


def _oh_session(log: str, script: str) -> list[dict]:
    return [
        OH_SYSTEM,
        OH_TASK,
        _oh_call("Let me run the tests.", "execute_bash", command="python -m pytest tests/ -x"),
        _oh_result("execute_bash", log),
        _oh_call(
            "Let me write the fix.",
            "str_replace_editor",
            command="create",
            path="/workspace/fix.py",
            file_text=script,
        ),
        _oh_result("str_replace_editor", "File created successfully at: /workspace/fix.py"),
        _oh_call("Now run it.", "execute_bash", command="python /workspace/fix.py"),
        _oh_result("execute_bash", "ok\n[Command finished with exit code 0]"),
    ]


def test_the_pilot_reads_an_openhands_text_session_as_calls_and_results():
    """End to end through the facade: a long result is reduced and recallable byte for byte,
    the task and its example untouched; an oversized parameter the agent wrote (a file's
    text) is cut as a tool call's argument is, the call still readable, the whole message
    recallable; the turns pair each action with its result."""
    log = "\n".join(f"tests/test_app.py::test_case_{i} PASSED [{i % 100:3d}%]" for i in range(3000))
    script = "\n".join(f"def helper_{i}(value):\n    return value * {i}" for i in range(1000))  # ~40 KB
    msgs = _oh_session(log, script)
    tp = TokenPilot(lifecycle=False)
    out = tp.prepare(msgs, session_id="oh").messages
    assert out[1]["content"] == OH_TASK["content"]
    assert (
        out[3]["content"].startswith("EXECUTION RESULT of [execute_bash]:")
        and len(out[3]["content"]) < len(log) // 4
    )
    aid = next(w.strip('.,)]"') for w in out[3]["content"].split() if "art_" in w)
    aid = aid[aid.index("art_") :]
    assert tp.recall(aid, session_id="oh").text == msgs[3]["content"]
    cut = out[4]["content"]
    assert len(cut) < len(script) // 2 and "tool-call argument truncated" in cut
    name, args = text_call(cut)
    assert (
        name == "str_replace_editor" and args["path"] == "/workspace/fix.py" and args["command"] == "create"
    )
    whole = next(w for w in cut.replace('"', " ").split() if w.startswith("art_")).strip(".,)]")
    assert tp.recall(whole, session_id="oh").text == msgs[4]["content"]
    assert out[6] == msgs[6] and out[7] == msgs[7]  # small: as they came
    records = [bundle_record(msgs, t) for t in segment_turns(msgs)]
    assert [r.kind for r in records] == ["command", "write", "command"]
    assert records[1].paths == ("/workspace/fix.py",)


_ART = re.compile(r"art_[0-9a-f]{24}")


@st.composite
def _oh_sessions(draw) -> list[dict]:
    """OpenHands text sessions: calls with small or oversized parameters, results small,
    long or repetitive, now and then the person's words."""
    msgs = [OH_SYSTEM, OH_TASK]
    for k in range(draw(st.integers(1, 8))):
        size = draw(st.sampled_from([10, 300, 6000]))
        if draw(st.booleans()):
            text = "\n".join(f"line {i} of file_{k}.py" for i in range(size // 20 + 1))
            msgs.append(
                _oh_call(
                    "Write it.",
                    "str_replace_editor",
                    command="create",
                    path=f"/w/file_{k}.py",
                    file_text=text,
                )
            )
        else:
            msgs.append(_oh_call("Run it.", "execute_bash", command=f"python run_{k}.py --n {size}"))
        out = draw(
            st.sampled_from(
                ["ok", f"Traceback: boom at run_{k}.py:3", "\n".join(f"step {i} ok" for i in range(size))]
            )
        )
        msgs.append(_oh_result("execute_bash", out))
        if draw(st.integers(0, 4)) == 0:
            msgs += [
                {"role": "assistant", "content": "Done with this part."},
                {"role": "user", "content": f"Now part {k}."},
            ]
    return msgs


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(_oh_sessions())
def test_openhands_text_sessions_keep_the_invariants_end_to_end(msgs):
    """Through the default facade, call by call: the stable prefix only grows except at a
    counted break; every id a rendered message names recalls something; the person's words
    and the task go as they came; every cut in an assistant message is recallable whole."""
    tp = TokenPilot()
    prev, breaks = None, 0
    points = [i for i, m in enumerate(msgs) if m["role"] == "assistant"] + [len(msgs)]
    for k in points:
        p = tp.prepare(msgs[:k], session_id="oh")
        cur = json.dumps({"tools": p.tools, "messages": p.stable_messages}, ensure_ascii=False)
        if prev is not None and not cur.startswith(prev[:-2]):
            breaks += 1
        prev = cur
        for m in p.messages:
            for aid in _ART.findall(json.dumps(m.get("content"))):
                assert tp.recall(aid, session_id="oh").found
        sent = {json.dumps(m, sort_keys=True) for m in p.messages}
        for m in msgs[:k]:
            if m["role"] == "user" and not m["content"].startswith("EXECUTION RESULT of ["):
                assert json.dumps(m, sort_keys=True) in sent  # the person's words, untouched
    assert p.stats.prefix_breaks == breaks


def test_a_named_shell_call_in_text_brings_recall_at_its_first_result_a_fenced_one_does_not():
    """With no tool list, the agent's first calls tell whether its outputs run large: a
    call OpenHands wrote in text names its tool (`execute_bash`: a shell), so
    `recall_artifact` joins at its first result, while the prefix is small; a fenced
    command names none (short SWE-agent sessions that never store anything would pay the
    tool's schema on every call)."""
    oh = [
        OH_SYSTEM,
        OH_TASK,
        _oh_call("Look.", "execute_bash", command="ls"),
        _oh_result("execute_bash", "a.py"),
    ]
    tools = TokenPilot().prepare(oh, session_id="oh").tools
    assert [t["function"]["name"] for t in tools] == ["recall_artifact"]
    swe = [
        {"role": "system", "content": "You are SWE-agent."},
        {"role": "user", "content": "Fix it." + FOOTER},
    ]
    swe += [ACTION, {"role": "user", "content": "1:import re" + FOOTER}]
    assert TokenPilot().prepare(swe, session_id="swe").tools == []


def test_the_estimator_reads_an_observation_as_output_and_the_action_as_unfinished():
    """The estimator's record of a text action's turn: the observation is a tool result,
    not the person's words, and an action answered by its output is not the agent's final
    answer (either would tell an estimator that the person spoke, or that the task ended)."""
    from tokenpilot.estimator.view import turn_record

    oh = [
        OH_SYSTEM,
        OH_TASK,
        _oh_call("Run.", "execute_bash", command="ls"),
        _oh_result("execute_bash", "a.py"),
    ]
    oh += [{"role": "assistant", "content": "All done: the test passes."}]
    turns = segment_turns(oh[1:])
    first, last = (turn_record(oh[1:], t, k) for k, t in enumerate(turns))
    assert "a.py" not in first.user and any("a.py" in r for r in first.tool_results)
    assert first.user.startswith("Here's a running example") and not first.final
    assert last.final
    swe = _text_session("1:import re\n")
    rec = turn_record(swe, segment_turns(swe)[1], 1)
    assert rec.user == "" and rec.tool_results and not rec.final
