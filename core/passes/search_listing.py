"""search_listing: group search hits and file listings by file, with counts.

`grep -rn`, `rg` and `find` repeat the same path on every line: in `grep -rn` over a
package the path is often half the characters. Consecutive hits in one file become one
marker line naming the file, the count and the original's line range, followed by the
hits without the repeated path (`12:text`); consecutive entries of a listing in one
folder become the folder's marker followed by the bare names. Every shortened line lies
in its group's range, so `recall_artifact(start_line, end_line)` returns it with its path.

Only outputs that are mostly hits or paths are touched (`min_share` of the non-blank
lines); a group is shortened only when that saves more than its marker costs.

Pure and deterministic; never raises; returns its input object when it does not apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from .base import PassContext
from .folding import fold_marker, is_code_read, marker_line, original_lines

__all__ = ["SearchListing"]

_PATH = r"(?:\.{0,2}/)?[\w.@+~-]+(?:/[\w.@+~-]+)*"
# path:line:text, path-line-text (context), path:text (grep -r without -n)
_HIT = re.compile(rf"^(?P<path>{_PATH})(?P<rest>(?::\d+[:-]|-\d+-|:).*)$", re.DOTALL)
_ENTRY = re.compile(rf"^(?P<path>{_PATH}/)(?P<rest>[^/\s][^/]*/?)$", re.DOTALL)
# Every line `_HIT` or `_ENTRY` matches starts with path characters that hold or are followed
# by ':', '/' or '-': counted over the whole text at once, an upper bound on the hits.
_MAYBE = re.compile(r"^[\w.@+~/-]*[:/-]", re.MULTILINE)
# Line breaks of `str.splitlines` that `^` in MULTILINE mode does not see.
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _is_pathlike(path: str) -> bool:
    return "/" in path or bool(re.search(r"\.\w{1,5}$", path))


@dataclass(frozen=True, slots=True)
class SearchListing:
    """Group `path:hit` lines and path listings by file or folder, each group with its count."""

    name: ClassVar[str] = "search_listing"

    min_group: int = 3
    """Fewest consecutive lines of one file (or folder) that are grouped."""
    min_share: float = 0.6
    """Smallest share of non-blank lines that must be hits or paths for the output to count as one."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The grouped text, or the input object when it is not search output or saves nothing."""
        try:
            if not isinstance(text, str) or not ctx.artifact_id or is_code_read(ctx.tool_name, ctx.arguments):
                return text
            return self._group(text, ctx.artifact_id)
        except Exception:
            return text

    def _split(self, line: str) -> tuple[str, str, str] | None:
        body = line.rstrip("\r\n")
        m = _HIT.match(body)
        if m and _is_pathlike(m["path"]):
            rest = m["rest"][1:] if m["rest"].startswith(":") else m["rest"]
            return "hits", m["path"], rest
        m = _ENTRY.match(body)
        if m:
            return "entries", m["path"], m["rest"]
        return None

    def _group(self, text: str, aid: str) -> str:
        lines = original_lines(text)
        nonblank = sum(1 for ln in lines if ln.strip())
        if not nonblank:
            return text
        if not _OTHER_BREAKS.search(text) and len(_MAYBE.findall(text)) < self.min_share * nonblank:
            return text  # too few lines could be hits or paths (an upper bound): not search output
        parsed = [self._split(ln) for ln in lines]
        if sum(p is not None for p in parsed) < self.min_share * nonblank:
            return text
        out: list[str] = []
        changed = False
        i = 0
        while i < len(lines):
            p = parsed[i]
            j = i + 1
            if p is not None:
                while j < len(lines) and parsed[j] is not None and parsed[j][:2] == p[:2]:  # type: ignore[index]
                    j += 1
            n = j - i
            if p is not None and n >= self.min_group:
                kind, path, _ = p
                what = f"{n} {'hits in' if kind == 'hits' else 'entries of'} {path}, shown below without the path"
                marker = fold_marker(aid, i + 1, j, what)
                short = [parsed[k][2] + "\n" for k in range(i, j)]  # type: ignore[index]
                if len(marker) + sum(map(len, short)) < sum(len(ln) for ln in lines[i:j]):
                    out.append(marker_line(out, marker))
                    if not lines[j - 1].endswith(("\n", "\r")):
                        short[-1] = short[-1][:-1]
                    out.extend(short)
                    changed = True
                    i = j
                    continue
            out.extend(lines[i:j])
            i = j
        return "".join(out) if changed else text
