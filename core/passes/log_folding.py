"""log_folding: fold runs of alike lines in logs and test runs, keep what went wrong.

Build logs, installs and test runs repeat one line shape hundreds of times
(`Compiling foo v0.1.2`, `test_x ... ok`, `Collecting bar==1.0`). Two lines are alike
when they are equal after masking what varies between repetitions: numbers, hex ids,
timestamps. A run of at least `min_run` alike lines keeps its first `keep_head` and
last `keep_tail` lines verbatim; the middle becomes one marker with the count and the
original line range (`recall_artifact(start_line, end_line)` returns it byte-exact).

A block of `min_block` or more lines that repeats an earlier block of the same output
byte for byte becomes a pointer to the first copy, which stays whole and in view. Errors
and tracebacks may be part of such a block (the same traceback printed for every failing
test, the same compile error for every caller): their first copy is shown in full and
the pointer says where each repeat was, so nothing about them is hidden that the view
does not hold verbatim. Only the closing summary is never folded this way.

Never folded within a run: errors, failures, warnings and assertions (any line naming one), whole
tracebacks (from `Traceback (most recent call last)` or a `File "...", line N` frame to
the exception line), and the last `summary_lines` lines (where the verdict is). Code
reads (`cat x.py`, `sed -n 1,80p x.py`) are left exact: the agent edits what it read.

Pure and deterministic; never raises; returns its input object when it does not apply.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass
from typing import ClassVar

from .base import CODE, LINE_KINDS, PassContext
from .folding import fold_runs, is_code_read, original_lines

__all__ = ["LogFolding", "alike_key", "alike_keys"]

_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
)
_HEX = re.compile(r"\b(?:0x)?[0-9a-fA-F]{6,}\b")
# `_HEX` written to start with a character class, which lets `re` skip ahead to the next
# hex digit instead of trying the pattern at every position (2x faster on a log); the same
# matches: the lookbehind after the first digit is the leading `\b` (a hex digit is a word
# character), and `(?<=0)x` is the optional `0x` (tests/test_speed_log_folding.py).
_HEX_FAST = re.compile(r"[0-9a-fA-F](?<!\w[0-9a-fA-F])(?:(?<=0)x[0-9a-fA-F]{6,}|[0-9a-fA-F]{5,})\b")
# The same on ASCII text, where `\w` and `\b` mean what they mean in Unicode mode; `re`
# checks word characters faster in ASCII mode (~15% on a log).
_HEX_FAST_ASCII = re.compile(_HEX_FAST.pattern, re.ASCII)
_DIGITS = re.compile(r"\d+")
# A line that reports something wrong: kept whole, wherever it is.
_PROBLEM = re.compile(
    r"error|fail|exception|traceback|warn|assert|panic|fatal|denied|refused|timed? ?out|"
    r"not found|cannot|can't|unable|invalid|missing|abort|segfault|killed|✗|✘|❌",
    re.IGNORECASE,
)
_TRACE_START = re.compile(r"^\s*(?:Traceback \(most recent call last\)|File \"[^\"]+\", line \d+)")
_TRACE_FRAME = re.compile(r"^(?:\s+\S|\s*File \"|\s*\^+\s*$|\s*\.\.\.|During handling|The above exception)")


# The words `_PROBLEM` stands for, lower-case, for a fast scan of ASCII text (same lines).
_PROBLEM_WORDS = (
    "error", "fail", "exception", "traceback", "warn", "assert", "panic", "fatal", "denied",
    "refused", "timed out", "timedout", "timeout", "time out", "not found", "cannot", "can't",
    "unable", "invalid", "missing", "abort", "segfault", "killed",
)  # fmt: skip
_CLOCK = re.compile(r":\d\d")  # every timestamp `_TIMESTAMP` masks has one; a literal start scans fast


def alike_key(line: str) -> str:
    """The line with what varies between repetitions masked (timestamps, hex ids, numbers)."""
    s = line.rstrip()
    s = _TIMESTAMP.sub("T", s)
    s = _HEX.sub("H", s)
    return _DIGITS.sub("0", s)


def alike_keys(text: str) -> list[str]:
    """`alike_key` of every line of `text` (`str.splitlines`), masked in one pass over the
    whole text: none of the masks can match a line break, so each line comes out as
    `alike_key` makes it, at a fraction of the per-line cost."""
    if _CLOCK.search(text):
        text = _TIMESTAMP.sub("T", text)
    masked = _masked_digits((_HEX_FAST_ASCII if text.isascii() else _HEX_FAST).sub("H", text))
    return [ln.rstrip() for ln in masked.splitlines()]


# On ASCII text `\d` is [0-9]: every digit becomes "0", then each run of zeros one "0",
# which is each run of digits (no other character becomes "0"); 3x faster than the pattern.
_TO_ZERO = str.maketrans("123456789", "000000000")
_ZEROS = re.compile("00+")


def _masked_digits(text: str) -> str:
    """`_DIGITS.sub("0", text)`: each run of digits as one "0"."""
    if text.isascii():
        return _ZEROS.sub("0", text.translate(_TO_ZERO))
    return _DIGITS.sub("0", text)


def _problem_lines(text: str, lines: list[str]) -> list[bool]:
    """Which lines `_PROBLEM` finds something in. ASCII text (most tool output) is scanned
    word by word with `str.find` on its lower-case copy, which finds the same lines as the
    case-blind pattern does there and is an order of magnitude faster; other text line by line."""
    if not text.isascii():
        return [bool(_PROBLEM.search(ln)) for ln in lines]
    starts = list(itertools.accumulate((len(ln) for ln in lines), initial=0))
    keep = [False] * len(lines)
    low = text.lower()
    for word in _PROBLEM_WORDS:
        at = low.find(word)
        while at >= 0:
            i = bisect.bisect_right(starts, at) - 1
            keep[i] = True
            at = low.find(word, starts[i + 1])  # the rest of this line is decided
    return keep


def _problem_lines_by_key(text: str, lines: list[str], keys: list[str]) -> list[bool]:
    """`_problem_lines(text, lines)`, scanning each distinct alike key once. No mask can
    touch a problem word (they hold no digit, no "h", never a whole hex word, and a
    timestamp holds no letter a word could share), so a line whose key names no problem
    names none itself; only the lines whose key names one are scanned again, as they are."""
    uniq = list(dict.fromkeys(keys))
    if 2 * len(uniq) > len(lines):  # mostly distinct lines: scanning keys saves nothing
        return _problem_lines(text, lines)
    key_lines = [k + "\n" for k in uniq]
    named = {k for k, hit in zip(uniq, _problem_lines("".join(key_lines), key_lines)) if hit}
    keep = [False] * len(lines)
    suspects = [i for i, k in enumerate(keys) if k in named]
    if suspects:
        raw = [lines[i] for i in suspects]
        for i, hit in zip(suspects, _problem_lines("".join(raw), raw)):
            keep[i] = hit
    return keep


def _protected(text: str, lines: list[str], summary_lines: int, keys: list[str]) -> list[bool]:
    """Which lines must stay verbatim: problems, tracebacks, the closing summary. `keys`:
    the lines' alike keys (the problem scan reads each distinct one once)."""
    keep = _problem_lines_by_key(text, lines, keys)
    # a traceback starts at one of its two markers: without either, no line starts one
    i = 0 if "Traceback (most recent call last)" in text or 'File "' in text else len(lines)
    while i < len(lines):
        if _TRACE_START.match(lines[i]):
            j = i + 1
            while j < len(lines) and (_TRACE_FRAME.match(lines[j]) or _TRACE_START.match(lines[j])):
                j += 1
            end = min(j + 1, len(lines))  # the exception line that closes it
            for k in range(i, end):
                keep[k] = True
            i = end
        else:
            i += 1
    for k in range(max(0, len(lines) - summary_lines), len(lines)):
        keep[k] = True
    return keep


@dataclass(frozen=True, slots=True)
class LogFolding:
    """Fold runs of alike lines into a count and a recall range; errors and summaries stay whole."""

    name: ClassVar[str] = "log_folding"
    accepts: ClassVar[frozenset[str]] = LINE_KINDS - {CODE}  # a file's text stays exact

    min_run: int = 6
    """Fewest alike lines in a row worth folding (shorter runs cost little and read better whole)."""
    keep_head: int = 1
    """Lines kept verbatim at the start of a run: what the repeated line looks like."""
    keep_tail: int = 1
    """Lines kept verbatim at the end of a run: where it got to (the last file, the last count)."""
    summary_lines: int = 5
    """The last lines of the output, never folded: exit status, totals, the verdict."""
    min_block: int = 3
    """A block of at least this many lines printed again verbatim (the same warning, the
    same stack trace) is folded into a pointer to its first copy, which stays whole; 0 disables."""
    max_block: int = 400
    """Longest block compared at once (bounds the work on hostile input)."""
    min_line_chars: int = 2
    """Blank or near-blank lines never start a run on their own (they separate blocks)."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The text with its long alike runs folded, or the input object when none is."""
        try:
            if not isinstance(text, str) or not ctx.artifact_id or is_code_read(ctx.tool_name, ctx.arguments):
                return text
            return self._fold(text, ctx.artifact_id)
        except Exception:
            return text

    def _fold(self, text: str, aid: str) -> str:
        lines = original_lines(text)
        if len(lines) < min(self.min_run, max(self.min_block, 2)):
            return text
        keys = alike_keys(text)
        keep = _protected(text, lines, self.summary_lines, keys)
        summary = [False] * max(0, len(lines) - self.summary_lines)
        summary += [True] * (len(lines) - len(summary))
        cuts = self._repeated_blocks(lines, summary) if self.min_block else []
        taken = [False] * len(lines)
        for start, end, _ in cuts:
            for k in range(start, end):
                taken[k] = True
        head, tail = max(0, self.keep_head), max(0, self.keep_tail)
        i = 0
        while i < len(lines):
            j = i + 1
            if not keep[i] and not taken[i] and len(keys[i].strip()) >= self.min_line_chars:
                while j < len(lines) and keys[j] == keys[i] and not keep[j] and not taken[j]:
                    j += 1
            if j - i >= max(self.min_run, head + tail + 2):
                start, end = i + head, j - tail
                cuts.append((start, end, f"{end - start} more lines like this"))
            i = j
        out = fold_runs(lines, sorted(cuts), aid)
        return text if out is None else out

    def _repeated_blocks(self, lines: list[str], keep: list[bool]) -> list[tuple[int, int, str]]:
        """Blocks of at least `min_block` lines equal, byte for byte, to an earlier block of
        this output (the same progress, listing or traceback printed again): the first copy
        stays whole. A block never takes in a line of `keep` (the closing summary)."""
        exact = [ln.rstrip() for ln in lines]
        nonblank = [ln for ln in exact if len(ln.strip()) >= self.min_line_chars]
        if len(set(nonblank)) == len(nonblank):
            return []  # no line is printed twice, so no block is
        seen: dict[str, list[int]] = {}
        cuts: list[tuple[int, int, str]] = []
        i = 0
        while i < len(lines):
            best_len, best_j = 0, -1
            if len(exact[i].strip()) >= self.min_line_chars:
                for j in seen.get(exact[i], [])[:8]:  # the earliest copies (shown whole); few: linear time
                    n = 0
                    while (
                        n < self.max_block
                        and i + n < len(lines)
                        and j + n < i
                        and exact[j + n] == exact[i + n]
                        and not keep[i + n]
                    ):
                        n += 1
                    if n > best_len:
                        best_len, best_j = n, j
            while best_len and not exact[i + best_len - 1].strip():
                best_len -= 1  # a block does not end on a blank line
            if (
                best_len >= self.min_block
                and sum(1 for k in range(i, i + best_len) if exact[k].strip()) >= self.min_block
            ):
                what = f"{best_len} lines identical to lines {best_j + 1}–{best_j + best_len}"
                cuts.append((i, i + best_len, what))
                for k in range(i, i + best_len):
                    seen.setdefault(exact[k], []).append(k)
                i += best_len
                continue
            seen.setdefault(exact[i], []).append(i)
            i += 1
        return cuts
