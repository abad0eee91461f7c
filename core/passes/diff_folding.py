"""diff_folding: keep a diff's headers and changed lines, fold long unchanged context.

A unified diff (`git diff`, `git show`, a patch file) is read for what changed. File
headers, hunk headers (`@@ -a,b +c,d @@`) and every `+`/`-` line stay verbatim, as do
the `keep_context` unchanged lines on each side of a change; a longer run of unchanged
context lines becomes one marker with the count and its line range in the original.

Pure and deterministic; never raises; returns its input object when it does not apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from .base import LINE_KINDS, PassContext
from .folding import fold_runs, original_lines

__all__ = ["DiffFolding"]

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


@dataclass(frozen=True, slots=True)
class DiffFolding:
    """Fold runs of unchanged context lines inside the hunks of a unified diff."""

    name: ClassVar[str] = "diff_folding"
    accepts: ClassVar[frozenset[str]] = LINE_KINDS  # a diff alone, in a commit, or in any run

    keep_context: int = 3
    """Unchanged lines kept next to each change (git's default context)."""
    min_fold: int = 4
    """Fewest context lines worth one marker."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The diff with long unchanged stretches folded, or the input object."""
        try:
            if not isinstance(text, str) or not ctx.artifact_id:
                return text
            return self._fold(text, ctx.artifact_id)
        except Exception:
            return text

    def _fold(self, text: str, aid: str) -> str:
        if "@@ -" not in text:  # no hunk header can match: skip the line scan
            return text
        lines = original_lines(text)
        if not any(_HUNK.match(ln) for ln in lines):
            return text
        cuts: list[tuple[int, int, str]] = []
        in_hunk = False
        i = 0
        keep = max(0, self.keep_context)
        while i < len(lines):
            ln = lines[i]
            if _HUNK.match(ln):
                in_hunk = True
                i += 1
                continue
            if in_hunk and ln.startswith(" "):
                j = i
                while j < len(lines) and lines[j].startswith(" "):
                    j += 1
                start = i + keep if i > 0 and not _HUNK.match(lines[i - 1]) else i
                end = j - keep if j < len(lines) and lines[j][:1] in "+-\\" else j
                if end - start >= max(1, self.min_fold):
                    cuts.append((start, end, f"{end - start} unchanged lines"))
                i = j
                continue
            if ln[:1] not in "+-\\":
                in_hunk = False
            i += 1
        out = fold_runs(lines, cuts, aid)
        return text if out is None else out
