"""What the content-aware passes share: original line numbers, fold markers, code reads.

A content pass cuts whole lines of the *original* output and leaves a marker in their
place that names the artifact and the 1-based, inclusive line range it replaced, in
the numbering `recall_artifact(start_line, end_line)` uses (`str.splitlines`), so the
model gets exactly those lines back with one call. Markers depend only on the text and
the artifact id, so a folded output renders the same bytes forever (I1, I2).

Content passes therefore run first in the pipeline, on the text as the tool returned it;
the layout passes after them only touch the lines they kept.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from ..messages.call_kinds import shell_command
from .truncate import tool_family

__all__ = ["MARKER_PREFIX", "fold_marker", "is_code_read", "marker_line", "original_lines", "parse_markers"]

MARKER_PREFIX = "[… "
MARKER_WORTH = 1.5
_MARKER = re.compile(r'lines (\d+)–(\d+) of the original: recall_artifact\(artifact_id=\\?"(art_[0-9a-f]+)')

# Tools whose output is a file's text (reads, and the echo of a write or an edit).
_CODE_TOOLS = frozenset(
    {
        "read",
        "file_read",
        "read_file",
        "view",
        "cat",
        "notebook_read",
        "open",
        "goto",
        "scroll_up",
        "scroll_down",
    }
    | {
        "write",
        "edit",
        "multiedit",
        "write_file",
        "edit_file",
        "str_replace_editor",
        "str_replace_based_edit_tool",
    }
)
# Commands that print a file's text: what the agent reads there it may quote in an edit.
_READ_COMMANDS = frozenset({"cat", "head", "tail", "nl", "less", "more", "bat", "sed", "awk", "view", "open"})
_SOURCE_SUFFIX = re.compile(
    r"\.(?:py|pyi|js|jsx|ts|tsx|rs|go|java|kt|rb|ex|exs|erl|c|h|cc|cpp|hpp|cs|php|swift|scala|"
    r"sh|bash|zsh|lua|pl|r|sql|html|css|scss|vue|svelte|toml|ya?ml|cfg|ini|json|md|rst|txt)\b"
)


def original_lines(text: str) -> list[str]:
    """The text's lines, ends kept, numbered as `recall_artifact` numbers them."""
    return text.splitlines(keepends=True)


def fold_marker(artifact_id: str, start: int, end: int, what: str) -> str:
    """One line standing for lines `start`..`end` (1-based, inclusive) of the original."""
    return (
        f"{MARKER_PREFIX}{what}, lines {start}–{end} of the original: "
        f'recall_artifact(artifact_id="{artifact_id}", start_line={start}, end_line={end})]'
    )


def marker_line(out: list[str], marker: str) -> str:
    """`marker` as a line of its own after the kept lines in `out`."""
    before = "" if not out or out[-1].splitlines()[0] != out[-1] else "\n"
    return f"{before}{marker}\n"


def parse_markers(text: str) -> list[tuple[str, int, int]]:
    """(artifact id, start, end) of every fold marker in a reduced text."""
    return [(m[3], int(m[1]), int(m[2])) for m in _MARKER.finditer(text)]


def is_code_read(tool_name: str, arguments: Mapping[str, Any]) -> bool:
    """Is this output a file's text: a read or edit tool, or a shell call that prints a
    source file (`cat x.py`, `sed -n 1,80p x.py`, `head f.ex`)?

    Code reads stay exact: the agent quotes them back in its edits. Only the first
    command of a pipeline or `&&` chain after `cd` counts; anything that cannot be
    parsed is treated as not a read (the passes then look at the content itself).
    """
    if tool_family(tool_name) in _CODE_TOOLS:
        return True
    command = shell_command(arguments) if isinstance(arguments, Mapping) else None
    if command is None:
        return False
    for part in re.split(r"&&|;|\|\|", command):
        try:
            words = shlex.split(part.split("|")[0])
        except ValueError:
            return False
        if not words or words[0] == "cd":
            continue
        return words[0] in _READ_COMMANDS and any(_SOURCE_SUFFIX.search(w) for w in words[1:])
    return False


def fold_runs(lines: list[str], cuts: list[tuple[int, int, str]], artifact_id: str) -> str | None:
    """`lines` with each cut (0-based start, end exclusive, what) replaced by one marker.

    A cut is made only where what it replaces is at least `MARKER_WORTH` times as long as
    the marker: a marker (a hex id, a call) takes about 3.2 chars per token where logs and
    code take about 4.3, so a shorter cut could save chars and still cost tokens. Cuts must be
    sorted and disjoint. None when no cut pays off.
    """
    out: list[str] = []
    pos = 0
    changed = False
    for start, end, what in cuts:
        marker = fold_marker(artifact_id, start + 1, end, what)
        if sum(len(ln) for ln in lines[start:end]) < MARKER_WORTH * len(marker):
            continue
        out.extend(lines[pos:start])
        out.append(marker_line(out, marker))
        pos = end
        changed = True
    if not changed:
        return None
    out.extend(lines[pos:])
    return "".join(out)
