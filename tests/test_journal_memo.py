"""The journal remembers the chunk of each long string it saved lately, by identity:
a save that meets the same string object again reuses it, an equal string of another
identity gets the same chunk, and the memo stays within its bound."""

from __future__ import annotations

from tokenpilot import journal
from tokenpilot.journal import STR_MIN, _StringChunks, digest, split


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
    assert memo._chars <= 40_000 and len(memo._by_id) <= 10
    for s in kept:  # evicted or not, each string gets its own chunk
        d, text = memo.get(s)
        assert text == journal.encode_basestring_ascii(s) and d == digest(text)
    huge = "x" * 20_000
    memo.get(huge)
    assert id(huge) not in memo._by_id  # longer than max_string: not kept
