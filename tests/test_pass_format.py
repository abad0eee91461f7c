"""FormatCleaning and FormatSlimming: lossless for words, every setting observable."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.passes.base import PassContext, ReductionPass
from tokenpilot.passes.format_cleaning import FormatCleaning
from tokenpilot.passes.format_slimming import FormatSlimming

CTX = PassContext(tool_name="bash", artifact_id="art-1")

ALL_OFF = dict(
    fix_surrogates=False,
    strip_ansi=False,
    resolve_carriage_returns=False,
    strip_invisible=False,
    unwrap_fences=False,
    strip_trailing_whitespace=False,
    collapse_blank_lines=False,
)


def only(setting: str) -> FormatCleaning:
    """A cleaner with just one step on, to show that step alone changes the output."""
    return FormatCleaning(**{**ALL_OFF, setting: True})


BUILD_LOG = (
    "\x1b]0;make\x07\x1b[1m\x1b[32mCompiling\x1b[0m foo v0.1.0 (/src/foo)   \n"
    "Downloading  10%\rDownloading  55%\rDownloading 100%\r\n"
    "\x1b[2K\x1b[1G\x1b[33mwarning\x1b[0m: unused variable `x`\u200b\n"
    "\n\n\n\n\n"
    "\x1b[31;1merror[E0308]\x1b[0m: mismatched types\t \n"
    "\ufeffFinished in 3.2s\n\n\n"
)


# -- FormatCleaning -----------------------------------------------------------------------


def test_cleaning_build_log() -> None:
    out = FormatCleaning(resolve_carriage_returns=True).apply(BUILD_LOG, CTX)
    assert out == (
        "Compiling foo v0.1.0 (/src/foo)\n"
        "Downloading 100%\n"
        "warning: unused variable `x`\n"
        "\n"
        "error[E0308]: mismatched types\n"
        "Finished in 3.2s\n"
    )


def test_redraws_are_kept_by_default() -> None:
    # recall_artifact counts each \r segment as a line: dropping the redrawn ones would lose
    # lines with no marker where they were (tests/contract.py)
    out = FormatCleaning().apply("get 10%\rget 50%\rget 100%\ndone\n", CTX)
    assert "get 10%" in out and "get 50%" in out


def test_cleaning_is_a_reduction_pass_and_returns_same_object_when_clean() -> None:
    assert isinstance(FormatCleaning(), ReductionPass)
    clean = "all good\n  indented\n\nend\n"
    assert FormatCleaning().apply(clean, CTX) is clean


def test_cleaning_idempotent_on_log() -> None:
    once = FormatCleaning().apply(BUILD_LOG, CTX)
    assert FormatCleaning().apply(once, CTX) is once


def test_setting_fix_surrogates() -> None:
    text = "bad \udcff byte, split pair \ud83d\ude00"
    assert only("fix_surrogates").apply(text, CTX) == "bad \ufffd byte, split pair \U0001f600"
    assert FormatCleaning(fix_surrogates=False).apply(text, CTX) is text
    FormatCleaning().apply(text, CTX).encode("utf-8")  # encodable afterwards


def test_setting_strip_ansi() -> None:
    text = "\x1b[1;31mERROR\x1b[0m \x1b]8;;https://x.y\x1b\\link\x1b]8;;\x1b\\ \x1b(Bok\x9b0m"
    assert only("strip_ansi").apply(text, CTX) == "ERROR link ok"
    kept = FormatCleaning(strip_ansi=False).apply(text, CTX)
    assert "\x1b[1;31m" in kept  # ESC is not stripped as a control char when ANSI is kept


def test_setting_resolve_carriage_returns() -> None:
    text = "10%\r55%\r100%\r\ndone\r\nDownloaded\rX\n"
    assert only("resolve_carriage_returns").apply(text, CTX) == "100%\ndone\nX\n"
    assert FormatCleaning(resolve_carriage_returns=False).apply(text, CTX) is text


def test_setting_strip_invisible() -> None:
    text = (
        "a\u200bb\ufeffc\x00d\x07e\u00adf N\x08NA\x08AM\x08ME _\x08u \U0001f468\u200d\U0001f469 \u200c\tend"
    )
    out = only("strip_invisible").apply(text, CTX)
    assert out == "abcdef NAME u \U0001f468\u200d\U0001f469 \u200c\tend"  # ZWJ / ZWNJ / tab kept
    assert FormatCleaning(strip_invisible=False).apply(text, CTX) is text


def test_setting_unwrap_fences() -> None:
    text = '```json\n{"a": 1}\n\n  indented\n```\n'
    assert only("unwrap_fences").apply(text, CTX) == '{"a": 1}\n\n  indented'
    assert FormatCleaning(unwrap_fences=False).apply(text, CTX) is text
    # longer outer fence around an inner one
    nested = "````md\n```py\nx\n```\n````"
    assert only("unwrap_fences").apply(nested, CTX) == "```py\nx\n```"


@pytest.mark.parametrize(
    "text",
    [
        "```py\na\n```\nprose\n```py\nb\n```",  # two blocks
        "intro\n```py\na\n```",  # prose first
        "```py\na\n```\ntrailing prose",
        "```py\nunclosed",
        "```py\na\n~~~",  # mismatched fence
    ],
)
def test_unwrap_only_a_single_outer_fence(text: str) -> None:
    assert only("unwrap_fences").apply(text, CTX) is text


def test_setting_strip_trailing_whitespace() -> None:
    text = "a   \nb\t\n  c  "
    assert only("strip_trailing_whitespace").apply(text, CTX) == "a\nb\n  c"
    assert FormatCleaning(strip_trailing_whitespace=False).apply(text, CTX) is text


def test_setting_collapse_blank_lines() -> None:
    text = "\n\n  first\n\n\n\nsecond\n\n\nthird\n\n\n\n"
    out = only("collapse_blank_lines").apply(text, CTX)
    assert out == "  first\n\nsecond\n\n\nthird\n"  # 3 blank -> 1; 2 blank stay (PEP 8)
    assert FormatCleaning(collapse_blank_lines=False).apply(text, CTX) is text
    assert only("collapse_blank_lines").apply("a\n \t\n\n\n b", CTX) == "a\n\n b"


def test_all_off_is_identity() -> None:
    assert FormatCleaning(**ALL_OFF).apply(BUILD_LOG, CTX) is BUILD_LOG


# -- FormatSlimming -----------------------------------------------------------------------

TABLE = "|  Name      |   Age |\n|------------|------:|\n|  Alice     |    30 |\n|  B\\|ob     |     4 |"
RICH = "┏━━━┳━━━┓\n┃ a ┃ b ┃\n┡━━━╇━━━┩\n│ 1 │ 2 │\n└───┴───┘"
GRID = "+-----+-----+\n| x   | y   |\n+=====+=====+\n| 1   | 2   |\n+-----+-----+"


def slim_only(setting: str, value: object = True) -> FormatSlimming:
    off = dict(table_padding=False, max_rule_run=None, box_drawing=False, dedent=False)
    return FormatSlimming(**{**off, setting: value})


def test_slimming_is_a_reduction_pass_and_returns_same_object() -> None:
    assert isinstance(FormatSlimming(), ReductionPass)
    plain = "def f(x):\n    return x  # a | b\n"
    assert FormatSlimming().apply(plain, CTX) is plain


def test_setting_table_padding() -> None:
    out = slim_only("table_padding").apply(TABLE, CTX)
    assert out == "| Name | Age |\n| --- | ---: |\n| Alice | 30 |\n| B\\|ob | 4 |"
    kept = FormatSlimming(table_padding=False).apply(TABLE, CTX)
    assert kept.startswith("|  Name      |   Age |\n|---|------:|\n|  Alice     |    30 |")  # rule only
    lone = "|  just one row   |"
    assert FormatSlimming().apply(lone, CTX) is lone


def test_setting_max_rule_run() -> None:
    text = "=" * 30 + " test session starts " + "=" * 30 + "\n" + "-" * 8 + "\n-----BEGIN KEY-----"
    assert FormatSlimming().apply(text, CTX) == "=== test session starts ===\n--------\n-----BEGIN KEY-----"
    assert FormatSlimming(max_rule_run=40).apply(text, CTX) is text
    assert FormatSlimming(max_rule_run=None).apply(text, CTX) is text
    assert FormatSlimming(max_rule_run=4).apply(text, CTX).endswith("---\n---BEGIN KEY---")
    assert FormatSlimming().apply("a" + "─" * 20 + "b", CTX) == "a───b"
    assert FormatSlimming().apply("x" + "_" * 20, CTX) == "x" + "_" * 20  # not a rule char


def test_setting_box_drawing() -> None:
    assert slim_only("box_drawing").apply(RICH, CTX) == "| a | b |\n| 1 | 2 |"
    assert slim_only("box_drawing").apply(GRID, CTX) == "| x   | y   |\n| 1   | 2   |"
    assert FormatSlimming().apply(GRID, CTX) == "| x | y |\n| 1 | 2 |"
    assert FormatSlimming(box_drawing=False).apply(RICH, CTX) is RICH
    tree = "├── src\n│   └── main.py\n└── README.md"
    assert FormatSlimming().apply(tree, CTX) is tree  # lines with words are never borders


def test_setting_dedent() -> None:
    text = "        def f():\n            return 1\n\n        x = 2"
    assert slim_only("dedent").apply(text, CTX) == "def f():\n    return 1\n\nx = 2"
    assert FormatSlimming(dedent=False).apply(text, CTX) is text
    ragged = "top\n    nested\n        deeper"
    assert FormatSlimming().apply(ragged, CTX) is ragged  # nothing common: never re-indented


def test_slimming_keeps_every_word() -> None:
    text = "\n".join([RICH, TABLE, GRID, "=" * 40, "    tail words here"])
    out = FormatSlimming().apply(text, CTX)
    for word in ("Name", "Age", "Alice", "B\\|ob", "30", "tail", "words", "here", "x", "y"):
        assert word in out
    assert len(out) < len(text) * 0.6


# -- both: purity, bad input, properties ----------------------------------------------------

PASSES = [FormatCleaning(), FormatSlimming()]


@pytest.mark.parametrize("p", PASSES, ids=lambda p: p.name)
def test_pure(p: FormatCleaning | FormatSlimming) -> None:
    text = BUILD_LOG + TABLE + RICH
    first = p.apply(text, CTX)
    assert p.apply(text, CTX) == first
    assert type(p)().apply(text, CTX) == first


def _garbage(n: int) -> str:
    return random.Random(7).randbytes(n).decode("utf-8", "surrogateescape")


@pytest.mark.parametrize("p", PASSES, ids=lambda p: p.name)
@pytest.mark.parametrize(
    "text",
    ["", "\udcff", "\x00" * 10, "\x1b", "\x1b]unterminated OSC " * 1000, "```", "|", _garbage(200_000)],
    ids=["empty", "surrogate", "nul", "esc", "osc", "fence", "pipe", "garbage"],
)
def test_bad_input_does_not_raise(p: FormatCleaning | FormatSlimming, text: str) -> None:
    out = p.apply(text, CTX)
    assert isinstance(out, str)
    assert p.apply(text, CTX) == out


def test_cleaned_garbage_is_utf8_encodable() -> None:
    FormatCleaning().apply(_garbage(100_000), CTX).encode("utf-8")


@pytest.mark.parametrize("p", PASSES, ids=lambda p: p.name)
def test_large_input_is_linear(p: FormatCleaning | FormatSlimming) -> None:
    text = ("\x1b[32mok\x1b[0m line with  trailing   \r\n" * 150_000) + "|" * 1_000_000 + "-" * 1_000_000
    out = p.apply(text, CTX)
    assert isinstance(out, str)
    assert p.apply(None, CTX) is None  # type: ignore[arg-type]


_ALPHABET = st.sampled_from(list("ab |-=+:─│┃━┏┓\n\t\r\x1b[m0`\u200b\udcff"))


@settings(max_examples=300, deadline=None)
@given(st.text(_ALPHABET, max_size=200))
def test_slimming_never_raises_and_is_idempotent(text: str) -> None:
    once = FormatSlimming().apply(text, CTX)
    assert FormatSlimming().apply(once, CTX) == once


@settings(max_examples=300, deadline=None)
@given(st.text(_ALPHABET, max_size=200))
def test_cleaning_never_raises_and_output_is_encodable(text: str) -> None:
    out = FormatCleaning(resolve_carriage_returns=True).apply(text, CTX)
    out.encode("utf-8")
    assert "\x1b" not in out and "\r" not in out


def test_redraws_fold_into_a_marker_naming_the_original_lines() -> None:
    from tokenpilot._canonical import artifact_id_for
    from tokenpilot.passes.folding import parse_markers

    frames = "".join(f"  downloading {'#' * (k // 4)}{'.' * (25 - k // 4)} {k}%\r" for k in range(100))
    text = "start\n" + frames + "  downloading done 100%\nnext step\n"
    aid = artifact_id_for(text)
    out = FormatCleaning().apply(text, PassContext(tool_name="bash", artifact_id=aid))
    ((marker_aid, start, end),) = parse_markers(out)
    lines = text.splitlines(keepends=True)
    assert marker_aid == aid and (start, end) == (2, 101)
    assert "".join(lines[start - 1 : end]) == frames  # exactly the redraws: what a recall returns
    assert out.endswith("  downloading done 100%\nnext step\n") and out.startswith("start\n")
    # not the original (another pass ran first): its line numbers would not be the original's
    assert FormatCleaning().apply(text, PassContext(tool_name="bash", artifact_id="art_x")) == text
