"""A re-shown fold never points at what the model cannot see: when the plan evicts the
output a fold names while the fold stays, the fold is rendered with those lines."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from strategies import session
from test_invariants import SETTINGS, _evicting, _replay
from test_reshown import code, read_call

from tokenpilot.history.session import Entry
from tokenpilot.ingest.reshown import RESHOWN_NOTE, expand_hidden, expand_in_context, fold_reshown
from tokenpilot.ingest.reshown_moves import MovedLines


def _frozen() -> list[dict]:
    """a.py and b.py read, then a fold naming both."""
    a, b = code("a", 40), code("b", 40)
    from tokenpilot.ingest.reshown import ShownLines

    shown = ShownLines()
    shown.add(a, "bash cat a.py", 1)
    shown.add(b, "bash cat b.py", 3)
    folded = fold_reshown(a + "a new line between the two files\n" + b, shown)
    assert folded is not None and folded.count(RESHOWN_NOTE) == 2
    return [
        read_call(0, "a.py"),
        {"role": "tool", "tool_call_id": "c0", "content": a},
        read_call(1, "b.py"),
        {"role": "tool", "tool_call_id": "c1", "content": b},
        read_call(2, "ab.py"),
        {"role": "tool", "tool_call_id": "c2", "content": folded},
    ]


def test_only_the_markers_naming_a_hidden_output_are_expanded() -> None:
    msgs = _frozen()
    moved = expand_hidden(msgs, {1})
    assert list(moved) == [5]
    text = moved[5]
    assert code("a", 40) in text and text.count(RESHOWN_NOTE) == 1 and "cat b.py" in text
    assert expand_hidden(msgs, {1, 3})[5] == code("a", 40) + "a new line between the two files\n" + code(
        "b", 40
    )
    assert expand_hidden(msgs, set()) == {} and expand_hidden(msgs, {0, 5}) == {}
    # the expanded text still expands to the original from what stays in view
    assert expand_in_context([*msgs[:5], {**msgs[5], "content": text}], 5) == expand_in_context(msgs, 5)


def _entries(msgs: list[dict]) -> list[Entry]:
    return [Entry(m["role"], None, None, None, "", None, m, 0, 0) for m in msgs]


def test_moved_lines_are_kept_while_the_plan_stays_and_redone_when_it_changes() -> None:
    msgs = _frozen()
    entries = _entries(msgs)
    cache = MovedLines()
    first = cache.texts_for(entries, frozenset({1}))
    assert list(first) == [5]
    assert cache.texts_for(entries, frozenset({1})) is first  # nothing new: nothing checked again
    assert list(cache.texts_for(entries, frozenset({3}))) == [5]
    assert cache.texts_for(entries, frozenset()) == {}
    rewritten = [*entries[:5], *_entries(msgs[5:])]  # the caller rewrote the last message
    rewritten[5].frozen = {**msgs[5], "content": "plain"}
    assert cache.texts_for(entries, frozenset({1})) and cache.texts_for(rewritten, frozenset({1})) == {}


@SETTINGS
@given(session(), st.booleans())
def test_every_marker_a_request_shows_names_lines_the_request_holds(msgs, windowed) -> None:
    for p in _replay(_evicting(1, windowed), msgs):
        for k, m in enumerate(p.messages):
            if isinstance(m.get("content"), str) and RESHOWN_NOTE in m["content"]:
                expand_in_context(p.messages, k)  # raises when a marker names lines not in view


def test_moved_lines_are_counted_in_the_tokens_sent() -> None:
    msgs = _frozen()
    entries = _entries(msgs)
    for e in entries:
        e.tokens = len(str(e.frozen.get("content")))
    cache = MovedLines()
    cache.texts_for(entries, frozenset({1}))

    def count(m):
        return len(str(m.get("content")))

    assert cache.extra_tokens(entries, count) == len(cache.texts[5]) - len(msgs[5]["content"]) > 0
    cache.texts_for(entries, frozenset())
    assert cache.extra_tokens(entries, count) == 0
