"""The planner's memo of archive texts (`evict.ArchiveMemo`) changes nothing it plans.

The cost gate weighs the same retired bundles batch after batch, so a plan keeps the
canonical JSON of each message and each turn's description for the next one. A plan made
with the memo must be byte for byte the plan made without it: on a history that grew,
on one the caller rewrote (a message object replaced, or given another value in place),
and on one that shrank. The
render keys and the gate's stub counts are memoised by text too: same values.
"""

from __future__ import annotations

from typing import Any

from builders import DictArchive
from hypothesis import given, settings
from hypothesis import strategies as st
from test_evict import registry_for, sessions

from tokenpilot.history.render import _digest, digest
from tokenpilot.lifecycle.evict import ArchiveMemo, plan_eviction
from tokenpilot.lifecycle.gate import stub_tokens
from tokenpilot.messages.turns import segment_turns
from tokenpilot.registry import TaskRegistry
from tokenpilot.tokens import message_tokens

_REASONS = ("stale output: not used for 4 turns", "superseded read", "window")


def _plan(msgs: list[dict[str, Any]], bundles: dict[int, str], reg: TaskRegistry, memo: ArchiveMemo | None):
    archive = DictArchive()
    turns = segment_turns(msgs)
    plan = plan_eviction(
        msgs,
        turns,
        reg,
        archive=archive,
        bundles={t: why for t, why in bundles.items() if t < len(turns)},
        memo=memo,
    )
    return plan, archive.data


def _same(msgs: list[dict[str, Any]], bundles: dict[int, str], memo: ArchiveMemo) -> None:
    turns = segment_turns(msgs)
    reg = registry_for([t.turn_id for t in turns], [("A", "evictable", list(range(len(turns) // 2)))])
    with_memo = _plan(msgs, bundles, reg, memo)
    without = _plan(msgs, bundles, reg, None)
    assert with_memo == without


@settings(max_examples=150, deadline=None)
@given(
    msgs=sessions(),
    picks=st.dictionaries(st.integers(0, 11), st.sampled_from(_REASONS), max_size=8),
    cut=st.integers(1, 40),
    changed=st.integers(0, 60),
)
def test_a_plan_with_the_memo_is_the_plan_without_it(msgs, picks, cut, changed) -> None:
    memo = ArchiveMemo()
    # The history as it grows: a prefix, then the whole of it (each plan uses the last's memo).
    _same(msgs[: max(2, min(cut, len(msgs)))], picks, memo)
    _same(msgs, picks, memo)
    _same(msgs, picks, memo)
    # The caller rewrote one message (a new object, other content), then the history shrank.
    k = 1 + changed % (len(msgs) - 1) if len(msgs) > 1 else 0
    rewritten = list(msgs)
    rewritten[k] = {**msgs[k], "content": f"rewritten {changed}: " + "line\n" * (changed % 5)}
    _same(rewritten, picks, memo)
    # A message object given another value in place (the same object, so the history's
    # objects are all the ones the memo saw).
    rewritten[k]["content"] = f"changed in place {changed}"
    _same(rewritten, picks, memo)
    _same(rewritten[: max(2, len(rewritten) // 2)], picks, memo)


def test_a_message_rewritten_in_place_of_an_equal_one_is_read_again() -> None:
    """The memo trusts message objects, not indices: an equal-content but new object at an
    index is a rewrite, so what was remembered for the old one is forgotten."""
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "first output"},
        {"role": "assistant", "content": "next", "tool_calls": [_call("c2")]},
        {"role": "tool", "tool_call_id": "c2", "content": "second"},
    ]
    memo = ArchiveMemo()
    turns = segment_turns(msgs)
    reg = TaskRegistry()
    first, data = _plan(msgs, {0: _REASONS[0]}, reg, memo)
    assert any("first output" in text for text in data.values())
    changed = list(msgs)
    changed[3] = {**msgs[3], "content": "another output"}
    second, data = _plan(changed, {0: _REASONS[0]}, reg, memo)
    assert not any("first output" in text for text in data.values())
    assert any("another output" in text for text in data.values())
    assert first.segments[0].artifact_id != second.segments[0].artifact_id
    assert len(turns) == 2


def _call(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}


@settings(deadline=None)  # the first count loads the tokenizer
@given(
    role=st.sampled_from(["user", "assistant", "tool"]),
    text=st.text(max_size=300),
    extra=st.booleans(),
)
def test_remembered_digests_and_stub_counts_are_the_computed_ones(role, text, extra) -> None:
    message: dict[str, Any] = {"role": role, "content": text}
    if extra:
        message["name"] = "x"
    assert digest(text) == _digest(text)
    assert digest(message) == _digest(message)
    assert digest(message) == digest(dict(message))  # a second time, from the memo
    assert stub_tokens(message) == message_tokens(message)
