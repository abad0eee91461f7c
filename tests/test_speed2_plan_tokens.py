"""The cost gate's remembered token counts (`plan_tokens.MessageTokens`) are the counts
`message_tokens` gives, whatever happens to the messages between two batches."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.lifecycle.plan_tokens import MessageTokens
from tokenpilot.tokens import message_tokens

_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": _TEXT},
    optional={"name": _TEXT, "tool_call_id": _TEXT},
)
# What a caller may do to the history between two batches: append, replace a message,
# give a message object a new value in place, add or remove a key, or drop the tail.
_EDIT = st.one_of(
    st.tuples(st.just("append"), _MESSAGE),
    st.tuples(st.just("replace"), st.integers(0, 50), _MESSAGE),
    st.tuples(st.just("set"), st.integers(0, 50), st.sampled_from(["content", "role", "name"]), _TEXT),
    st.tuples(st.just("del"), st.integers(0, 50), st.sampled_from(["name", "tool_call_id"])),
    st.tuples(st.just("truncate"), st.integers(0, 50)),
)


def _edit(history: list[dict[str, Any]], edit: tuple[Any, ...]) -> None:
    kind = edit[0]
    if kind == "append":
        history.append(dict(edit[1]))
    elif history and kind == "replace":
        history[edit[1] % len(history)] = dict(edit[2])
    elif history and kind == "set":
        history[edit[1] % len(history)][edit[2]] = edit[3]  # the same object, a new value
    elif history and kind == "del":
        history[edit[1] % len(history)].pop(edit[2], None)
    elif kind == "truncate":
        del history[edit[1] % (len(history) + 1) :]


@settings(max_examples=200, deadline=None)
@given(st.lists(_MESSAGE, max_size=12), st.lists(st.lists(_EDIT, max_size=4), min_size=1, max_size=6))
def test_counts_are_message_tokens_after_any_edit(start: list[dict[str, Any]], batches: list[Any]) -> None:
    history = [dict(m) for m in start]
    memo = MessageTokens()
    assert memo.counts(history) == [message_tokens(m) for m in history]
    for edits in batches:
        for edit in edits:
            _edit(history, edit)
        assert memo.counts(history) == [message_tokens(m) for m in history]


def test_a_value_changed_in_place_is_counted_again() -> None:
    msg = {"role": "tool", "content": "short"}
    memo = MessageTokens()
    assert memo.counts([msg]) == [message_tokens(msg)]
    msg["content"] = "a much longer output than before, " * 20
    assert memo.counts([msg]) == [message_tokens(msg)]
    assert memo.counts([msg])[0] > message_tokens({"role": "tool", "content": "short"})


def test_it_holds_only_the_latest_history() -> None:
    memo = MessageTokens()
    memo.counts([{"role": "user", "content": str(i)} for i in range(50)])
    memo.counts([{"role": "user", "content": "one"}])
    assert len(memo._by_id) == 1
