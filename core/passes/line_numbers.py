"""line_numbers: drop per-line number prefixes (or their padding), keep the position.

`cat -n`, `nl`, Claude Code's Read (`     1→text`, `    12\\ttext`) and editors
(`12: text`, `12 | text`) prefix every line with its number: 6-8 characters, often 2-3
tokens, per line. When the numbers run consecutively they are implied by the first one,
so one header `[lines 12-240]` keeps the position and the prefixes can go.

Only one prefix style is stripped per text (the most frequent), and only when the
numbered lines form an unbroken count (each one more than the previous numbered line,
as `nl` numbers non-blank lines, or one more per line, as `cat -n` does), there are at
least `min_lines` of them, and they are at least `min_ratio` of the non-blank lines.
`grep -n` output, with gaps, keeps its numbers: there they are information. Lines that
are not part of the run (a wrapped continuation, a trailing notice) are kept verbatim.

Pure and deterministic; never raises; returns its input object when it does not apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from .base import LINE_KINDS, PassContext

__all__ = ["LineNumberStrip"]

# (style, pattern): group 1 is the number, the match end is where the content starts.
# Colon and pipe styles take one following space only when every numbered line has it,
# so indentation of the content survives (see _content_start).
_STYLES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("arrow", re.compile(r"[ \t]*(\d{1,9})→")),
    ("tab", re.compile(r"[ \t]*(\d{1,9})\t")),
    ("colon", re.compile(r"[ \t]*(\d{1,9}):")),
    ("pipe", re.compile(r"[ \t]*(\d{1,9}) ?\|")),
)


@dataclass(frozen=True, slots=True)
class LineNumberStrip:
    """Strip consecutive line-number prefixes and put the range into a `[lines a-b]` header."""

    name: ClassVar[str] = "line_numbers"
    accepts: ClassVar[frozenset[str]] = LINE_KINDS

    min_lines: int = 3
    """Fewest numbered lines worth stripping; fewer look like data that merely starts with a number."""
    min_ratio: float = 0.8
    """Smallest share of non-blank lines that must belong to the numbered run."""
    header: bool = True
    """Prepend `[lines first-last]` so the position in the file is not lost."""
    compact: bool = False
    """Keep every number and drop only its padding and separator: `     12→text` becomes
    `12\ttext`. About 70% of the saving of stripping (measured on Claude Code reads),
    and the agent can still cite any line by number (Read offsets, edit positions)."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The text without its line numbers, or the input object itself when it does not apply."""
        try:
            if not isinstance(text, str) or not text:
                return text
            lines = text.split("\n")
            nonblank = sum(1 for ln in lines if ln.strip())
            if nonblank == 0:
                return text
            best: tuple[int, str, list[tuple[int, int, int]]] | None = None
            for style, pattern in _STYLES:
                run = _longest_consecutive_run(lines, pattern)
                if best is None or len(run) > best[0]:
                    best = (len(run), style, run)
            assert best is not None
            count, style, run = best
            if count < max(1, self.min_lines) or count < self.min_ratio * nonblank:
                return text
            skip_space = style in ("colon", "pipe") and all(
                lines[i][end : end + 1] == " " or end == len(lines[i]) for i, _, end in run
            )
            out = list(lines)
            for i, number, end in run:
                start = end + 1 if skip_space and end < len(lines[i]) else end
                out[i] = f"{number}\t{lines[i][start:]}" if self.compact else lines[i][start:]
            body = "\n".join(out)
            if self.compact:
                return body if body != text else text
            if self.header:
                body = f"[lines {run[0][1]}-{run[-1][1]}]\n{body}"
            return body
        except Exception:
            return text


def _longest_consecutive_run(lines: list[str], pattern: re.Pattern[str]) -> list[tuple[int, int, int]]:
    """(line index, number, content start) of the longest run of numbered lines without a break.

    Two counts are tried: +1 per line (`cat -n`: number minus line index is constant) and
    +1 per numbered line (`nl` leaves blank lines unnumbered). A numbered-looking line that
    does not fit the run is content. Linear time; ties go to the run that starts first.
    """
    matches: list[tuple[int, int, int]] = []
    for i, line in enumerate(lines):
        m = pattern.match(line)
        if m:
            matches.append((i, int(m[1]), m.end()))
    if not matches:
        return []
    # +1 per line: group by the offset number - index.
    groups: dict[int, list[tuple[int, int, int]]] = {}
    for item in matches:
        groups.setdefault(item[1] - item[0], []).append(item)
    best = max(groups.values(), key=len)  # max() keeps the first of equal lengths
    # +1 per numbered line: longest chain n, n+1, n+2, ... in order of appearance.
    tip: dict[int, int] = {}  # number -> index in `matches` of the longest chain ending there
    length = [0] * len(matches)
    prev = [-1] * len(matches)
    for k, (_, n, _) in enumerate(matches):
        j = tip.get(n - 1, -1)
        length[k] = length[j] + 1 if j >= 0 else 1
        prev[k] = j
        if n not in tip or length[k] > length[tip[n]]:
            tip[n] = k
    end = max(range(len(matches)), key=lambda k: (length[k], -k))
    if length[end] > len(best):
        chain: list[tuple[int, int, int]] = []
        while end >= 0:
            chain.append(matches[end])
            end = prev[end]
        best = chain[::-1]
    return best
