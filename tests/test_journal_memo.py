"""The journal remembers the chunk of each long string it saved lately, by identity:
a save that meets the same string object again reuses it, an equal string of another
identity gets the same chunk, and the memo stays within its bound."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.store import journal
from tokenpilot.store.journal import STR_MIN, digest, split
from tokenpilot.store.journal_memo import _StringChunks


def test_a_long_string_saved_again_gives_the_same_chunk() -> None:
    prompt = "You are OpenClaw. " * (STR_MIN // 8)
    state = {"id": "s", "system": {"stable": [prompt], "rendered": [{"role": "system", "content": prompt}]}}
    first, second = split(state), split(state)
    assert first.body == second.body and first.chunks == second.chunks
    copy = "".join(list(prompt))  # equal text, another object
    assert copy is not prompt
    third = split({**state, "system": {"stable": [copy], "rendered": [{"role": "system", "content": copy}]}})
    assert third.body == first.body and third.chunks == first.chunks
    d, text = journal._STRINGS.get(prompt)
    assert d == digest(text) and text in first.chunks.values()


def test_the_memo_keeps_within_its_bound_and_never_mixes_strings() -> None:
    memo = _StringChunks(max_chars=40_000, max_string=15_000)
    kept = [f"{i:05d}" * 400 for i in range(20)]  # 2,000 chars each, 4,000 with the escaped copy
    for s in kept:
        memo.get(s)
    assert memo._memo.chars <= 40_000 and len(memo._memo) <= 10
    for s in kept:  # evicted or not, each string gets its own chunk
        d, text = memo.get(s)
        assert text == journal.encode_basestring_ascii(s) and d == digest(text)
    huge = "x" * 20_000
    memo.get(huge)
    assert id(huge) not in memo._memo  # longer than max_string: not kept


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.text(min_size=STR_MIN, max_size=STR_MIN + 40),  # long strings: chunks of their own
    st.just("\x00marker"),
)
_STATES = st.dictionaries(
    st.text(max_size=6),
    st.recursive(
        _LEAVES,
        lambda inner: st.lists(inner, max_size=60) | st.dictionaries(st.text(max_size=6), inner, max_size=60),
        max_leaves=80,
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(_STATES)
def test_skipping_the_whole_encoding_of_a_container_with_a_long_string_cuts_the_same_chunks(state) -> None:
    """`_holds_long_string` only spares encoding a container whose text is long anyway: the
    head and chunks are those of encoding every container first."""
    fast = split(state)
    with mock.patch.object(journal, "_holds_long_string", lambda v: False):
        slow = split(state)
    assert fast.body == slow.body and fast.chunks == slow.chunks
