"""Unit tests and properties of the content-aware passes (json_arrays, log_folding,
search_listing, diff_folding): deterministic, never larger, stable when re-applied,
and every marker's range holds exactly the lines it replaced."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot import Config, TokenPilot
from tokenpilot.passes.base import PassContext
from tokenpilot.passes.diff_folding import DiffFolding
from tokenpilot.passes.folding import is_code_read, parse_markers
from tokenpilot.passes.json_arrays import JsonArrays
from tokenpilot.passes.log_folding import LogFolding, alike_key
from tokenpilot.passes.search_listing import SearchListing

AID = "art_" + "ab" * 12
CTX = PassContext(tool_name="bash", artifact_id=AID)


def _check_markers(original: str, reduced: str) -> None:
    """Every marker names AID and a range inside the original; every original line
    missing from the reduced text is inside one of those ranges."""
    lines = original.splitlines(keepends=True)
    covered: set[int] = set()
    for aid, start, end in parse_markers(reduced):
        assert aid == AID
        assert 1 <= start <= end <= len(lines)
        covered.update(range(start, end + 1))
    shown = set(reduced.splitlines())
    for n, line in enumerate(lines, 1):
        assert line.rstrip("\r\n") in shown or n in covered, (n, line)


# -- log_folding ---------------------------------------------------------------


def test_log_folding_folds_alike_lines_and_keeps_errors_and_summary():
    log = (
        "build\n"
        + "".join(f"Compiling crate_{i} v0.{i}.0 (2024-05-0{i % 9 + 1} 10:0{i % 10}:00)\n" for i in range(40))
        + "error[E0425]: cannot find value `x`\n"
        + "".join(f"   Compiling other_{i}\n" for i in range(3))
        + "test result: FAILED. 3 passed; 1 failed\n"
    )
    out = LogFolding().apply(log, CTX)
    assert "38 more lines like this, lines 3–40 of the original" in out
    assert "Compiling crate_0 v0.0.0" in out and "Compiling crate_39 v0.39.0" in out
    assert "error[E0425]: cannot find value `x`\n" in out
    assert out.endswith("test result: FAILED. 3 passed; 1 failed\n")
    _check_markers(log, out)


def test_log_folding_keeps_tracebacks_whole():
    frames = "".join(f'  File "/x/m{i}.py", line {i}, in f\n    g()\n' for i in range(20))
    log = "Traceback (most recent call last):\n" + frames + "ValueError: bad\n" + "tail\n" * 6
    assert LogFolding().apply(log, CTX) is log


def test_log_folding_leaves_code_reads_alone():
    text = "".join(f"x{i} = {i}\n" for i in range(50))
    ctx = PassContext(tool_name="bash", arguments={"command": "cat settings.py"}, artifact_id=AID)
    assert LogFolding().apply(text, ctx) is text
    assert LogFolding().apply(text, CTX) != text
    assert is_code_read("Read", {}) and is_code_read("bash", {"command": "cd /t && sed -n 1,9p a.py"})
    assert not is_code_read("bash", {"command": "python -m pytest"})


def test_alike_key_masks_numbers_hex_and_times():
    assert alike_key("2024-01-02T10:00:01Z fetched 0xdeadbeef 12 items") == alike_key(
        "2025-11-30T23:59:59Z fetched 0x00c0ffee 7 items"
    )
    assert alike_key("ok a") != alike_key("ok b")


# -- json_arrays -----------------------------------------------------------------


def _flights(n: int) -> list:
    return [
        [
            {"flight_number": f"HAT{i:03d}", "origin": "JFK", "status": "available", "price": 100 + i},
            {"flight_number": f"HAT{i + 1:03d}", "origin": "SEA", "status": "available", "price": 50},
        ]
        for i in range(n)
    ]


def test_json_arrays_keeps_every_value_as_rows():
    doc = json.dumps(_flights(8))
    out = JsonArrays().apply(doc, CTX)
    table = json.loads(out)
    assert table["keys"] == [["flight_number", "origin", "status", "price"]] * 2
    assert table["rows"][3] == [["HAT003", "JFK", "available", 103], ["HAT004", "SEA", "available", 50]]
    assert len(out) < len(doc)
    assert parse_markers(out) == [(AID, 1, 1)]


def test_json_arrays_cuts_long_arrays_to_first_and_last():
    doc = json.dumps(_flights(30), indent=2)
    out = JsonArrays(max_rows=10).apply(doc, CTX)
    value = json.loads(out)
    assert value[0] == _flights(30)[0] and value[-1] == _flights(30)[-1]
    assert "28 more items like these (items 2–29 of 30" in value[1]
    _check_markers(doc, out)


def test_json_arrays_leaves_other_text_alone():
    for text in (
        "not json",
        '{"a": [1, 2, 3, 4, 5]}',
        "[1, 2] trailing",
        '[{"a": 1}, {"b": 2}, {"a": 3}, {"a": 4}]',
    ):
        assert JsonArrays().apply(text, CTX) is text


# -- search_listing --------------------------------------------------------------


def test_search_listing_groups_hits_by_file():
    hits = "".join(
        f"django/db/models/fields/__init__.py:{100 + i}:    def method_{i}(self):\n" for i in range(12)
    )
    out = SearchListing().apply(hits + "tests/x.py:3:foo\n", CTX)
    assert "12 hits in django/db/models/fields/__init__.py" in out
    assert "\n105:    def method_5(self):\n" in out
    assert out.endswith("tests/x.py:3:foo\n")
    _check_markers(hits + "tests/x.py:3:foo\n", out)


def test_search_listing_groups_listings_by_folder():
    listing = "".join(f"./tests/integration/fixtures/sample_{i}.json\n" for i in range(20))
    out = SearchListing(whole_paths=False).apply(listing, CTX)
    assert "20 entries of ./tests/integration/fixtures/" in out and "\nsample_7.json\n" in out
    _check_markers(listing, out)


# -- diff_folding ------------------------------------------------------------------


def test_diff_folding_keeps_changes_and_folds_context():
    diff = (
        "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,40 +1,40 @@\n"
        + "-old line\n+new line\n"
        + "".join(f" unchanged context line number {i}\n" for i in range(30))
        + "-older\n+newer\n"
    )
    out = DiffFolding().apply(diff, CTX)
    assert "@@ -1,40 +1,40 @@\n-old line\n+new line\n" in out
    assert "24 unchanged lines, lines 10–33 of the original" in out
    assert out.endswith(" unchanged context line number 29\n-older\n+newer\n")
    _check_markers(diff, out)


# -- wiring --------------------------------------------------------------------------


def test_pipeline_runs_one_content_pass_and_recall_returns_the_lines(tmp_path):
    from tokenpilot.store.artifacts import ArtifactStore

    tp = TokenPilot(store=ArtifactStore(str(tmp_path)), lifecycle=False)
    log = "".join(f"Downloading package_{i} ({i} kB)\n" for i in range(200)) + "done\n"
    r = tp.reduce_tool_output(log, "bash", '{"command": "pip install x"}', session_id="s")
    assert r.passes[0] == "log_folding"
    ((aid, start, end),) = parse_markers(r.text)
    assert tp.recall(aid, start, end, session_id="s").text == "".join(log.splitlines(True)[start - 1 : end])
    off = TokenPilot(
        Config(passes=("format_cleaning",)), store=ArtifactStore(str(tmp_path / "b")), lifecycle=False
    )
    assert off.reduce_tool_output(log, "bash", session_id="s").artifact_id is None


# -- properties ----------------------------------------------------------------------

_word = st.sampled_from(
    [
        "ok",
        "PASSED",
        "Compiling a",
        "error: x",
        "src/a.py:3:x",
        " ctx",
        "+x",
        "-y",
        "@@ -1 +1 @@",
        "",
        "{",
        "}",
    ]
)
_lines = st.lists(st.one_of(_word, st.text(max_size=12)), max_size=60).map(lambda ls: "\n".join(ls))
_json = st.recursive(
    st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none()),
    lambda kids: st.one_of(
        st.lists(kids, max_size=8),
        st.lists(
            st.fixed_dictionaries({"id": st.integers(), "name": st.text(max_size=6)}), min_size=3, max_size=12
        ),
        st.dictionaries(st.text(max_size=4), kids, max_size=4),
    ),
    max_leaves=40,
).map(lambda v: json.dumps(v, indent=None if isinstance(v, int) else 2))

PASSES = [LogFolding(min_run=3), SearchListing(min_group=2), DiffFolding(min_fold=1), JsonArrays(min_items=3)]


@settings(max_examples=150, deadline=None)
@given(text=st.one_of(_lines, _json), k=st.integers(0, len(PASSES) - 1))
def test_every_pass_is_deterministic_never_larger_stable_with_correct_ranges(text, k):
    p = PASSES[k]
    out = p.apply(text, CTX)
    assert out == p.apply(text, CTX)  # deterministic
    assert len(out) <= len(text)  # never larger
    assert p.apply(out, CTX) == p.apply(out, CTX)  # stable on its own output
    if out is not text:
        lines = text.splitlines(keepends=True)
        for aid, start, end in parse_markers(out):
            assert aid == AID and 1 <= start <= end <= len(lines)
        if not isinstance(p, JsonArrays):
            _check_markers(text, out)
    if isinstance(p, JsonArrays) and out is not text:
        json.loads(out)  # still valid JSON


def test_log_folding_points_a_repeated_block_at_its_first_copy():
    names = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")
    trace = "".join(
        f"    at {w}.call (lib/spotter_web/live/{w}_component.ex:{k * 7}: SpotterWeb.Component.render/1)\n"
        for k, w in enumerate(names)
    )
    log = "".join(
        f"{n}) test case_{n} failed\n** (RuntimeError) no secret_key_base\n{trace}\n" for n in (1, 2, 3)
    )
    log += "Finished in 0.4 seconds\nload 0.1s, async 0.3s\n3 tests, 3 failures\nRandomized with seed 1\nexit 2\n"
    out = LogFolding().apply(log, CTX)
    # the error and its stack are shown whole once, in the first failure; each repeat
    # points at that copy (an error in a repeated block is no longer printed every time)
    assert out.count("** (RuntimeError) no secret_key_base") == 1
    assert (
        "1) test case_1 failed" in out and "2) test case_2 failed" in out and "3) test case_3 failed" in out
    )
    assert out.count("at alpha.call") == 1
    assert "7 lines identical to lines 2–8, lines 11–17 of the original" in out
    assert "7 lines identical to lines 2–8, lines 20–26 of the original" in out
    _check_markers(log, out)
    assert LogFolding(min_block=0).apply(log, CTX) is log


def test_small_json_outputs_are_minified_without_store_or_footer(tmp_path):
    from tokenpilot.store.artifacts import ArtifactStore

    doc = json.dumps(
        {"user_id": "emma_kim_9957", "name": {"first_name": "Emma", "last_name": "Kim"}, "n": [1, 2]}
    )
    msgs = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_user_details", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": doc},
    ]
    on = Config(small_json_minify=True)
    p = TokenPilot(on, store=ArtifactStore(str(tmp_path)), lifecycle=False).prepare(msgs, session_id="s")
    got = next(m for m in p.messages if m.get("role") == "tool")["content"]
    assert json.loads(got) == json.loads(doc) and len(got) < len(doc) and "tokenpilot" not in got
    assert not p.stats.artifacts
    off = TokenPilot(
        Config(small_json_minify=False), store=ArtifactStore(str(tmp_path / "b")), lifecycle=False
    )
    assert (
        next(m for m in off.prepare(msgs, session_id="s").messages if m.get("role") == "tool")["content"]
        == doc
    )
    text = "plain words, not JSON at all"
    msgs[-1] = {"role": "tool", "tool_call_id": "c1", "content": text}
    assert (
        next(
            m
            for m in TokenPilot(on, lifecycle=False).prepare(msgs, session_id="t").messages
            if m.get("role") == "tool"
        )["content"]
        == text
    )
