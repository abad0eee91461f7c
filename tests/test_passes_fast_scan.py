"""log_folding scans whole texts at once for speed (`alike_keys`, `_problem_lines`):
these properties pin that each gives, line for line, what the per-line definition gives,
on random text built from the characters that matter (digits, hex letters, clock and
date separators, line breaks of every kind, problem words in any case, non-ASCII)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.passes.log_folding import _PROBLEM, _problem_lines, alike_key, alike_keys

_PIECES = st.sampled_from(
    [
        "0", "7", "12", "2024-01-02", "T", " ", "10:00:01", ".123", ",5", "Z", "+02:00", "-0530",
        "0x", "deadbeef", "CAFE12", "facade", "g", "_", "\\n", "\n", "\r\n", "\r", "\x0b", "\x1c",
        "\u2028", "\x85", "ERROR", "Fail", "timed out", "Time Out", "TIMEOUT", "can't", "Not Found",
        "warn", "K", "\u212a", "\u017f", "٣", "é", "✗", "\t", "  ",
    ]
)  # fmt: skip
_TEXTS = st.lists(_PIECES, max_size=60).map("".join)


@settings(max_examples=400, deadline=None)
@given(_TEXTS)
def test_alike_keys_equal_the_per_line_key_of_every_line(text: str) -> None:
    lines = text.splitlines(keepends=True)
    assert alike_keys(text) == [alike_key(ln) for ln in lines]


@settings(max_examples=400, deadline=None)
@given(_TEXTS)
def test_problem_lines_equal_the_per_line_pattern(text: str) -> None:
    lines = text.splitlines(keepends=True)
    assert _problem_lines(text, lines) == [bool(_PROBLEM.search(ln)) for ln in lines]


def test_the_fast_word_list_is_the_pattern_on_ascii() -> None:
    """Each ASCII alternative of `_PROBLEM` is found by the word scan, and a line with
    none of them is not: a word added to one and not the other fails here."""
    ascii_words = [w for w in re.split(r"\|", _PROBLEM.pattern.replace("\n", "")) if w.isascii()]
    samples = ["timed out", "time out", "timeout", "timedout"] + [w for w in ascii_words if "?" not in w]
    for word in samples:
        line = f"x {word.upper()} y\n"
        assert _problem_lines(line, [line]) == [True], word
    clean = "all 12 tests passed in 0.3s\n"
    assert _problem_lines(clean, [clean]) == [False]


_LINE_PIECES = st.sampled_from(
    [
        "src", "/", "./", "../", "a.py", ":", "12", ":3:", "-7-", "-", " ", "x", "é", "\t", "~", "@", "+",
        "drwxr-xr-x", "Dec", "def f():", "TODO", "node_modules/", "\\",
        "lrwxrwxrwx 1 root root 7 Jan  1 12:00 bin -> usr/bin", "drwxrwxrwt 2 a b 4,096 Dec 4 2026 tmp",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(_LINE_PIECES, max_size=8).map("".join), max_size=12))
def test_search_listing_counts_an_upper_bound_of_its_hits(lines: list[str]) -> None:
    """The whole-text count `search_listing` checks first is never below the lines its
    parser accepts, so the shortcut never skips an output it would have grouped."""
    from tokenpilot.passes.search_listing import _MAYBE, SearchListing

    text = "\n".join(lines) + "\n"
    parsed = [SearchListing()._split(ln) for ln in text.splitlines(keepends=True)]
    assert len(_MAYBE.findall(text)) >= sum(p is not None for p in parsed)
