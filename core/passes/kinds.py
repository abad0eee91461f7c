"""What a tool output is: the kind of content each reduction pass declares it accepts.

The pipeline (`tokenpilot.ingest.pipeline`) classifies an output once and runs only the passes
that accept its kind. Markup is the kind that must never meet a text pass: a line fold
counted on raw HTML names lines the agent never sees and hides the article's elements
from the HTML pass (issue #38). So markup goes to `html_slimming` alone, which turns it
into text whose cuts are marked where they were (`page_text`).

The classification is cheap (a sniff of the first lines) and deterministic. Below
markup, JSON and a file's text, the line kinds (a diff, a search listing, a log or test
run, prose) are told apart for the reduction report; the line passes accept all of them,
since each pass also checks its own shape line by line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .base import ALL_KINDS, CODE, DIFF, JSON, LINE_KINDS, LISTING, LOG, MARKUP, PROSE
from .folding import is_code_read
from .html import looks_like_html

__all__ = [
    "ALL_KINDS",
    "CODE",
    "DIFF",
    "JSON",
    "LINE_KINDS",
    "LISTING",
    "LOG",
    "MARKUP",
    "PROSE",
    "content_kind",
]

_SNIFF_LINES = 64
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_DIFF_HEAD = re.compile(r"^(?:diff --git |--- \S|\+\+\+ \S|Index: )", re.M)
_HIT = re.compile(r"^[\w.~/-][^\s:]*(?::\d+[:-]|/$|\.\w{1,8}$)")
_LOGLIKE = re.compile(
    r"\b(?:INFO|DEBUG|WARN(?:ING)?|ERROR|FATAL|TRACE|PASSED|FAILED|passed|failed|error|warning|"
    r"Traceback|Exception)\b|^\s*(?:\[?\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|\$ |> |=+ |-+ )"
)


def content_kind(text: str, tool_name: str = "", arguments: Mapping[str, Any] | None = None) -> str:
    """The kind of one tool output (see the constants above)."""
    args = arguments if arguments is not None else {}
    if is_code_read(tool_name, args):
        return CODE
    if looks_like_html(text):
        return MARKUP
    head = text.lstrip("\ufeff \t\r\n")[:1]
    if head in ("{", "["):
        return JSON
    if "@@ -" in text and _HUNK.search(text) and _DIFF_HEAD.search(text):
        return DIFF
    lines = [ln for ln in text[:16_384].splitlines()[:_SNIFF_LINES] if ln.strip()]
    if not lines:
        return PROSE
    if sum(1 for ln in lines if _HIT.match(ln)) * 2 >= len(lines):
        return LISTING
    if sum(1 for ln in lines if _LOGLIKE.search(ln)) * 4 >= len(lines):
        return LOG
    return PROSE
