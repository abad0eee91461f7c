"""`stabilize.merge_tools` compares a request's tools with the session's through a memo of
parsed canonical texts: the same lists, bytes and change flags as parsing every tool on
every call, and the memo's parses never reach a session."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot._canonical import canonical_json
from tokenpilot.ingest.stabilize import (
    _PARSED_TOOLS,
    RECALL_TOOL,
    RECALL_TOOL_NAME,
    canonical_tool,
    merge_tools,
)
from tokenpilot.messages.model import tool_name


def _reference(
    known: Sequence[dict[str, Any]], incoming: Sequence[Mapping[str, Any]] | None, *, include_recall: bool
) -> tuple[list[dict[str, Any]], bool]:
    """merge_tools as it was: every tool parsed again on every call."""
    result = list(known)
    index = {tool_name(t): i for i, t in enumerate(result)}
    new: list[dict[str, Any]] = []
    changed = False
    wanted = list(incoming or [])
    if (
        include_recall
        and RECALL_TOOL_NAME not in index
        and not any(tool_name(t) == RECALL_TOOL_NAME for t in wanted)
    ):
        wanted.append(RECALL_TOOL)
    for t in wanted:
        name = tool_name(t)
        ct = canonical_tool(t)
        if name in index:
            if result[index[name]] != ct:
                result[index[name]] = ct
                changed = True
        elif not any(tool_name(x) == name for x in new):
            new.append(ct)
    if new:
        new.sort(key=tool_name)
        result.extend(new)
        changed = True
    return result, changed


# 1, 1.0 and True are equal in Python and differ in JSON: a definition changing between them
# must be judged exactly as before.
_VALUE = st.sampled_from([1, 1.0, True, 0, False, "x", None, [1], {"a": 1}, {"a": True}])
_TOOL = st.builds(
    lambda name, params: {"type": "function", "function": {"name": name, "parameters": params}},
    st.sampled_from(["read", "write", "exec", RECALL_TOOL_NAME]),
    st.dictionaries(st.sampled_from(["type", "properties", "required", "extra"]), _VALUE, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(_TOOL, max_size=4), st.booleans()), min_size=1, max_size=6))
def test_same_tools_and_changes_as_parsing_every_call(calls: list[tuple[list[dict[str, Any]], bool]]) -> None:
    mine: list[dict[str, Any]] = []
    ref: list[dict[str, Any]] = []
    for tools, recall in calls:
        fresh = json.loads(json.dumps(tools))  # each request parsed anew, as the proxy does
        mine, changed = merge_tools(mine, fresh, include_recall=recall)
        ref, ref_changed = _reference(ref, json.loads(json.dumps(tools)), include_recall=recall)
        assert changed == ref_changed
        assert canonical_json(mine) == canonical_json(ref)
        assert [type(v) for t in mine for v in t.values()] == [type(v) for t in ref for v in t.values()]


def test_the_memo_parse_never_reaches_a_session() -> None:
    tool = {"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}
    tools, _ = merge_tools([], [tool], include_recall=False)
    again, changed = merge_tools(tools, [dict(tool)], include_recall=False)
    assert not changed
    parsed = _PARSED_TOOLS.get(canonical_json(tool))
    assert all(t is not parsed for t in again)
    changed_tool = {"type": "function", "function": {"name": "t", "parameters": {"type": "array"}}}
    after, changed = merge_tools(again, [changed_tool], include_recall=False)
    assert changed and after[0] is not _PARSED_TOOLS.get(canonical_json(changed_tool))
    after[0]["function"]["parameters"]["type"] = "edited by a caller"
    assert _PARSED_TOOLS.get(canonical_json(changed_tool))["function"]["parameters"]["type"] == "array"


def test_a_definition_equal_in_python_keeps_its_bytes() -> None:
    """1 -> True (equal in Python): not a change, as when every tool was parsed and compared."""
    first = {"type": "function", "function": {"name": "t", "parameters": {"minimum": 1}}}
    second = {"type": "function", "function": {"name": "t", "parameters": {"minimum": True}}}
    tools, _ = merge_tools([], [first], include_recall=False)
    after, changed = merge_tools(tools, [second], include_recall=False)
    ref, ref_changed = _reference(tools, [second], include_recall=False)
    assert (
        (changed, canonical_json(after))
        == (ref_changed, canonical_json(ref))
        == (False, canonical_json(tools))
    )
