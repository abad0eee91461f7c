"""A web page as text, and what the agent is shown of it: every cut marked where it was.

`html_slimming` renders a page's body to lines of text (`PageText`) and says, for each
line, whether it is part of the article or of what a reader skips (navigation, share
buttons, a cookie notice, hidden text). The agent is shown the article; each run of
skipped lines becomes one marker, in its place, that says in words what it held and
names the lines of the *page text* it stands for, so one `recall_artifact` call with
that line range returns exactly those lines. The page text is stored as an artifact of
its own for that (its lines are the ones the agent can ask for by number; the HTML's
lines never were). The HTML itself stays recallable under the tool result's own id.

Pure: the same page and ids give the same bytes (I1, I2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._canonical import artifact_id_for
from .folding import MARKER_WORTH

__all__ = ["PAGE_MARKER", "PageText"]

# What a cut marker looks like: count, what was cut, the page text's id, the line range.
PAGE_MARKER = re.compile(
    r'\[… (\d+) lines? cut \((.+?)\): recall_artifact\(artifact_id="(art_[0-9a-f]+)", '
    r"start_line=(\d+), end_line=(\d+)\)\]"
)


@dataclass(frozen=True, slots=True)
class PageText:
    """A page's rendered lines and, per line, why it is cut from what the agent reads
    (None: shown). A line may hold a preformatted block of several lines."""

    lines: tuple[str, ...]
    reasons: tuple[str | None, ...]

    @property
    def text(self) -> str:
        """The whole page as text: what cut markers number their lines in."""
        return "\n".join(self.lines)

    def shown(self, limit: int | None = None) -> tuple[str, str | None]:
        """(What the agent reads, the page text to store for its markers or None).

        A run of cut lines is cut only when it is `MARKER_WORTH` times as long as its
        marker (otherwise it is shown: a marker would cost more than it saves). Past
        `limit` chars, the rest of the page is one more marked cut.
        """
        full = self.text
        tid = artifact_id_for(full)
        spans = _spans(self.lines)
        # (index of the page line it starts at, what is shown): a kept line, or a cut's marker
        shown: list[tuple[int, str]] = []
        cut_any = False
        n = len(self.lines)
        i = 0
        while i < n:
            j = i + 1
            if self.reasons[i] is None:
                shown.append((i, self.lines[i]))
                i = j
                continue
            while j < n and self.reasons[j] is not None:
                j += 1
            kinds = list(dict.fromkeys(_PHRASES.get(r, r) for r in self.reasons[i:j] if r))
            marker = _marker(tid, spans[i][0], spans[j - 1][1], ", ".join(kinds))
            if sum(len(ln) + 1 for ln in self.lines[i:j]) >= MARKER_WORTH * len(marker):
                shown.append((i, marker))
                cut_any = True
            else:
                shown.extend((k, self.lines[k]) for k in range(i, j))
            i = j
        out: list[str] = []
        size = 0
        for at, line in shown:
            if limit is not None and size + len(line) + 1 > limit:
                rest = sum(len(ln) + 1 for ln in self.lines[at:])
                what = f"the rest of the page, {rest:,} chars over the tool's {limit:,}-char limit"
                out.append(_marker(tid, spans[at][0], spans[-1][1], what))
                cut_any = True
                break
            out.append(line)
            size += len(line) + 1
        return "\n".join(out), (full if cut_any else None)


_PHRASES = {"hidden": "hidden text", "links": "the links of the text above, as label: URL"}


def _marker(tid: str, start: int, end: int, what: str) -> str:
    count = end - start + 1
    lines = "line" if count == 1 else "lines"
    return (
        f"[… {count} {lines} cut ({what}): "
        f'recall_artifact(artifact_id="{tid}", start_line={start}, end_line={end})]'
    )


def _spans(lines: tuple[str, ...]) -> list[tuple[int, int]]:
    """Per rendered line, the first and last line number it takes in the page text
    (`str.splitlines`, 1-based: how `recall_artifact` counts)."""
    spans = []
    at = 1
    for line in lines:
        count = max(1, len(line.splitlines()))
        spans.append((at, at + count - 1))
        at += count
    return spans
