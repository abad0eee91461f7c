"""search_listing: group search hits and file listings by file, with counts.

`grep -rn`, `rg` and `find` repeat the same path on every line: in `grep -rn` over a
package the path is often half the characters. Consecutive hits in one file become one
marker line naming the file, the count and the original's line range, followed by the
hits without the repeated path (`12:text`). Consecutive paths of a listing (`find`,
a glob) under one folder become the folder's marker followed by the paths relative to
it: the folder is the one the group's first `min_group` paths share, so a glob over
`deps/*/mix.exs` groups under `deps/` and a listing of one folder under that folder.
The rows of `ls -l` become a marker followed by their names (folders end in `/`, links
keep `-> target`): mode, links, owner, group, size and date are what the rows repeat
and what an agent rarely reads. Every shortened line lies in its group's range, so
`recall_artifact(start_line, end_line)` returns it whole.

Only outputs that are mostly hits or paths are touched (`min_share` of the non-blank
lines); a group is shortened only when that saves more than its marker costs.

Pure and deterministic; never raises; returns its input object when it does not apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from .base import CODE, LINE_KINDS, PassContext
from .folding import fold_marker, is_code_read, marker_line, original_lines

__all__ = ["SearchListing"]

_PATH = r"(?:\.{0,2}/)?[\w.@+~-]+(?:/[\w.@+~-]+)*"
# path:line:text, path-line-text (context), path:text (grep -r without -n)
_HIT = re.compile(rf"^(?P<path>{_PATH})(?P<rest>(?::\d+[:-]|-\d+-|:).*)$", re.DOTALL)
_ENTRY = re.compile(rf"^{_PATH}/?$")
# One row of `ls -l`: type and permissions, links, owner, group, size, date, name.
_LS_ROW = re.compile(
    r"^(?P<type>[-dlcbps])[-rwxsStT]{9}[@+.]?\s+\d+\s+\S+\s+\S+\s+[\d,]+\s+"
    r"\w{3}\s+\d{1,2}\s+(?:\d{4}|\d{1,2}:\d{2})\s(?P<name>.+)$"
)
# Every line `_split` accepts starts with path characters that hold or are followed by
# ':', '/' or '-' (a hit, a path with a folder), or with an `ls -l` mode: counted over the
# whole text at once, an upper bound on the lines it accepts (tests/test_passes_fast_scan.py).
_MAYBE = re.compile(r"^(?:[\w.@+~/-]*[:/-]|[-dlcbps][-rwxsStT]{9})", re.MULTILINE)
# Line breaks of `str.splitlines` that `^` in MULTILINE mode does not see.
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# `_MAYBE` after a line feed: its literal start lets `re` jump from line to line (memchr)
# instead of trying `^` at every character; `_MAYBE` cannot match a line feed, so each
# match here is one of `_MAYBE`'s after the first line (tests/test_speed_search_listing.py).
_MAYBE_AFTER_LF = re.compile(r"\n(?:[\w.@+~/-]*[:/-]|[-dlcbps][-rwxsStT]{9})")
_ASCII_OTHER_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e"  # the ones ASCII text can hold


def maybe_count(text: str) -> int:
    """`len(_MAYBE.findall(text))`: lines that could be hits, paths or `ls -l` rows."""
    return (1 if _MAYBE.match(text) else 0) + len(_MAYBE_AFTER_LF.findall(text))


def other_breaks(text: str) -> bool:
    """`_OTHER_BREAKS.search(text) is not None`, with `str` scans on ASCII text."""
    if text.isascii():
        return any(c in text for c in _ASCII_OTHER_BREAKS)
    return _OTHER_BREAKS.search(text) is not None


def _is_pathlike(path: str) -> bool:
    return "/" in path or bool(re.search(r"\.\w{1,5}$", path))


def _common_folder(paths: list[str]) -> str:
    """The longest folder (ending in `/`) that every path lies under, or ""."""
    first, last = min(paths), max(paths)
    k = 0
    while k < min(len(first), len(last)) and first[k] == last[k]:
        k += 1
    return first[: first.rfind("/", 0, k) + 1] if k else ""


@dataclass(frozen=True, slots=True)
class SearchListing:
    """Group `path:hit` lines and path listings by file or folder, each group with its count."""

    name: ClassVar[str] = "search_listing"
    accepts: ClassVar[frozenset[str]] = LINE_KINDS - {CODE}  # a file's text stays exact

    min_group: int = 3
    """Fewest consecutive lines of one file (or folder) that are grouped."""
    min_share: float = 0.6
    """Smallest share of non-blank lines that must be hits or paths for the output to count as one."""
    whole_paths: bool = True
    """A listing's paths stay whole (True) instead of relative to their shared folder.
    An agent copies a path it found into its next call (it opens the file): a path
    split into a folder marker and a rest is one it must rebuild, and the path as
    written is what it needs (`claude_code_codemie`'s Glob of 52 absolute paths,
    Codex's `rg --files`: every full path it then opened was in no line). Search hits
    still lose their repeated path: the group's marker names the file whole."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The grouped text, or the input object when it is not search output or saves nothing."""
        try:
            if not isinstance(text, str) or not ctx.artifact_id or is_code_read(ctx.tool_name, ctx.arguments):
                return text
            return self._group(text, ctx.artifact_id)
        except Exception:
            return text

    def _split(self, line: str) -> tuple[str, str, str] | None:
        """(kind, what groups it, its short form), or None for a line of another kind."""
        body = line.rstrip("\r\n")
        m = _HIT.match(body)
        if m and _is_pathlike(m["path"]):
            rest = m["rest"][1:] if m["rest"].startswith(":") else m["rest"]
            return "hits", m["path"], rest
        if "/" in body and _ENTRY.match(body):
            return "entries", body, body
        m = _LS_ROW.match(body)
        if m:
            name = m["name"].lstrip(" ")
            return "rows", "", name + "/" if m["type"] == "d" and not name.endswith("/") else name
        return None

    def _extent(self, parsed: list[tuple[str, str, str] | None], i: int) -> tuple[int, str]:
        """Where the group starting at line `i` ends (exclusive) and what it is grouped by:
        hits by their file, rows of `ls -l` all together, paths by a folder (below)."""
        kind, key, _ = parsed[i]  # type: ignore[misc]
        n = len(parsed)
        if kind == "entries":
            return self._folder_extent(parsed, i)
        j = i + 1
        while j < n and (p := parsed[j]) is not None and p[0] == kind and p[1] == key:
            j += 1
        return j, key

    def _folder_extent(self, parsed: list[tuple[str, str, str] | None], i: int) -> tuple[int, str]:
        """Paths group under their own folder when at least `min_group` in a row share it
        (a listing of one folder: each line keeps just its name); otherwise under the
        folder that the next `min_group` paths share (a glob over `deps/*/mix.exs`:
        `deps/`). Each scan stops at the first path outside its folder: linear work."""
        n = len(parsed)
        own = parsed[i][1]  # type: ignore[index]
        head = [parsed[k] for k in range(i, min(n, i + max(2, self.min_group)))]
        shared = ""
        if all(p is not None and p[0] == "entries" for p in head):
            shared = _common_folder([p[1] for p in head])  # type: ignore[index]
        for folder in (own[: own.rfind("/") + 1], shared):
            j = i
            # "/" or "./" alone saves a char or two a line and makes every path look
            # relative to the working folder: a group needs a named folder
            named = folder.lstrip("./")
            while named and j < n and (p := parsed[j]) is not None and p[0] == "entries":
                if not p[1].startswith(folder) or p[1] == folder:
                    break
                j += 1
            if j - i >= self.min_group:
                return j, folder
        return i + 1, ""

    def _group(self, text: str, aid: str) -> str:
        lines = original_lines(text)
        nonblank = sum(1 for ln in lines if ln.strip())
        if not nonblank:
            return text
        if not other_breaks(text) and maybe_count(text) < self.min_share * nonblank:
            return text  # too few lines could be hits or paths (an upper bound): not search output
        parsed = [self._split(ln) for ln in lines]
        if sum(p is not None for p in parsed) < self.min_share * nonblank:
            return text
        out: list[str] = []
        changed = False
        i = 0
        while i < len(lines):
            p = parsed[i]
            j, key = (i + 1, "") if p is None else self._extent(parsed, i)
            n = j - i
            if p is not None and n >= self.min_group and not (p[0] == "entries" and self.whole_paths):
                kind = p[0]
                short = [parsed[k][2][len(key) if kind == "entries" else 0 :] + "\n" for k in range(i, j)]  # type: ignore[index]
                if kind == "hits":
                    what = f"{n} hits in {key}, shown below without the path"
                elif kind == "rows":
                    what = f"{n} rows of an ls -l listing, shown below by name (folders end in /)"
                elif all("/" not in s.rstrip("\n/") for s in short):
                    what = f"{n} entries of {key}, shown below without the path"
                else:
                    what = f"{n} paths under {key}, shown below relative to it"
                marker = fold_marker(aid, i + 1, j, what)
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
