"""A resent message is recognised by comparing it with the original kept in `raw_memo`
instead of hashing it again: the answer must be the hashing's answer, memo or not."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.history import raw_memo
from tokenpilot.history.fingerprint import Digest, digest, keep, same

_text = st.text(min_size=raw_memo.MIN_CHARS, max_size=raw_memo.MIN_CHARS + 64)


def _copy(text: str) -> str:
    """An equal string that is another object (as a proxy's JSON parse gives)."""
    return "".join(list(text))


@st.composite
def _pairs(draw: st.DrawFn) -> tuple[str, str]:
    """An original and a resend: the same text, one char changed (same length), or other text."""
    a = draw(_text)
    how = draw(st.sampled_from(["same", "one_char", "other"]))
    if how == "same":
        return a, _copy(a)
    if how == "one_char":
        i = draw(st.integers(0, len(a) - 1))
        c = draw(st.characters().filter(lambda ch: ch != a[i]))
        return a, a[:i] + c + a[i + 1 :]
    return a, draw(_text)


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    raw_memo.clear()


@settings(max_examples=300, deadline=None)
@given(_pairs(), st.booleans())
def test_same_agrees_with_hashing_with_and_without_the_memo(pair: tuple[str, str], forget: bool) -> None:
    raw_memo.clear()
    a, b = pair
    kept = keep(a, "the reduced form")  # a reduced output: the entry keeps its digest
    assert isinstance(kept, Digest)
    if forget:  # another replica ingested it, or the memo dropped it: hashing decides
        raw_memo.clear()
    truth = digest(b) == kept
    assert same(kept, b) is truth
    assert same(kept, b) is truth  # again, now possibly answered by the memo
    assert same(kept, _copy(a)) is True


def test_a_resend_after_a_miss_is_remembered() -> None:
    a = "x" * 5000
    kept = keep(a, "frozen")
    raw_memo.clear()
    assert raw_memo.recall(kept) is None
    assert same(kept, _copy(a))
    assert raw_memo.recall(kept) == a  # the next resend compares instead of hashing


def test_a_changed_resend_is_never_remembered() -> None:
    a = "y" * 5000
    kept = keep(a, "frozen")
    raw_memo.clear()
    changed = a[:-1] + "z"
    assert not same(kept, changed)
    assert raw_memo.recall(kept) is None
    assert same(kept, _copy(a))


def test_memory_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raw_memo, "MAX_CHARS", 10_000)
    kept = [keep(f"{i:04d}" + "q" * 2996, "frozen") for i in range(20)]
    assert raw_memo.held_chars() <= 10_000
    assert raw_memo.recall(kept[0]) is None  # the oldest left first
    assert raw_memo.recall(kept[-1]) is not None
    # a digest whose original left is still recognised, by hashing
    assert same(kept[0], "0000" + "q" * 2996)
    assert not same(kept[0], "0000" + "q" * 2995 + "r")
    assert raw_memo.held_chars() <= 10_000


def test_texts_over_the_bound_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raw_memo, "MAX_CHARS", 1000)
    kept = keep("w" * 2000, "frozen")
    assert raw_memo.held_chars() == 0
    assert same(kept, "w" * 2000)
    assert raw_memo.held_chars() == 0


def test_a_huge_original_is_never_kept() -> None:
    huge = "v" * (raw_memo.MAX_STRING + 1)
    kept = keep(huge, "frozen")
    assert same(kept, _copy(huge))
    assert raw_memo.held_chars() == 0
