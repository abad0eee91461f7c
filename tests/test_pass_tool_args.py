"""ToolArgTruncation: long string arguments previewed; the result is always valid JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.passes.base import PassContext, ReductionPass, preview, recall_hint
from tokenpilot.passes.tool_args import ToolArgTruncation

CTX = PassContext(tool_name="write_file", artifact_id="art-1")
WHAT = "tool-call argument truncated"


def expected(value: Any, p: ToolArgTruncation, artifact_id: str = "art-1") -> Any:
    """What the pass should turn a parsed value into: long strings (not keys) previewed."""
    if isinstance(value, dict):
        return {k: expected(v, p, artifact_id) for k, v in value.items()}
    if isinstance(value, list):
        return [expected(v, p, artifact_id) for v in value]
    if isinstance(value, str) and len(value) > p.max_chars:
        return preview(value, head=p.head, tail=p.tail, artifact_id=artifact_id, what=WHAT)
    return value


def test_is_a_reduction_pass() -> None:
    assert isinstance(ToolArgTruncation(), ReductionPass)
    assert ToolArgTruncation.name == "tool_args"


def test_long_content_previewed_rest_kept() -> None:
    content = "".join(f"line {i}\n" for i in range(2_000))
    args = json.dumps({"path": "src/app.py", "content": content, "mode": 420, "append": False})
    out = ToolArgTruncation().apply_arguments(args, CTX)
    parsed = json.loads(out)
    assert parsed["path"] == "src/app.py" and parsed["mode"] == 420 and parsed["append"] is False
    assert parsed["content"] == preview(content, head=600, tail=400, artifact_id="art-1", what=WHAT)
    assert recall_hint("art-1") in parsed["content"]
    assert list(parsed) == ["path", "content", "mode", "append"]
    assert len(out) < 1_500


def test_nested_strings_at_any_depth() -> None:
    doc = {"edits": [{"old": "a" * 5_000, "new": ["b" * 4_001, "short"]}], "x": {"y": {"z": "c" * 4_000}}}
    out = json.loads(ToolArgTruncation().apply(json.dumps(doc), CTX))
    assert out == expected(doc, ToolArgTruncation())
    assert out["x"]["y"]["z"] == "c" * 4_000  # exactly max_chars is kept


def test_nothing_long_returns_same_object() -> None:
    args = json.dumps({"k": "v" * 3_999, "n": list(range(2_000))})
    assert len(args) > 4_000
    assert ToolArgTruncation().apply_arguments(args, CTX) is args
    short = '{"a": 1}'
    assert ToolArgTruncation().apply_arguments(short, CTX) is short


def test_long_keys_are_not_values() -> None:
    args = json.dumps({"k" * 5_000: 1})
    assert ToolArgTruncation().apply_arguments(args, CTX) is args


def test_literals_and_duplicate_keys_survive() -> None:
    args = (
        '{"n": 1.0e2, "big": 1e400, "i": 123456789012345678901234567890, "n": -0, "s": "' + "x" * 5_000 + '"}'
    )
    out = ToolArgTruncation().apply_arguments(args, CTX)
    assert out.startswith('{"n":1.0e2,"big":1e400,"i":123456789012345678901234567890,"n":-0,"s":"xxx')
    json.loads(out)


@pytest.mark.parametrize(
    "args",
    [
        '{"content": "' + "x" * 5_000,  # cut off
        "{'content': '" + "x" * 5_000 + "'}",  # Python repr, not JSON
        "x" * 5_000,
        '{"a": "' + "x" * 5_000 + '"} trailing',
        "[" * 100_000 + "]" * 100_000,  # too deep
    ],
    ids=["truncated", "python-repr", "prose", "trailing", "deep"],
)
def test_invalid_json_unchanged(args: str) -> None:
    assert ToolArgTruncation().apply_arguments(args, CTX) is args


def test_top_level_string_and_apply_alias() -> None:
    args = json.dumps("z" * 10_000)
    p = ToolArgTruncation()
    out = p.apply(args, CTX)
    assert out == p.apply_arguments(args, CTX)
    assert json.loads(out) == expected("z" * 10_000, p)


# -- every setting changes behaviour ----------------------------------------------------


def test_setting_max_chars() -> None:
    args = json.dumps({"content": "y" * 5_000})
    assert ToolArgTruncation().apply_arguments(args, CTX) != args
    assert ToolArgTruncation(max_chars=5_000).apply_arguments(args, CTX) is args
    small = json.dumps({"content": "y" * 1_500})
    assert (
        json.loads(ToolArgTruncation(max_chars=1_000).apply_arguments(small, CTX))["content"] != "y" * 1_500
    )


def test_setting_head() -> None:
    value = "".join(chr(65 + i % 26) for i in range(10_000))
    out = json.loads(ToolArgTruncation(head=20).apply_arguments(json.dumps({"c": value}), CTX))["c"]
    assert out.startswith(value[:20] + "\n[tokenpilot:") and out.endswith(value[-400:])


def test_setting_tail() -> None:
    value = "".join(chr(65 + i % 26) for i in range(10_000))
    out = json.loads(ToolArgTruncation(tail=7).apply_arguments(json.dumps({"c": value}), CTX))["c"]
    assert out.startswith(value[:600]) and out.endswith("]\n" + value[-7:])


# -- purity, bad input, properties -----------------------------------------------------


def test_pure() -> None:
    args = json.dumps({"a": "q" * 9_000, "b": ["r" * 6_000]})
    first = ToolArgTruncation().apply_arguments(args, CTX)
    assert ToolArgTruncation().apply_arguments(args, CTX) == first
    assert ToolArgTruncation().apply_arguments(first, CTX) is first  # idempotent


@pytest.mark.parametrize(
    "args",
    [
        "",
        "\udcff" * 5_000,
        '{"s": "' + "\udcff" * 5_000 + '"}',  # raw lone surrogates inside a JSON string
        '{"s": "' + "\\udcff" * 5_000 + '"}',  # escaped ones
        '{"s": "' + "\\u0000" * 5_000 + '"}',
        "\x00" * 5_000,
        '{"s": "' + "é" * 50_000_000 + '"}',
    ],
    ids=["empty", "surrogates", "raw-surrogates", "escaped-surrogates", "escaped-nul", "nul", "50MB"],
)
def test_bad_input_does_not_raise(args: str) -> None:
    out = ToolArgTruncation().apply_arguments(args, CTX)
    assert isinstance(out, str)
    if out is not args:
        json.loads(out)
        out.encode("utf-8")


def test_non_str_input() -> None:
    assert ToolArgTruncation().apply_arguments(None, CTX) is None  # type: ignore[arg-type]
    assert ToolArgTruncation().apply({"a": 1}, CTX) == {"a": 1}  # type: ignore[arg-type]


_CHARS = st.one_of(st.characters(), st.sampled_from(["\udcff", "\ud800", "\udc00", '"', "\\", "\x00", "\n"]))
_TEXT = st.one_of(
    st.text(_CHARS, max_size=20),
    st.builds(lambda s, n: s * n, st.text(_CHARS, min_size=1, max_size=8), st.integers(5, 60)),
)
_LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _TEXT
_JSON = st.recursive(
    _LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(_TEXT, _JSON, max_size=5),
    st.booleans(),
    st.sampled_from([None, 2]),
    st.integers(20, 120),
    st.integers(0, 12),
    st.integers(0, 12),
)
def test_result_is_always_valid_json(
    doc: dict, ascii_only: bool, indent: int | None, max_chars: int, head: int, tail: int
) -> None:
    p = ToolArgTruncation(max_chars=max_chars, head=head, tail=tail)
    args = json.dumps(doc, ensure_ascii=ascii_only, indent=indent)
    out = p.apply_arguments(args, CTX)
    parsed = json.loads(out)  # valid JSON, always
    if out is not args:
        out.encode("utf-8")  # and sendable: a rewritten document holds no raw lone surrogate
    assert parsed == expected(doc, p)
    assert p.apply_arguments(args, CTX) == out
