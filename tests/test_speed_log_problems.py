"""log_folding's problem scan reads each distinct alike key once (`_problem_lines_by_key`)
and masks hex ids of ASCII text in ASCII mode (`_HEX_FAST_ASCII`): each must find exactly
what the plain scan and pattern find."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.passes.folding import original_lines
from tokenpilot.passes.log_folding import (
    _HEX,
    _HEX_FAST_ASCII,
    _PROBLEM_WORDS,
    LogFolding,
    _problem_lines,
    _problem_lines_by_key,
    alike_keys,
)

# Pieces that masks change (digits, hex words, timestamps) glued to pieces of problem
# words, so a mask could only hide or make one if the reasoning in the docstring were wrong.
_PIECES = st.sampled_from(
    [
        "error", "err", "or", "fa", "il", "fail", "can", "'t", "can't", "t", "T", "time", "d out",
        "not", " found", "ab", "ort", "al", "ca", "\u212aILLED", "k", "illed", "WARN", "h", "H", "x", "0x",
        "deadbeef", "cafe12", "1234567", "42", "0", "٣", "2026-12-05 10:00:01", "10:00:00", "2024-01-01T09:30Z",
        " ", "-", ":", "_", "é", "\t",
    ]
)  # fmt: skip
_LINES = st.lists(st.lists(_PIECES, max_size=8).map("".join), min_size=1, max_size=6)


@settings(max_examples=1500, deadline=None)
@given(_LINES, st.lists(st.integers(0, 5), min_size=1, max_size=40))
def test_scanning_keys_finds_exactly_the_problem_lines(variants: list[str], picks: list[int]) -> None:
    text = "".join(variants[i % len(variants)] + "\n" for i in picks)  # lines repeat: few keys
    lines = original_lines(text)
    keys = alike_keys(text)
    assert len(keys) == len(lines)
    assert _problem_lines_by_key(text, lines, keys) == _problem_lines(text, lines)


def test_a_glued_timestamp_that_makes_a_word_in_the_key_is_not_a_problem_line() -> None:
    """ "fa" + a timestamp + "al" masks to "faTal": the key names "fatal", the line does not."""
    text = "fa2026-12-05 10:00al\n" * 8 + "ok\n" * 8
    lines = original_lines(text)
    keys = alike_keys(text)
    assert "faTal" in keys[0]
    assert _problem_lines_by_key(text, lines, keys) == _problem_lines(text, lines) == [False] * 16


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(
        st.sampled_from(["0", "0x", "x", "abc", "DEF", "deadbeef", "123456", "_", "-", " ", "\n", "g"]),
        max_size=40,
    ).map("".join)
)
def test_the_ascii_hex_mask_replaces_what_the_pattern_does(text: str) -> None:
    assert _HEX_FAST_ASCII.sub("H", text) == _HEX.sub("H", text)


def test_every_problem_word_survives_its_own_mask() -> None:
    """The claim the key scan rests on, word by word: masking a line never removes a word."""
    for word in _PROBLEM_WORDS:
        line = f"12 {word} 0xdeadbeef 2026-12-05 10:00:01 {word}ab12"
        assert word in alike_keys(line)[0].lower(), word


def test_folding_a_repetitive_log_keeps_its_problem_lines() -> None:
    body = "".join(f"step {n}: value={n * 104729}\n" for n in range(400))
    text = body.replace("step 200: value", "step 200: ERROR value")
    out = LogFolding().apply(text, _ctx())
    assert "step 200: ERROR value" in out and "more lines like this" in out


def _ctx():
    from tokenpilot.passes.base import PassContext

    return PassContext(tool_name="exec", arguments={"command": "./run"}, artifact_id="art_" + "0" * 24)
