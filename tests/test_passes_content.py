"""The content-aware passes on every shared tool output above the gate: nothing lost, nothing grown.

For each of the outputs (about 373) reduced through `TokenPilot().reduce_tool_output`,
every non-blank original line that is not in the reduced text (compared as the layout
passes show it: line-number prefix, ANSI codes and whitespace aside, long rules
shortened, lines without a letter or digit being layout) lies inside the line range of a fold marker, and recalling that range
returns exactly those original lines. A JSON output re-encoded without a cut
(`small_json`) gives the original back through `small_json.restore`.
"""

from __future__ import annotations

import re
import sys

import pytest
from conftest import REPO, shared_path
from contract import line_key as _key

from tokenpilot import TokenPilot
from tokenpilot.artifacts import ArtifactStore
from tokenpilot.passes.folding import parse_markers
from tokenpilot.passes.small_json import restore

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_reduction import outputs  # noqa: E402

_WORD = re.compile(r"\w")  # a line without one (a border, a rule) is layout: format_slimming may drop it


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    traces = shared_path("traces")
    tp = TokenPilot(store=ArtifactStore(str(tmp_path_factory.mktemp("store"))), lifecycle=False)
    got = []
    for o in outputs(traces):
        r = tp.reduce_tool_output(o.text, o.tool, o.arguments, session_id=o.session)
        got.append((o, r))
    return tp, got


def test_there_are_the_shared_outputs(reduced):
    _, got = reduced
    assert len(got) >= 300
    folded = sum(1 for o, r in got if parse_markers(r.text) or r.passes == ("small_json",))
    assert folded >= 30, "the content passes folded almost nothing"


def test_none_grows(reduced):
    _, got = reduced
    assert [o.tool for o, r in got if len(r.text) > len(o.text)] == []


def test_every_cut_line_is_in_a_marker_range_and_recalls_byte_exact(reduced):
    tp, got = reduced
    checked = 0
    for o, r in got:
        if r.artifact_id is None:  # as it came, or JSON re-encoded with nothing lost
            assert (restore(r.text) if r.passes == ("small_json",) else r.text) == o.text
            continue
        if r.passes == ("binary",):  # the whole output is withheld; the stub recalls all of it
            assert tp.recall(r.artifact_id, session_id=o.session).text == o.text
            checked += 1
            continue
        markers = parse_markers(r.text)
        lines = o.text.splitlines(keepends=True)
        shown = {_key(ln) for ln in r.text.splitlines()}
        flat = "".join(_key(ln) for ln in r.text.splitlines())
        minified = "json_minify" in r.passes or "json_arrays" in r.passes
        covered = set()
        for aid, start, end in markers:
            assert aid == r.artifact_id, (o.tool, aid)
            assert 1 <= start <= end <= len(lines), (o.tool, start, end, len(lines))
            back = tp.recall(aid, start, end, session_id=o.session).text
            assert back == "".join(lines[start - 1 : end])
            covered.update(range(start, end + 1))
        for n, line in enumerate(lines, 1):
            k = _key(line)
            if not _WORD.search(k) or k in shown or n in covered or (minified and k in flat):
                continue
            pytest.fail(f"{o.trace_set}/{o.tool}: line {n} {line[:80]!r} is cut and in no marker's range")
        checked += 1
    assert checked >= 100
