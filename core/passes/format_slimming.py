"""format_slimming: shrink layout, never words.

Tools pad for human eyes: aligned markdown tables, 80-column `=====` rules, box-drawn
grids (rich, tabulate, psql), and blocks indented as a whole. A model reads the same
cells, headings and relative indentation from a fraction of the characters.

Choices, all conservative:

* Tables: only markdown-style rows (a line that starts and ends with `|`, in a block of
  at least two) lose their cell padding; escaped `\\|` stays inside its cell. A row
  drawn with box verticals (`│ a │ b │`) is rewritten with `|` first.
* Rules: a run of one rule character (`- = * ~ # . ─ ━ ═ …`) longer than `max_rule_run`
  becomes three of it, inside a line too (pytest's `==== 3 passed ====`). `_` is not a
  rule character (identifiers). A literal such as `"----------"` inside code is shortened
  as well; the original stays recallable.
* Borders: a line made only of box-drawing characters (or an ASCII grid border such as
  `+----+----+`) carries no word and is dropped; the first remaining row reads as the
  header. Lines with any letter or digit (a `tree` listing) are never dropped.
* Indentation: only the indentation *common to every non-blank line* is removed
  (`textwrap.dedent`), so relative indentation, and with it Python's meaning, is kept.
  Lines are never re-indented individually.

Note for whoever wires the pipeline: every change here alters the literal text, so an
agent that copies a slimmed `read` output into an edit's `old_string` may not match the
file; apply this pass to listings and logs rather than to file reads.

Pure and deterministic; never raises; returns its input object when nothing changes.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import ClassVar

from .base import LINE_KINDS, PassContext

__all__ = ["FormatSlimming"]

_RULE_CHARS = "-=*~#.─━═┄┅┈┉╌╍"
_BOX_VERTICAL = "│┃║╎╏┆┇┊┋"
_BOX_ALL = "".join(chr(c) for c in range(0x2500, 0x2580))  # the Box Drawing block
_BORDER_LINE = re.compile(
    rf"^[ \t]*(?:[{re.escape(_BOX_ALL)}][{re.escape(_BOX_ALL)} \t+\-=:|]*"  # box-drawn border
    rf"|\+[-=:+]*[-=][-=:+]*\+)[ \t]*(?:\n|\Z)",  # ASCII grid border +----+----+
    re.MULTILINE,
)
_BOX_ROW = re.compile(rf"^([ \t]*)[{_BOX_VERTICAL}]([^\n]*)[{_BOX_VERTICAL}][ \t]*$", re.MULTILINE)
_BOX_VERTICALS = str.maketrans(dict.fromkeys(_BOX_VERTICAL, "|"))
# Two or more consecutive lines that start and end with "|" (a lone one is likely a shell pipe).
_TABLE_BLOCK = re.compile(r"(?:^[ \t]*\|[^\n]*\|[ \t]*(?:\n|\Z)){2,}", re.MULTILINE)
# Any non-blank line that starts at column 0 means there is no common indentation.
_UNINDENTED_LINE = re.compile(r"^[^ \t\n]", re.MULTILINE)
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_SEPARATOR_CELL = re.compile(r"^(:?)-+(:?)$")


def _rule_run(max_run: int) -> re.Pattern[str]:
    return re.compile(rf"([{re.escape(_RULE_CHARS)}])\1{{{max_run},}}")


def _slim_row(line: str) -> str:
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    body = line.strip(" \t")
    cells = [c.strip() for c in _CELL_SPLIT.split(body)[1:-1]]
    cells = [_slim_separator(c) for c in cells]
    return indent + "| " + " | ".join(cells) + " |"


def _slim_block(m: re.Match[str]) -> str:
    block = m[0]
    end = "\n" if block.endswith("\n") else ""
    return "\n".join(_slim_row(row) for row in block[: len(block) - len(end)].split("\n")) + end


def _slim_separator(cell: str) -> str:
    m = _SEPARATOR_CELL.match(cell)
    if not m:
        return cell
    return m[1] + "---" + m[2]


@dataclass(frozen=True, slots=True)
class FormatSlimming:
    """Remove layout padding (table cell padding, long rules, borders, common indentation)."""

    name: ClassVar[str] = "format_slimming"
    accepts: ClassVar[frozenset[str]] = LINE_KINDS

    table_padding: bool = True
    """Collapse the padding of markdown table cells: `|  a   |  b  |` -> `| a | b |`."""
    max_rule_run: int | None = 8
    """A run of one rule character longer than this becomes 3 characters; None (or below 3) keeps all."""
    box_drawing: bool = True
    """Drop pure border lines (box-drawing or `+---+`) and turn box verticals of table rows into `|`."""
    dedent: bool = True
    """Remove indentation common to all non-blank lines (relative indentation is kept)."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The slimmed text, or the input object itself when nothing changed or anything failed."""
        try:
            if not isinstance(text, str) or not text:
                return text
            out = text
            if self.box_drawing:
                out = _BORDER_LINE.sub("", out)
                if out.endswith("\n") and not text.endswith("\n"):
                    out = out[:-1]  # the last line was a border: drop the newline before it too
                out = _BOX_ROW.sub(lambda m: f"{m[1]}|{m[2].translate(_BOX_VERTICALS)}|", out)
            if self.table_padding and "|" in out:
                out = _TABLE_BLOCK.sub(_slim_block, out)
            if self.max_rule_run is not None and self.max_rule_run >= 3:
                out = _rule_run(self.max_rule_run).sub(lambda m: m[1] * 3, out)
            if self.dedent and not _UNINDENTED_LINE.search(out):
                out = textwrap.dedent(out)
            return text if out == text else out
        except Exception:
            return text
