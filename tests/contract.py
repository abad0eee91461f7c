"""The end-to-end contract every reduction keeps, as one check used by several tests.

A tool output goes through the default facade (`TokenPilot().prepare`) as one tool
result; what the model is sent must keep it whole or say, where each cut is, what it cut
and how to get exactly that back:

- **Text** (a log, a listing, JSON, a diff, prose): every original line that holds a
  letter or digit appears in the render (as the layout passes show it: line-number
  prefix, ANSI codes, whitespace and long rules aside) or lies inside the line range of
  a marker in the render, and recalling that range returns exactly those lines.
- **Markup** (a web page): the page is shown as its text (`PageText`, the text the HTML
  pass renders before it cuts anything). Every line of that text appears in the render
  or lies inside a page marker's range; each marker says in words what it cut and names
  the page text's lines, which a recall returns byte for byte; the HTML itself is
  recallable whole. No line fold of the HTML's own lines appears.

`check_render` raises AssertionError with the first breach.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tokenpilot import TokenPilot
from tokenpilot._canonical import artifact_id_for
from tokenpilot.passes.base import PassContext
from tokenpilot.passes.folding import parse_markers
from tokenpilot.passes.html import HtmlSlimming
from tokenpilot.passes.kinds import content_kind
from tokenpilot.passes.page_text import PAGE_MARKER
from tokenpilot.passes.small_json import restore

_NUMBER = re.compile(r"^[ \t]*\d{1,9}(?:→|\t|:|\s?\|)")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
_RULE = re.compile(r"([-=*~#.─━═_])\1{3,}")
_SPACE = re.compile(r"\s+")
_VERTICALS = str.maketrans("", "", "|│┃║")  # table and box borders: format_slimming redraws them
_WORD = re.compile(r"\w")  # a line without one (a border, a rule) is layout: format_slimming may drop it
_FOOTER = re.compile(r"\n\[tokenpilot: [^\n]*\]\Z")
_WITHHELD = re.compile(
    r"\[tokenpilot: (?:binary or undecodable data|output truncated|\S+ was called with these same)"
)


def line_key(line: str) -> str:
    """A line as the layout passes may show it (they change layout, never words)."""
    s = _ANSI.sub("", _NUMBER.sub("", line, count=1))
    return _RULE.sub(r"\1\1\1", _SPACE.sub("", s)).translate(_VERTICALS)


def one_result(tool: str, arguments: str, text: str) -> list[dict[str, Any]]:
    """A conversation whose last message is `text` as the result of one `tool` call."""
    return [
        {"role": "user", "content": "go on"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": tool, "arguments": arguments or "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]


def render_through_facade(tp: TokenPilot, session: str, tool: str, arguments: str, text: str) -> str:
    """The tool result as `prepare` sends it to the model."""
    prepared = tp.prepare(one_result(tool, arguments, text), session_id=session)
    (msg,) = [m for m in prepared.messages if m.get("role") == "tool"]
    content = msg["content"]
    return content if isinstance(content, str) else json.dumps(content)


def check_render(
    tp: TokenPilot, session: str, tool: str, arguments: str, original: str, rendered: str
) -> str:
    """Assert the contract for one output; returns the kind of check made ("same",
    "lossless", "page", "text", "whole")."""
    if rendered == original:
        return "same"
    if "[…" not in rendered and "recall_artifact" not in rendered:
        assert restore(rendered) == original, f"{tool}: changed with no marker and not restorable"
        return "lossless"
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        args = {}
    args = args if isinstance(args, dict) else {}
    if content_kind(original, tool, args) == "markup" and "html_slimming" in rendered:
        return _check_page(tp, session, tool, original, rendered)
    return _check_text(tp, session, tool, original, rendered)


def _check_page(tp: TokenPilot, session: str, tool: str, original: str, rendered: str) -> str:
    aid = artifact_id_for(original)
    assert tp.recall(aid, session_id=session).text == original, f"{tool}: the HTML is not recallable whole"
    assert not parse_markers(rendered), f"{tool}: a page's render folds lines of its HTML"
    page = HtmlSlimming().page(original, PassContext(tool_name=tool, artifact_id=aid))
    assert page is not None, f"{tool}: rendered as a page, but the pass does not render it"
    full = page.text
    lines = full.splitlines(keepends=True)
    covered: set[int] = set()
    markers = list(PAGE_MARKER.finditer(rendered))
    for m in markers:
        count, what, tid, start, end = int(m[1]), m[2], m[3], int(m[4]), int(m[5])
        assert tid == artifact_id_for(full), f"{tool}: a marker names another text than the page's"
        assert 1 <= start <= end <= len(lines) and count == end - start + 1, (tool, m[0])
        assert re.search(r"[a-z]{3}", what), f"{tool}: a marker does not say what it cut: {m[0]!r}"
        got = tp.recall(tid, start, end, session_id=session).text
        assert got == "".join(lines[start - 1 : end]), f"{tool}: {m[0]!r} recalls other bytes"
        covered.update(range(start, end + 1))
    shown = set(_FOOTER.sub("", rendered).splitlines())
    for n, line in enumerate(lines, 1):
        if n in covered or line.rstrip("\n") in shown or not line.strip():
            continue
        block = line.rstrip("\n")
        if block in rendered:  # a line of a preformatted block, shown inside it
            continue
        raise AssertionError(f"{tool}: page text line {n} {line[:80]!r} is cut and in no marker's range")
    return "page"


def _check_text(tp: TokenPilot, session: str, tool: str, original: str, rendered: str) -> str:
    aid = artifact_id_for(original)
    markers = parse_markers(rendered)
    if not markers and _WITHHELD.search(rendered):
        # withheld whole (binary data, a loop) or cut past the hard limit: the stub, where
        # the output was, says so and recalls all of it
        assert tp.recall(aid, session_id=session).text == original, f"{tool}: not recallable whole"
        return "whole"
    lines = original.splitlines(keepends=True)
    shown = {line_key(ln) for ln in rendered.splitlines()}
    flat = "".join(line_key(ln) for ln in rendered.splitlines())
    covered: set[int] = set()
    for marker_aid, start, end in markers:
        assert marker_aid == aid, (tool, marker_aid)
        assert 1 <= start <= end <= len(lines), (tool, start, end, len(lines))
        back = tp.recall(marker_aid, start, end, session_id=session).text
        assert back == "".join(lines[start - 1 : end]), f"{tool}: lines {start}–{end} recall other bytes"
        covered.update(range(start, end + 1))
    minified = "json_minify" in rendered or "json_arrays" in rendered
    for n, line in enumerate(lines, 1):
        k = line_key(line)
        if not _WORD.search(k) or k in shown or n in covered or (minified and k in flat):
            continue
        raise AssertionError(f"{tool}: line {n} {line[:80]!r} is cut and in no marker's range")
    return "text"
