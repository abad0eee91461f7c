"""log_folding masks hex ids with `_HEX_FAST`, `_HEX` rewritten to start with a character
class (`re` then skips to the next hex digit), and digits of ASCII text by a translation
(`_masked_digits`): each must replace exactly what its pattern does."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.passes.log_folding import _DIGITS, _HEX, _HEX_FAST, _masked_digits

_PIECES = st.sampled_from(
    [
        "0", "00", "0x", "0X", "x", "X", "1234", "56", "abc", "DEF", "deadbeef", "CAFE12", "g", "G",
        "_", "-", ".", " ", "\n", ":", "é", "٣", "ｆ", "0x0x", "x0", "ab_cd", "\u212a",
    ]
)  # fmt: skip
_TEXTS = st.lists(_PIECES, max_size=40).map("".join)


@settings(max_examples=1000, deadline=None)
@given(_TEXTS)
def test_the_fast_hex_mask_replaces_what_the_pattern_does(text: str) -> None:
    assert _HEX_FAST.sub("H", text) == _HEX.sub("H", text)
    assert [m.span() for m in _HEX_FAST.finditer(text)] == [m.span() for m in _HEX.finditer(text)]


def test_the_cases_that_tell_the_two_halves_apart() -> None:
    """Each line fails a variant that drops one half of the rewrite (checked by hand)."""
    for text in ("a0123456", "_0123456", "0x123456", "0x12345", "x0123456", "0x0x123456", "é123456"):
        assert _HEX_FAST.sub("H", text) == _HEX.sub("H", text), text
    assert re.sub(_HEX, "H", "id 0x00ff00ff, at f00dfeed_1") == "id H, at f00dfeed_1"


_DIGIT_PIECES = st.sampled_from(
    ["0", "00", "000", "1", "9", "10", "007", "x", " ", "\n", "H", "a0b", "٣", "é", "0.5", "-"]
)


@settings(max_examples=1000, deadline=None)
@given(st.lists(_DIGIT_PIECES, max_size=40).map("".join))
def test_digits_are_masked_as_the_pattern_masks_them(text: str) -> None:
    assert _masked_digits(text) == _DIGITS.sub("0", text)
