"""LineNumberStrip: consecutive prefixes go, the range stays in a header."""

from __future__ import annotations

import random

import pytest

from tokenpilot.passes.base import PassContext, ReductionPass
from tokenpilot.passes.line_numbers import LineNumberStrip

CTX = PassContext(tool_name="Read", artifact_id="art-1")

SOURCE = ["def f(x):", "    if x:", "\treturn 1", "", "    return 0  # 12: not a prefix", "print(f(2))"]


def cat_n(lines: list[str], start: int = 1) -> str:
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(lines, start))


def test_is_a_reduction_pass() -> None:
    assert isinstance(LineNumberStrip(), ReductionPass)
    assert LineNumberStrip.name == "line_numbers"


def test_cat_n() -> None:
    out = LineNumberStrip().apply(cat_n(SOURCE), CTX)
    assert out == "[lines 1-6]\n" + "\n".join(SOURCE)


def test_claude_code_read_arrow_with_offset() -> None:
    text = "\n".join(f"{i:>6}→{line}" for i, line in enumerate(SOURCE, 120))
    assert LineNumberStrip().apply(text, CTX) == "[lines 120-125]\n" + "\n".join(SOURCE)


def test_claude_code_read_tab_with_trailing_notice() -> None:
    text = "\n".join(f"  {i}\t{line}" for i, line in enumerate(SOURCE, 12)) + "\n\n(file has more lines)"
    out = LineNumberStrip().apply(text, CTX)
    assert out == "[lines 12-17]\n" + "\n".join(SOURCE) + "\n\n(file has more lines)"


def test_nl_leaves_blank_lines_unnumbered() -> None:
    text = "     1\talpha\n       \n     2\tbeta\n     3\tgamma\n"
    assert LineNumberStrip().apply(text, CTX) == "[lines 1-3]\nalpha\n       \nbeta\ngamma\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10: alpha\n11:   indented\n12: gamma", "alpha\n  indented\ngamma"),
        ("10:alpha\n11:    indented\n12:gamma", "alpha\n    indented\ngamma"),
        ("  9 | alpha\n 10 | beta\n 11 |     gamma", "alpha\nbeta\n    gamma"),
        ("9| alpha\n10| beta\n11| gamma", "alpha\nbeta\ngamma"),
    ],
)
def test_editor_styles(text: str, expected: str) -> None:
    first = text.split(":")[0].split("|")[0].strip()
    out = LineNumberStrip().apply(text, CTX)
    assert out == f"[lines {first}-{int(first) + 2}]\n{expected}"


@pytest.mark.parametrize(
    "text",
    [
        "3:found here\n17:and here\n240:and there",  # grep -n: the numbers are information
        "12:30:45 start\n12:30:46 step\n13:00:00 done",  # timestamps
        "1\talpha\n1\tbeta\n1\tgamma",  # same number
        "3\tc\n2\tb\n1\ta",  # descending
        "plain text\nwithout numbers\nat all",
        "",
        "\n\n\n",
    ],
)
def test_not_line_numbered(text: str) -> None:
    assert LineNumberStrip().apply(text, CTX) is text


def test_spurious_numbered_line_in_content_is_kept() -> None:
    text = "1: a\n2: b\n99: looks numbered\n3: c\n4: d\n5: e"
    out = LineNumberStrip(min_ratio=0.5).apply(text, CTX)
    assert out == "[lines 1-5]\na\nb\n99: looks numbered\nc\nd\ne"


# -- every setting changes behaviour ----------------------------------------------------


def test_setting_min_lines() -> None:
    text = cat_n(["only", "two"])
    assert LineNumberStrip().apply(text, CTX) is text
    assert LineNumberStrip(min_lines=2).apply(text, CTX) == "[lines 1-2]\nonly\ntwo"


def test_setting_min_ratio() -> None:
    # 7 numbered of 10 non-blank lines: 70 %
    text = cat_n([f"row {i}" for i in range(7)]) + "\nnote a\nnote b\nnote c"
    assert LineNumberStrip().apply(text, CTX) is text
    out = LineNumberStrip(min_ratio=0.7).apply(text, CTX)
    assert out.startswith("[lines 1-7]\nrow 0\n") and out.endswith("row 6\nnote a\nnote b\nnote c")


def test_setting_header() -> None:
    text = cat_n(SOURCE, 40)
    assert LineNumberStrip(header=False).apply(text, CTX) == "\n".join(SOURCE)
    assert LineNumberStrip().apply(text, CTX).startswith("[lines 40-45]\n")


# -- purity and bad input ---------------------------------------------------------------


def test_pure() -> None:
    text = cat_n(SOURCE * 100)
    first = LineNumberStrip().apply(text, CTX)
    assert LineNumberStrip().apply(text, CTX) == first
    assert len(first) < len(text)


@pytest.mark.parametrize(
    "text",
    [
        "\udcff",
        "     1\t\udcff\n     2\t\x00\n     3\t\ud800",
        "\x00" * 1000,
        random.Random(3).randbytes(100_000).decode("latin-1"),
        "9" * 100_000 + "\t",
        "1\t" * 100_000,
    ],
    ids=["surrogate", "numbered-garbage", "nul", "latin1", "huge-number", "one-line"],
)
def test_bad_input_does_not_raise(text: str) -> None:
    out = LineNumberStrip().apply(text, CTX)
    assert isinstance(out, str)
    assert LineNumberStrip().apply(text, CTX) == out


def test_surrogates_in_numbered_lines_survive() -> None:
    text = "     1\t\udcff\n     2\t\x00\n     3\t\ud800"
    assert LineNumberStrip().apply(text, CTX) == "[lines 1-3]\n\udcff\n\x00\n\ud800"


def test_large_input() -> None:
    text = cat_n([f"    x = {i}  # some code" for i in range(50_000)])
    out = LineNumberStrip().apply(text, CTX)
    assert out.startswith("[lines 1-50000]\n    x = 0")
    assert LineNumberStrip().apply(None, CTX) is None  # type: ignore[arg-type]


def test_compact_keeps_every_number_without_padding() -> None:
    text = "\n".join(f"{i:>6}→{line}" for i, line in enumerate(SOURCE, 120))
    out = LineNumberStrip(compact=True).apply(text, CTX)
    assert out == "\n".join(f"{i}\t{line}" for i, line in enumerate(SOURCE, 120))
    assert LineNumberStrip(compact=True).apply(cat_n(SOURCE), CTX).startswith("1\tdef f(x):\n2\t    if x:")
    plain = "\n".join(SOURCE)
    assert LineNumberStrip(compact=True).apply(plain, CTX) is plain
