"""Rebuild an original from a content pass's output and the original's lines, for tests.

A content pass replaces lines start..end of the original with one fold marker, or (for
`search_listing`) puts a marker above shortened copies of lines start..end. Putting the
original's lines back in each marker's place must give the original byte for byte: that
is "every marker's range holds exactly the lines it replaced". Each shortened line must
also be a suffix of the original line it stands for (a path or a listing's columns cut
from its front), so what the model reads there is the original's own text.
"""

from __future__ import annotations

from tokenpilot.passes.folding import parse_markers


def restore(reduced: str, original: str) -> str:
    """The original rebuilt from `reduced`: each marker (and the shortened lines it heads)
    replaced by the original's lines in the marker's range. Raises AssertionError where a
    shortened line is not a suffix of its original line."""
    orig = original.splitlines(keepends=True)
    red = reduced.splitlines(keepends=True)
    out: list[str] = []
    k = 0
    while k < len(red):
        found = parse_markers(red[k])
        if not found:
            out.append(red[k])
            k += 1
            continue
        ((_, start, end),) = found
        k += 1
        if "shown below" in red[k - 1]:
            for n in range(start, end + 1):
                short = red[k].rstrip("\r\n")
                body = orig[n - 1].rstrip("\r\n")
                assert body.endswith(short) or body.endswith(short.rstrip("/")), (short, body)
                k += 1
        out.extend(orig[start - 1 : end])
    return "".join(out)
