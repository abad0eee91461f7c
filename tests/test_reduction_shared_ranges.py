"""Every shared tool output above the gate (about 373, in ../shared/traces or
$TOKENPILOT_SHARED/traces; skipped with the reason when absent), through each content
pass alone and through the whole reduction:

- each content pass gives back a text from which the original is rebuilt byte for byte
  by putting the original's lines in each marker's place (every range holds exactly the
  lines it replaced, every shortened line is its original's own suffix), never longer,
  the same on a second run;
- through `reduce_tool_output`, nothing grows, and recalling each marker's range from
  the store returns exactly those lines of the original.
"""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, shared_path
from reduction_restore import restore

from tokenpilot import TokenPilot
from tokenpilot._canonical import artifact_id_for
from tokenpilot.passes.base import PassContext
from tokenpilot.passes.diff_folding import DiffFolding
from tokenpilot.passes.folding import parse_markers
from tokenpilot.passes.log_folding import LogFolding
from tokenpilot.passes.search_listing import SearchListing
from tokenpilot.store.artifacts import ArtifactStore

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_reduction import _args, outputs  # noqa: E402


@pytest.fixture(scope="module")
def shared_outputs():
    got = list(outputs(shared_path("traces")))
    assert len(got) >= 300, "fewer shared outputs than the corpus holds"
    return got


@pytest.mark.parametrize("p", [LogFolding(), SearchListing(), DiffFolding()], ids=lambda p: p.name)
def test_each_content_pass_alone_keeps_every_cut_line_in_its_range(shared_outputs, p):
    changed = 0
    for o in shared_outputs:
        ctx = PassContext(tool_name=o.tool, arguments=_args(o.arguments), artifact_id=artifact_id_for(o.text))
        out = p.apply(o.text, ctx)
        assert out == p.apply(o.text, ctx), (o.session, o.tool)
        assert len(out) <= len(o.text), (o.session, o.tool)
        assert restore(out, o.text) == o.text, (o.session, o.tool)
        changed += out != o.text
    if not isinstance(p, DiffFolding):  # the corpus's two diffs have no long context to fold
        assert changed > 0, f"{p.name} changed none of the shared outputs"


def test_through_the_whole_reduction_none_grows_and_every_range_recalls_byte_exact(shared_outputs, tmp_path):
    tp = TokenPilot(store=ArtifactStore(str(tmp_path)), lifecycle=False)
    ranges = 0
    for o in shared_outputs:
        r = tp.reduce_tool_output(o.text, o.tool, o.arguments, session_id=o.session)
        assert len(r.text) <= len(o.text), (o.session, o.tool)
        lines = o.text.splitlines(keepends=True)
        for aid, start, end in parse_markers(r.text):
            assert aid == r.artifact_id
            got = tp.recall(aid, start, end, session_id=o.session).text
            assert got == "".join(lines[start - 1 : end]), (o.session, o.tool, start, end)
            ranges += 1
        if r.artifact_id is not None:
            assert tp.recall(r.artifact_id, session_id=o.session).text == o.text
    assert ranges > 0
