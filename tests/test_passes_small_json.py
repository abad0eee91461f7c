"""Lossless JSON re-encoding (passes/small_json.py): shorter, and the original given back byte for byte."""

from __future__ import annotations

import json
import sys

from builders import Session
from conftest import REPO, shared_path
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot import Config, TokenPilot
from tokenpilot.passes.small_json import restore, slim
from tokenpilot.store.artifacts import ArtifactStore

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_reduction import outputs  # noqa: E402

FLIGHTS = [
    {"flight_number": f"HAT{i:03}", "origin": "JFK", "prices": {"economy": 100 + i, "business": 900}}
    for i in range(4)
]


def test_like_objects_become_rows_and_come_back():
    doc = json.dumps({"user_id": "mia_li", "flights": FLIGHTS, "note": "é"})
    out = slim(doc)
    assert out is not None and len(out) < len(doc)
    value = json.loads(out)
    assert value["flights"]["keys"] == ["flight_number", "origin", "prices"]
    assert value["flights"]["rows"][3] == ["HAT003", "JFK", {"economy": 103, "business": 900}]
    assert value["note"] == "é"  # written as itself, re-escaped on restore
    assert restore(out) == doc


def test_pairs_of_like_objects_become_groups():
    pairs = [[FLIGHTS[0], FLIGHTS[1]], [FLIGHTS[2], FLIGHTS[3]], [FLIGHTS[1], FLIGHTS[2]]]
    doc = json.dumps(pairs)
    out = slim(doc)
    assert out is not None
    value = json.loads(out)
    assert list(value) == ["keys", "groups"] and len(value["groups"]) == 3
    assert restore(out) == doc


def test_without_rows_only_the_spaces_go():
    doc = json.dumps(FLIGHTS)
    out = slim(doc, rows=False)
    assert out == json.dumps(FLIGHTS, separators=(",", ":"))
    assert restore(out) == doc


def test_what_could_not_be_given_back_is_left_alone():
    value = {"a": [1, 2], "b": "x"}
    assert slim(json.dumps(value, indent=2)) is None  # its layout is not a function of the value
    assert slim('{"a": 1, "a": 2}') is None  # a duplicate key would vanish
    assert slim('{"a": 1e400}') is None  # would come back as Infinity
    assert slim(json.dumps({"x": "é"}, ensure_ascii=False)) is None  # would come back escaped
    assert slim(json.dumps({"keys": ["a"], "rows": [[1]]})) is None  # already looks like a table
    assert slim("plain words") is None and slim("") is None and slim("[") is None
    assert slim("[" * 5000 + "]" * 5000) is None  # deeper than Python reads: never raises


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.sampled_from(["keys", "rows", "groups", "a", "b"]), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_whatever_is_slimmed_comes_back_byte_for_byte(value):
    doc = json.dumps(value)
    out = slim(doc)
    if out is not None:
        assert len(out) < len(doc) and restore(out) == doc
        assert json.loads(out) is not None


def _tool_text(tp: TokenPilot, content: str) -> tuple[str, list[str]]:
    history = Session().user("find me a flight").call("search_flights", {}, content).msgs
    p = tp.prepare(history, session_id="s")
    return next(m for m in p.messages if m.get("role") == "tool")["content"], list(p.stats.artifacts)


def test_a_big_json_output_is_re_encoded_without_artifact_or_footer(tmp_path):
    many = [dict(f, flight_number=f"HAT{i:03}") for i in range(60) for f in FLIGHTS[:1]]
    doc = json.dumps(many)
    assert len(doc) > 2200
    got, artifacts = _tool_text(TokenPilot(store=ArtifactStore(str(tmp_path / "a")), lifecycle=False), doc)
    assert restore(got) == doc and len(got) < 0.7 * len(doc)
    assert "tokenpilot" not in got and artifacts == []  # nothing to recall: recall_artifact is not needed
    off = TokenPilot(Config(small_json_rows=False), store=ArtifactStore(str(tmp_path / "b")), lifecycle=False)
    got_off, _ = _tool_text(off, json.dumps(many[:8]))
    assert got_off == json.dumps(many[:8], separators=(",", ":"))  # minified, no rows


def test_shared_json_outputs_come_back_byte_for_byte():
    """Every JSON tool output of the shared recordings (any size) that `slim` rewrites."""
    n = 0
    for o in outputs(shared_path("traces"), gate=0):
        out = slim(o.text)
        if out is None:
            continue
        assert len(out) < len(o.text) and restore(out) == o.text, (o.trace_set, o.tool)
        n += 1
    assert n >= 1000  # tau-bench's and tau2-bench's tool outputs


def test_hostile_nesting_is_bounded_and_still_lossless():
    for levels, slimmed in ((60, True), (400, False)):  # far deeper than any tool answers
        value: object = [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
        for _ in range(levels):
            value = [{"a": value, "b": 0}, {"a": 1, "b": 2}]
        doc = json.dumps(value)
        out = slim(doc)  # never raises: too deep to give back is left as it came
        assert (out is not None) is slimmed
        assert out is None or restore(out) == doc


def test_a_file_printed_by_the_shell_stays_exact(tmp_path):
    doc = json.dumps(FLIGHTS)
    tp = TokenPilot(store=ArtifactStore(str(tmp_path)), lifecycle=False)
    history = Session().user("show it").call("bash", {"command": "cat flights.json"}, doc).msgs
    p = tp.prepare(history, session_id="s")
    assert next(m for m in p.messages if m.get("role") == "tool")["content"] == doc
    history = Session().user("search").call("bash", {"command": "curl -s api/flights"}, doc).msgs
    p = tp.prepare(history, session_id="t")
    assert restore(next(m for m in p.messages if m.get("role") == "tool")["content"]) == doc
