"""The `pattern` of `recall_artifact`: lines of an original that match a model-written regex.

The model writes the pattern, so it must not be able to hang the process: Python's `re`
backtracks, and `(a+)+$` over one line of 40 a's and a b never returns (holding the
GIL, so a proxy stops serving every session). Matching runs on RE2 (`google-re2`),
whose time is linear in the text, with a memory budget per pattern.

Linear is not fast enough on its own: some small patterns (`[ab]*a[ab]{20}c`) push
RE2 off its DFA and cost seconds over 10 MB. So the text is searched in windows of
at most `WINDOW_BYTES`, and the search stops at the first window that ends past
`budget_s`, saying where it stopped. That time budget is the only clock-dependent
output of TokenPilot; patterns that run at RE2's ordinary speed never reach it.

Semantics, kept close to the former `re.search` on each line:
- each line is matched on its own (a match never spans a line break) and anchors are
  per line: `^`, `$`, `\\A`, `\\Z` and `\\z` mean the start and end of the line;
- `\\d`, `\\w`, `\\s` and `\\b` are ASCII, as in RE2 (Python's are Unicode);
- a pattern RE2 cannot run (backreferences, lookaround, possessive or atomic groups,
  a syntax error, a lone surrogate, more than the memory budget) is searched as plain,
  case-sensitive text, and `LineMatches.fallback` says why.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import AnyStr

import re2

SEARCH_BUDGET_S = 0.5
"""Search time after which the scan stops at the next window boundary."""
MAX_MEM_BYTES = 32 << 20
"""RE2's memory budget per pattern (program and DFA caches): bounds what one recall holds."""
WINDOW_BYTES = 64 << 10
"""A window ends at the first line break after this many bytes..."""
MAX_WINDOW_BYTES = 256 << 10
"""...or here, inside a line longer than that (then windows overlap by `OVERLAP_BYTES`,
so a match shorter than that is never lost at a cut)."""
OVERLAP_BYTES = 4 << 10
LONG_LINE = 2000  # a matching line longer than this comes back as snippets around each match
CONTEXT = 200  # chars kept on each side of a match in a long line
MAX_SNIPPETS = 20

# Python's str.splitlines() breaks (bar "\r\n", whose "\n" already ends the line).
_BREAKS = re.compile("\r(?!\n)|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_BREAK_CHARS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_SURROGATES = re.compile("[\ud800-\udfff]")

Finder = Callable[[int, int], tuple[int, int] | None]


@dataclass(frozen=True, slots=True)
class LineMatches:
    """What a search found: the formatted lines, and how the search went."""

    text: str  # "N: line" per matching line; "N[chars a-b of L]: ..." snippets for long lines
    matched: int  # number of matching lines
    fallback: str = ""  # why the pattern was searched as plain text; "" when it ran as a regex
    stopped_at: int | None = None  # 0-based index of the first line not searched (time budget)


def search_lines(
    lines: Sequence[str],
    pattern: str,
    lo: int = 0,
    hi: int | None = None,
    *,
    budget_s: float = SEARCH_BUDGET_S,
) -> LineMatches:
    """The lines in `lines[lo:hi]` (keepends, as `str.splitlines(True)` gives) matching `pattern`.

    Never raises for the pattern: one RE2 cannot run is searched as plain text.
    """
    hi = len(lines) if hi is None else hi
    original = "".join(lines[lo:hi])
    # One break per line, "\n", with the same length as `original`, so offsets carry
    # over; output always comes from `lines`.
    plain = _BREAKS.sub("\n", original) if any(c in original for c in _BREAK_CHARS) else original
    regex, fallback = compile_pattern(pattern)
    deadline = time.monotonic() + budget_s
    buf: str | bytes
    if regex is not None:
        buf = _utf8(plain)
        find = _regex_finder(regex, buf)
        hits, stopped = _matching_lines(buf, b"\n", find, deadline)
        re2.purge()  # the module caches 128 programs, each with up to MAX_MEM_BYTES of DFA
    else:
        buf = plain
        find = _literal_finder(original, plain, pattern)
        hits, stopped = _matching_lines(buf, "\n", find, deadline)
    out: list[str] = []
    for k, start, end in hits:
        line = lines[lo + k]
        if len(line) <= LONG_LINE:
            out.append(f"{lo + k + 1}: {line}")
            continue
        spans = _spans(buf, find, start, end, MAX_SNIPPETS + 1, deadline)
        offsets = _char_offsets(buf, start, [x for s in spans for x in s])
        for j in range(min(len(spans), MAX_SNIPPETS)):
            a = max(offsets[2 * j] - CONTEXT, 0)
            b = min(offsets[2 * j + 1] + CONTEXT, len(line))
            out.append(f"{lo + k + 1}[chars {a}-{b} of {len(line)}]: {line[a:b].rstrip()}\n")
        if len(spans) > MAX_SNIPPETS:
            out.append(f"{lo + k + 1}: [more matches on this line; narrow the pattern]\n")
    return LineMatches("".join(out), len(hits), fallback, None if stopped is None else lo + stopped)


def compile_pattern(pattern: str) -> tuple[re2._Regexp | None, str]:
    """The RE2 program for `pattern` (per-line anchors), or None and why it cannot be one."""
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError:
        return None, "the pattern contains a lone surrogate, which a regex cannot match"
    options = re2.Options()
    options.max_mem = MAX_MEM_BYTES
    options.never_nl = True  # no match spans a line break, even through \s or [^x]
    options.log_errors = False
    try:
        return re2.compile("(?m)" + _per_line(pattern), options), ""
    except re2.error as exc:
        return None, _why(pattern, exc)


def _why(pattern: str, exc: Exception) -> str:
    """A reason the model can act on, in RE2's words: its own syntax error, or a feature RE2 lacks."""
    msg = exc.args[0] if exc.args else str(exc)
    msg = msg.decode("utf-8", "replace") if isinstance(msg, bytes) else str(msg)
    msg = msg.replace("(?m)", "", 1)  # RE2 quotes the compiled text, our prefix included
    if "too large" in msg:
        return f"the pattern is too large to match within {MAX_MEM_BYTES >> 20} MiB"
    try:
        re.compile(pattern)
    except Exception:  # re.error, or RecursionError on deep nesting: not valid for Python either
        return f"invalid pattern ({msg})"
    return (
        f"the pattern uses syntax the linear-time matcher does not support ({msg}; no "
        "backreferences, lookahead/lookbehind, possessive or atomic groups)"
    )


def _per_line(pattern: str) -> str:
    """`\\A`, `\\Z`, `\\z` (outside classes) become `^`/`$`: every line is a text of its own."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            out.append({"A": "^", "Z": "$", "z": "$"}.get(nxt, ch + nxt) if not in_class else ch + nxt)
            i += 2
        elif in_class and pattern.startswith("[:", i):
            j = pattern.find(":]", i + 2)
            j = n if j < 0 else j + 2
            out.append(pattern[i:j])
            i = j
        elif ch == "[" and not in_class:
            j = i + 1
            j += pattern.startswith("^", j)
            j += pattern.startswith("]", j)  # "[]" and "[^]" open with a literal "]"
            out.append(pattern[i:j])
            i, in_class = j, True
        else:
            in_class = in_class and ch != "]"
            out.append(ch)
            i += 1
    return "".join(out)


def _utf8(text: str) -> bytes:
    """What RE2 reads: UTF-8, each lone surrogate as U+FFFD (one character for one)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text).encode("utf-8")


def _regex_finder(regex: re2._Regexp, buf: bytes) -> Finder:
    def find(pos: int, end: int) -> tuple[int, int] | None:
        m = regex.search(buf, pos, end)  # context-aware: ^ and $ see the bytes around
        return None if m is None else m.span()

    return find


def _literal_finder(original: str, plain: str, needle: str) -> Finder:
    """Plain-text search in the original (so a lone surrogate can be found), within one line."""

    def find(pos: int, end: int) -> tuple[int, int] | None:
        while True:
            a = original.find(needle, pos, end)
            if a < 0:
                return None
            b = a + len(needle)
            if "\n" not in plain[a:b]:
                return a, b
            pos = a + 1

    return find


def _matching_lines(
    buf: AnyStr, nl: AnyStr, find: Finder, deadline: float
) -> tuple[list[tuple[int, int, int]], int | None]:
    """(line index, start, end) of each line with a match, and the line where time ran out."""
    hits: list[tuple[int, int, int]] = []
    n = len(buf)
    pos, line_no, counted = 0, 0, 0
    while pos < n:
        end = _window_end(buf, nl, pos)
        span = find(pos, end)
        if span is None or (span[0] == n and buf.endswith(nl)):
            pos = end if end >= n or buf[end - 1 : end] == nl else _back(buf, end - OVERLAP_BYTES)
        else:
            start = buf.rfind(nl, 0, span[0]) + 1
            stop = buf.find(nl, span[0])
            stop = n if stop < 0 else stop
            line_no += buf.count(nl, counted, start)
            counted = start
            hits.append((line_no, start, stop))
            pos = stop + 1
        if pos < n and time.monotonic() > deadline:
            return hits, line_no + buf.count(nl, counted, pos)
    return hits, None


def _spans(
    buf: AnyStr, find: Finder, start: int, stop: int, limit: int, deadline: float
) -> list[tuple[int, int]]:
    """Up to `limit` non-overlapping matches inside one line [start, stop)."""
    out: list[tuple[int, int]] = []
    pos = start
    while pos <= stop and len(out) < limit:
        end = stop if stop - pos <= MAX_WINDOW_BYTES else _back(buf, pos + MAX_WINDOW_BYTES)
        span = find(pos, end)
        if span is None:
            if end >= stop:
                break
            pos = _back(buf, end - OVERLAP_BYTES)
        else:
            if not out or span[0] >= out[-1][1]:
                out.append(span)
            pos = span[1] if span[1] > span[0] else _forward(buf, span[0] + 1)
        if out and time.monotonic() > deadline:  # a matching line always shows one snippet
            break
    return out


def _window_end(buf: AnyStr, nl: AnyStr, pos: int) -> int:
    """End of the window from `pos`: after a line break when one is near, else a cut."""
    n = len(buf)
    if n - pos <= WINDOW_BYTES:
        return n
    brk = buf.find(nl, pos + WINDOW_BYTES, pos + MAX_WINDOW_BYTES)
    return brk + 1 if brk >= 0 else _back(buf, pos + MAX_WINDOW_BYTES)


def _back(buf: str | bytes, i: int) -> int:
    """`i`, moved back to the start of a UTF-8 character."""
    if isinstance(buf, bytes):
        while 0 < i < len(buf) and buf[i] & 0xC0 == 0x80:
            i -= 1
    return i


def _forward(buf: str | bytes, i: int) -> int:
    if isinstance(buf, bytes):
        while i < len(buf) and buf[i] & 0xC0 == 0x80:
            i += 1
    return i


def _char_offsets(buf: str | bytes, start: int, positions: list[int]) -> list[int]:
    """Offsets (sorted, in `buf`'s units) as character offsets from `start`, in one pass."""
    if isinstance(buf, str):
        return [p - start for p in positions]
    out, last, chars = [], start, 0
    for p in positions:
        chars += len(buf[last:p].decode("utf-8"))
        last = p
        out.append(chars)
    return out
