"""Faults the core must survive: hostile patterns and arguments, malformed or huge inputs,
lone surrogates, a full disk, and many processes on one store."""

from __future__ import annotations

import errno
import json
import re

import pytest

from tokenpilot import TokenPilot, recall_search
from tokenpilot.artifacts import ArtifactStore
from tokenpilot.recall_search import search_lines

LOG = "".join(f"line {i}: value {i * 7}\n" for i in range(1, 101))


# ---------------------------------------------------------------------------
# 1. recall patterns run in linear time, with Python-re-like results
# ---------------------------------------------------------------------------
def _recall(text: str, pattern: str, **kw):
    store = ArtifactStore()
    return store.recall("s", store.put("s", text), pattern=pattern, **kw)


def test_a_catastrophic_pattern_matches_like_re_would_without_backtracking():
    text = "a" * 40 + "b\n" + "a" * 40 + "\nzzz\n"
    r = _recall(text, r"(a+)+$")
    assert r.text == "2: " + "a" * 40 + "\n"
    assert "1 of 3 lines" in r.note and "plain text" not in r.note


@pytest.mark.parametrize(
    "pattern",
    [
        r"value 7[1-9]\b",
        r"^line 1\d:",
        r"\d$",
        r"(?i)LINE 5:",
        r"\bvalue 14\b",
        r"[13579]: value",
        r"\s\d{3}$",
    ],
)
def test_common_patterns_give_what_re_gave_on_each_line(pattern):
    expected = "".join(
        f"{i + 1}: {line}" for i, line in enumerate(LOG.splitlines(True)) if re.search(pattern, line)
    )
    assert expected and _recall(LOG, pattern).text == expected


def test_anchors_are_per_line_and_python_z_works():
    assert _recall(LOG, r"77\Z").text == "11: line 11: value 77\n"
    assert _recall(LOG, r"\Aline 100:").text == "100: line 100: value 700\n"
    assert _recall("ab\r\ncd\rab\u2028ef", r"^ab").text == "1: ab\r\n3: ab\u2028"


def test_no_match_spans_a_line_break():
    assert _recall("foo\nbar\n", r"foo\s+bar").text == ""
    assert _recall("foo\nbar\n", r"o[^x]b").text == ""


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(ab)\1", "does not support (invalid escape sequence: \\1"),
        (r"x(?=ab)", "does not support (invalid perl operator: (?="),
        (r"(?<=x)ab", "does not support (invalid perl operator: (?<="),
        (r"ab*+", "does not support (bad repetition operator: *+"),
        ("[ab", "invalid pattern (missing ]: [ab)"),
        ("(ab", "invalid pattern (missing ): (ab)"),
        (r"((\pL{100}){10}){10}", "invalid pattern (invalid repetition size: {10})"),
    ],
)
def test_unsupported_or_invalid_patterns_are_searched_as_plain_text(pattern, why):
    text = f"first\nhas {pattern} in it\nlast {pattern.upper()}\n"
    r = _recall(text, pattern)
    assert r.text == f"2: has {pattern} in it\n"  # case-sensitive: line 3 differs in case
    assert why in r.note
    assert "searched for it as plain text instead: 1 of 3 lines of art_" in r.note
    assert r.note.endswith(f"contain {pattern!r}]")


def test_a_pattern_over_the_memory_budget_is_searched_as_plain_text():
    huge = r"\pL{999}\pL{999}"
    r = _recall(f"x\n{huge}\n", huge)
    assert r.text == f"2: {huge}\n"
    assert r.note.startswith("[tokenpilot: the pattern is too large to match within 32 MiB; searched")
    small = _recall("x\n" + "é" * 999 + "\n", r"\pL{999}")
    assert small.text == "2: " + "é" * 999 + "\n" and "plain text" not in small.note


def test_the_pattern_length_limit_still_holds():
    r = _recall(LOG, "|".join(f"w{i:04d}" for i in range(300)))
    assert r.text == "" and r.note == "[tokenpilot: pattern too long (1,799 chars; the limit is 1,000)]"


def test_long_lines_give_snippets_in_the_same_format_for_regex_and_plain_text():
    line = "x" * 3000 + "ERROR 42(" + "y" * 3000
    text = "short\n" + line + "\n"
    rx = _recall(text, r"ERROR \d+\(")
    lit = _recall(text, "ERROR 42(")  # invalid regex: plain text
    expected = f"2[chars 2800-3209 of {len(line) + 1}]: " + "x" * 200 + "ERROR 42(" + "y" * 200 + "\n"
    assert rx.text == expected and lit.text == expected
    assert "plain text" in lit.note and "plain text" not in rx.note


def test_snippet_offsets_count_characters_not_utf8_bytes():
    line = "é" * 2500 + "needle" + "ü" * 10
    r = _recall(line, "need+le")
    assert r.text == f"1[chars 2300-2516 of {len(line)}]: " + "é" * 200 + "needle" + "ü" * 10 + "\n"


def test_lone_surrogates_in_text_and_pattern():
    text = "ok\nbad \ud800 here\nend\n"
    assert _recall(text, r"bad . here").text == "2: bad \ud800 here\n"  # matched as U+FFFD
    r = _recall(text, "\ud800 here")
    assert r.text == "2: bad \ud800 here\n" and "lone surrogate" in r.note


def test_windows_and_cuts_inside_long_lines_find_the_same_lines(monkeypatch):
    lines = ("a" * 50 + "needle" + "b" * 50 + "\n" + "short needle\n" + "c" * 90 + "\n") * 20
    pattern = r"ne+dle"
    whole = search_lines(lines.splitlines(True), pattern)
    monkeypatch.setattr(recall_search, "WINDOW_BYTES", 16)
    monkeypatch.setattr(recall_search, "MAX_WINDOW_BYTES", 40)
    monkeypatch.setattr(recall_search, "OVERLAP_BYTES", 10)
    monkeypatch.setattr(recall_search, "LONG_LINE", 20)
    cut = search_lines(lines.splitlines(True), pattern)
    assert whole.matched == cut.matched == 40 and cut.stopped_at is None


def test_the_time_budget_stops_at_a_window_and_says_where(monkeypatch):
    monkeypatch.setattr(recall_search, "WINDOW_BYTES", 1000)
    monkeypatch.setattr(recall_search, "MAX_WINDOW_BYTES", 2000)
    lines = LOG.splitlines(True) * 30
    r = search_lines(lines, "value", budget_s=0.0)  # stops after the first window
    assert r.stopped_at is not None and 0 < r.stopped_at < len(lines)
    assert r.matched == r.stopped_at  # every line searched matched; none after
    assert search_lines(lines, "value").stopped_at is None


# ---------------------------------------------------------------------------
# 2. execute_recall answers hostile arguments with a tool result, never an exception
# ---------------------------------------------------------------------------
def _pilot_with_artifact() -> tuple[TokenPilot, str]:
    tp = TokenPilot(lifecycle=False)
    aid = tp.store.put("s", LOG)
    tp.session("s")
    return tp, aid


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "the JSON is nested too deeply"),
        ('{"artifact_id": ' + "[" * 100_000 + "]" * 100_000 + "}", "the JSON is nested too deeply"),
        ("{not json", "not JSON (Expecting property name enclosed in double quotes"),
        ("1" * 5000, "not JSON (Exceeds the limit"),
        ("[1, 2]", "arguments must be a JSON object, got an array"),
        ("null", "arguments must be a JSON object, got null"),
        ("{}", "'artifact_id' is missing"),
        ('{"artifact_id": 12}', "'artifact_id' must be a string, got a number"),
        ('{"artifact_id": ["art_1"]}', "'artifact_id' must be a string, got an array"),
        ('{"artifact_id": null}', "'artifact_id' must be a string, got null"),
        ('{"artifact_id": "x", "start_line": true}', "'start_line' must be an integer, got a boolean"),
        ('{"artifact_id": "x", "end_line": 2.5}', "'end_line' must be an integer, got a number"),
        ('{"artifact_id": "x", "pattern": {"a": 1}}', "'pattern' must be a string, got an object"),
        (b"\xff\xfe", "arguments are not UTF-8"),
        (42, "arguments must be a JSON object, got a number"),
    ],
)
def test_execute_recall_turns_hostile_arguments_into_a_clear_tool_result(arguments, problem):
    tp, _ = _pilot_with_artifact()
    out = tp.execute_recall(arguments, session_id="s")
    assert out.startswith(f"[tokenpilot: invalid recall_artifact arguments: {problem}")
    assert out.endswith('Expected {"artifact_id": "art_…"}]')


def test_execute_recall_still_runs_good_arguments_given_as_text_bytes_or_objects():
    tp, aid = _pilot_with_artifact()
    for args in (
        json.dumps({"artifact_id": aid, "pattern": "value 77$"}),
        {"artifact_id": aid, "pattern": "value 77$"},
    ):
        assert tp.execute_recall(args, session_id="s").endswith("\n11: line 11: value 77\n")
    assert tp.execute_recall(json.dumps({"artifact_id": aid}).encode(), session_id="s").endswith(LOG)
    huge = tp.execute_recall(json.dumps({"artifact_id": aid, "start_line": 10**30}), session_id="s")
    assert "past the end" in huge


def test_execute_recall_reports_an_unreadable_store_instead_of_raising(monkeypatch):
    tp, aid = _pilot_with_artifact()

    def broken(*_a, **_k):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(tp.store, "get_bytes", broken)
    out = tp.execute_recall({"artifact_id": aid}, session_id="s")
    assert (
        out
        == "[tokenpilot: the artifact store could not be read ([Errno 5] Input/output error); try again later]"
    )
