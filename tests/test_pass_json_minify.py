"""JsonMinify: whitespace out, document exactly the same; JSON Lines per line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.passes.base import PassContext, ReductionPass
from tokenpilot.passes.json_minify import JsonMinify, minify_json

CTX = PassContext(tool_name="gh_api", artifact_id="art-1")

DOC = {
    "zeta": 1,
    "alpha": [1, 2.5, None, True, {"name": "café ☕", "tags": ["a", "b"]}],
    "empty": {},
    "nested": {"list": [], "s": 'quote " and \\ backslash'},
}


def test_is_a_reduction_pass() -> None:
    assert isinstance(JsonMinify(), ReductionPass)
    assert JsonMinify.name == "json_minify"


def test_pretty_json_minified_in_key_order() -> None:
    text = json.dumps(DOC, indent=2, ensure_ascii=False) + "\n"
    out = JsonMinify().apply(text, CTX)
    assert out == json.dumps(DOC, separators=(",", ":"), ensure_ascii=False)
    assert json.loads(out) == DOC
    assert list(json.loads(out)) == ["zeta", "alpha", "empty", "nested"]


def test_literals_and_duplicate_keys_preserved() -> None:
    text = '{\n  "n": 1.0e2,\n  "big": 123456789012345678901234567890,\n  "f": 0.1000000000000000055511151231257827,\n  "n": -0\n}'
    out = JsonMinify().apply(text, CTX)
    assert (
        out
        == '{"n":1.0e2,"big":123456789012345678901234567890,"f":0.1000000000000000055511151231257827,"n":-0}'
    )


def test_array_top_level_and_whitespace_inside_strings_kept() -> None:
    text = '[\n  "a  b\\n c",\n  "\\t"\n]'
    assert JsonMinify().apply(text, CTX) == '["a  b\\n c","\\t"]'


@pytest.mark.parametrize(
    "text",
    [
        "not json at all",
        "42",
        '"just a string"',
        "null",
        '{"a": 1} trailing',
        '{"a": 1,}',
        "{'a': 1}",
        '{"a":1,"b":[1,2]}',  # already minimal
        "[" * 100_000 + "]" * 100_000,  # too deep for json.loads
    ],
    ids=[
        "prose",
        "number",
        "string",
        "null",
        "trailing",
        "trailing-comma",
        "single-quotes",
        "minimal",
        "deep",
    ],
)
def test_not_minified(text: str) -> None:
    assert JsonMinify().apply(text, CTX) is text


# -- every setting changes behaviour ----------------------------------------------------


def test_setting_min_saving_ratio() -> None:
    text = '{"a":1, "b":[1,2,3], "c":"' + "x" * 100 + '"}'  # 2 spaces of 125 chars: 1.6 %
    assert JsonMinify().apply(text, CTX) is text
    assert JsonMinify(min_saving_ratio=0.01).apply(text, CTX) == text.replace(", ", ",")
    pretty = json.dumps(DOC, indent=1)
    assert JsonMinify(min_saving_ratio=0.9).apply(pretty, CTX) is pretty


def test_setting_json_lines() -> None:
    text = '{"event": "start",  "t": 1}\n\n{"event": "stop", "t": 2}\n'
    assert JsonMinify().apply(text, CTX) == '{"event":"start","t":1}\n{"event":"stop","t":2}'
    assert JsonMinify(json_lines=False).apply(text, CTX) is text
    mixed = '{"a": 1}\nnot json\n{"b": 2}'
    assert JsonMinify().apply(mixed, CTX) is mixed


def test_setting_unescape_unicode() -> None:
    text = json.dumps({"name": "café ☕ 日本", "k": ["é"]}, indent=2)  # ensure_ascii=True escapes
    assert "\\u00e9" in text
    assert JsonMinify().apply(text, CTX) == '{"name":"café ☕ 日本","k":["é"]}'
    kept = JsonMinify(unescape_unicode=False).apply(text, CTX)
    assert kept == '{"name":"caf\\u00e9 \\u2615 \\u65e5\\u672c","k":["\\u00e9"]}'


def test_lone_surrogate_and_control_escapes_stay_escaped() -> None:
    text = '{\n  "s": "\\ud800 \\u00e9 \\udc00\\u00e9 \\ud83d\\ude00 \\\\u00e9 \\\\\\u00e9",\n  "c": "\\u0001\\u0022\\u005C"\n}'
    out = JsonMinify().apply(text, CTX)
    assert out == '{"s":"\\ud800 é \\udc00é \U0001f600 \\\\u00e9 \\\\é","c":"\\u0001\\u0022\\u005C"}'
    out.encode("utf-8")
    assert json.loads(out) == json.loads(text)


# -- purity, bad input, properties -----------------------------------------------------


def test_pure() -> None:
    text = json.dumps([DOC] * 50, indent=4)
    first = JsonMinify().apply(text, CTX)
    assert JsonMinify().apply(text, CTX) == first
    assert JsonMinify().apply(first, CTX) is first  # idempotent


@pytest.mark.parametrize(
    "text",
    ["", "{", "\udcff", '{"a": "\udcff"}', "{\x00}", '{"a": "\x00"}', "\ufeff{}", "[" * 5_000_000],
    ids=[
        "empty",
        "brace",
        "surrogate",
        "raw-surrogate-in-string",
        "nul",
        "nul-in-string",
        "bom",
        "huge-open",
    ],
)
def test_bad_input_does_not_raise(text: str) -> None:
    out = JsonMinify().apply(text, CTX)
    assert isinstance(out, str)
    assert JsonMinify().apply(text, CTX) == out
    assert JsonMinify().apply(None, CTX) is None  # type: ignore[arg-type]


def test_large_document() -> None:
    doc = [{"id": i, "name": f"item-{i}", "tags": ["a", "b"], "score": i / 7} for i in range(20_000)]
    text = json.dumps(doc, indent=2)
    out = JsonMinify().apply(text, CTX)
    assert json.loads(out) == doc and len(out) < 0.65 * len(text)


def test_minify_json_helper() -> None:
    assert minify_json(" [1, 2] ") == "[1,2]"
    assert minify_json("1") is None
    with pytest.raises(ValueError):
        minify_json("[1,")


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.text(max_size=8), _JSON, max_size=6), st.sampled_from([1, 2, 4, None]), st.booleans()
)
def test_roundtrip_property(doc: dict, indent: int | None, ascii_only: bool) -> None:
    text = json.dumps(doc, indent=indent, ensure_ascii=ascii_only)
    out = JsonMinify(min_saving_ratio=0.0).apply(text, CTX)
    assert json.loads(out) == doc
    out.encode("utf-8")
    assert len(out) <= len(text)


_TRICKY = st.text(
    st.sampled_from(["\\", "u", "0", "d", "8", "c", "e", '"', "é", "\U0001f600", "\x01", "\udcff", "\ud83d"])
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TRICKY, min_size=1, max_size=6))
def test_escapes_roundtrip_property(strings: list[str]) -> None:
    text = json.dumps({"k": strings, "\\u00e9": strings[0]}, indent=1)  # ensure_ascii: all escaped
    out = JsonMinify(min_saving_ratio=0.0).apply(text, CTX)
    assert json.loads(out) == json.loads(text)
    out.encode("utf-8")  # lone surrogates stayed escaped
