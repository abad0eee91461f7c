"""The content-aware passes on every shared tool output above the gate: nothing lost, nothing grown.

For each of the outputs (about 373) reduced through `TokenPilot().reduce_tool_output`,
every non-blank original line that is not in the reduced text (compared as the layout
passes show it: line-number prefix, ANSI codes and whitespace aside, long rules
shortened, lines without a letter or digit being layout) lies inside the line range of a fold marker, and recalling that range
returns exactly those original lines. A JSON output re-encoded without a cut
(`small_json`) gives the original back through `small_json.restore`.
"""

from __future__ import annotations

import sys
from collections import Counter

import pytest
from conftest import REPO, shared_path
from contract import check_render

from tokenpilot import TokenPilot
from tokenpilot.passes.folding import parse_markers
from tokenpilot.store.artifacts import ArtifactStore

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_reduction import outputs  # noqa: E402


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
    """The end-to-end contract (tests/contract.py) on what a host plugin is handed."""
    tp, got = reduced
    kinds = Counter(check_render(tp, o.session, o.tool, o.arguments, o.text, r.text) for o, r in got)
    assert kinds["text"] + kinds["whole"] + kinds["page"] >= 100, kinds  # cut, and checked as cut
