"""When the caller sends no tool list (SWE-agent's recordings, Claude Code's), the
agent's first tool calls decide whether `recall_artifact` joins up front; a bulky call
seen only later adds nothing by itself, since a tool added then re-sends the whole
cached prefix for nothing to recall (issue #26: `function_calling_simple` 1.285x,
a Claude Code session 1.051x, both 1.000x now)."""

from __future__ import annotations

import json

from tokenpilot import TokenPilot


def call(cid: str, name: str, **args) -> dict:
    fn = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": cid, "type": "function", "function": fn}],
    }


def result(cid: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def names(p) -> list[str]:
    return [t["function"]["name"] for t in p.tools]


def steps(first: str) -> list[list[dict]]:
    """Prompts of a session: `first` tool call, then `bash` calls, all outputs small."""
    msgs = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix missing_colon.py"},
    ]
    prompts = [list(msgs)]
    for k, name in enumerate([first, "open", "bash", "bash"]):
        msgs += [call(f"c{k}", name, path="tests/missing_colon.py"), result(f"c{k}", f"line {k}: ok")]
        prompts.append(list(msgs))
    return prompts


def test_a_bulky_call_after_the_first_tool_calls_adds_no_tool_and_no_break():
    tp = TokenPilot()
    prepared = [tp.prepare(p, session_id="s") for p in steps("find_file")]
    assert all("recall_artifact" not in names(p) for p in prepared)
    assert all(p.stats.prefix_break is None for p in prepared)


def test_a_bulky_first_tool_call_brings_the_tool_with_it():
    tp = TokenPilot()
    prepared = [tp.prepare(p, session_id="s") for p in steps("bash")]
    assert "recall_artifact" not in names(prepared[0])  # no call yet: nothing known
    assert all("recall_artifact" in names(p) for p in prepared[1:])
    assert [p.stats.prefix_break for p in prepared[2:]] == [None] * 3  # joined once, early


def test_something_to_recall_still_brings_the_tool_later():
    tp = TokenPilot()
    prompts = steps("find_file")
    big = "\n".join(f"step {i}: compiled module_{i}.py ok" for i in range(6000))
    last = prompts[-1][:-1] + [result("c3", big)]
    for p in prompts[:-1]:
        tp.prepare(p, session_id="s")
    out = tp.prepare(last, session_id="s")
    assert "recall_artifact" in names(out) and out.stats.artifacts
