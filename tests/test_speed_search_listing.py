"""search_listing's upper bound of candidate lines (`maybe_count`) and its check for line
breaks `^` does not see (`other_breaks`) are computed faster than by their patterns: each
must give what its pattern gives, on text built from the characters that matter."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.passes.search_listing import _MAYBE, _OTHER_BREAKS, maybe_count, other_breaks

_PIECES = st.sampled_from(
    [
        "\n", "\n\n", "a", "src/a.py", ":", "12", ":3:", "-7-", "-", "/", " ", "x", "é", "\t", "~", "@",
        "+", ".", "drwxr-xr-x", "lrwxrwxrwt", "-rw-r--r--", "crw", "\r", "\r\n", "\x0b", "\x0c", "\x1c",
        "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "٣",
    ]
)  # fmt: skip
_TEXTS = st.lists(_PIECES, max_size=50).map("".join)


@settings(max_examples=1500, deadline=None)
@given(_TEXTS)
def test_maybe_count_is_the_patterns_count(text: str) -> None:
    assert maybe_count(text) == len(_MAYBE.findall(text))


@settings(max_examples=1500, deadline=None)
@given(_TEXTS)
def test_other_breaks_is_the_patterns_search(text: str) -> None:
    assert other_breaks(text) is (_OTHER_BREAKS.search(text) is not None)


def test_every_break_that_ascii_text_can_hold_is_seen() -> None:
    for c in "\r\x0b\x0c\x1c\x1d\x1e":
        assert other_breaks(f"a{c}b"), repr(c)
    assert not other_breaks("a\nb\tc")
