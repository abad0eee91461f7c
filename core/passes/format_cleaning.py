"""format_cleaning: remove what a terminal would never show the model anyway.

Tool outputs captured from a pseudo-terminal carry colour codes, cursor movement,
progress bars redrawn hundreds of times with `\\r`, stray zero-width characters and
BOMs, trailing blanks and runs of empty lines. None of it is a word; all of it costs
tokens. Each step below is one setting, on by default, and each is lossless for what a
reader of the terminal would have seen.

Pure and deterministic; never raises; returns its input object when nothing changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from .._canonical import artifact_id_for
from .base import LINE_KINDS, PassContext
from .folding import MARKER_WORTH, fold_marker

__all__ = ["FormatCleaning"]

_BARE_CR = re.compile(r"\r(?!\n)")  # a redraw; a Windows line end (\r\n) is not one

# ECMA-48 escape sequences. OSC strings (titles, hyperlinks) end at BEL or ST and never
# span a line here, so an unterminated one cannot swallow the rest of the output.
_ANSI = re.compile(
    r"""
      \x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?        # OSC: ESC ] ... BEL | ESC \
    | \x1b[PX^_][^\x1b\n]*(?:\x1b\\)?             # DCS / SOS / PM / APC strings
    | \x1b\[[0-?]*[ -/]*[@-~]                     # CSI: ESC [ params intermediates final
    | \x9b[0-?]*[ -/]*[@-~]                       # 8-bit CSI
    | \x1b[ -/]+[0-~]                             # nF: charset selection such as ESC ( B
    | \x1b[0-~]                                   # two-character Fp / Fe / Fs
    """,
    re.VERBOSE,
)
_SURROGATE = re.compile("[\ud800-\udfff]")
# Backspace overstrike as in `man` output: "N\bN" (bold) and "_\bN" (underline) show as "N".
_OVERSTRIKE = re.compile(r"[^\n\x08]\x08")
# Zero-width space, word joiner, BOM / ZWNBSP, soft hyphen, Mongolian vowel separator.
# ZWJ / ZWNJ (U+200C/D) are kept: they change how emoji and Persian or Indic words render.
_INVISIBLE = "\u200b\u2060\ufeff\u00ad\u180e"
# C0 and C1 controls except \t \n (\r is resolved separately; ESC only when ANSI is stripped).
_CONTROL_KEEP_ESC = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f{_INVISIBLE}]")
_CONTROL = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_INVISIBLE}]")
_TRAILING_WS = re.compile(r"[ \t]+$", re.MULTILINE)
_BLANK_RUN = re.compile(r"\n(?:[ \t]*\n){3,}")  # a line end followed by 3+ blank lines
_FENCE_OPEN = re.compile(r"\A\s*(?P<fence>`{3,}|~{3,})[ \t]*[\w+#.-]*[ \t]*\n")
_FENCE_CLOSE = re.compile(r"\n[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*\s*\Z")


def _fix_surrogates(text: str) -> str:
    # Join surrogate pairs that arrived as two code points; replace lone ones by U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _resolve_carriage_returns(text: str) -> str:
    if "\r" not in text:
        return text
    text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\r" in line:
            # What the terminal shows last; a trailing "\r" (before the newline) erases nothing.
            segments = [s for s in line.split("\r") if s]
            lines[i] = segments[-1] if segments else ""
    return "\n".join(lines)


def _unwrap_fence(text: str) -> str:
    opening = _FENCE_OPEN.match(text)
    if not opening:
        return text
    closing = _FENCE_CLOSE.search(text, opening.end() - 1)
    if not closing or closing.start() < opening.end() - 1:
        return text
    fence = opening["fence"]
    if closing["fence"][0] != fence[0] or len(closing["fence"]) < len(fence):
        return text
    inner = text[opening.end() : closing.start()]
    # A second fence of the same kind inside means several blocks (or prose between): keep all.
    inner_fence = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}", re.MULTILINE)
    if inner_fence.search(inner):
        return text
    return inner


@dataclass(frozen=True, slots=True)
class FormatCleaning:
    """Strip terminal noise (escapes, redraws, invisible characters, blank runs) from an output."""

    name: ClassVar[str] = "format_cleaning"
    accepts: ClassVar[frozenset[str]] = LINE_KINDS

    fix_surrogates: bool = True
    """Join split surrogate pairs and replace lone surrogates (from `surrogateescape` decoding) by
    U+FFFD: they cannot be encoded as UTF-8, so the request carrying them would fail later."""
    strip_ansi: bool = True
    """Remove ANSI / VT100 escape sequences: colours, cursor moves, OSC titles and hyperlinks."""
    fold_redraws: bool = True
    """A line redrawn with `\\r` (a progress bar) shows its last state; the redraws before
    it become one marker, in their place, naming their lines of the original (each `\\r`
    segment is a line to `recall_artifact`). Only on the original text (its id is the
    context's artifact id), so the numbers are the original's; only where the redraws are
    `MARKER_WORTH` times as long as the marker."""
    resolve_carriage_returns: bool = False
    """Keep only the last non-empty `\\r`-separated segment of a line (progress-bar redraws);
    `\\r\\n` line ends become `\\n`. Off by default: `recall_artifact` counts each `\\r`
    segment as a line, and this drops the redrawn ones with no marker where they were (the
    end-to-end contract, tests/contract.py); log folding folds long runs of alike redraws
    with one."""
    strip_invisible: bool = True
    """Remove zero-width spaces, BOMs, soft hyphens and control characters other than tab and
    newline; backspace overstrike (`man` bold/underline) keeps the visible letter."""
    unwrap_fences: bool = True
    """Unwrap one code fence around the whole output (```lang ... ```), language tag included."""
    strip_trailing_whitespace: bool = True
    """Remove spaces and tabs at line ends."""
    collapse_blank_lines: bool = True
    """Turn runs of 3+ blank lines into one blank line (1 or 2 stay: PEP 8's two blank lines
    between definitions are code layout) and drop blank lines at the start and end (a final
    newline stays)."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The cleaned text, or the input object itself when nothing changed or anything failed."""
        try:
            if not isinstance(text, str) or not text:
                return text
            out = text
            if self.fold_redraws and _BARE_CR.search(out) and ctx.artifact_id == artifact_id_for(text):
                out = _fold_redraws(out, ctx.artifact_id)
            if self.fix_surrogates and _SURROGATE.search(out):
                out = _fix_surrogates(out)
            if self.strip_ansi and ("\x1b" in out or "\x9b" in out):
                out = _ANSI.sub("", out)
            if self.resolve_carriage_returns:
                out = _resolve_carriage_returns(out)
            if self.strip_invisible:
                if "\x08" in out:
                    out = _OVERSTRIKE.sub("", out)
                out = (_CONTROL if self.strip_ansi else _CONTROL_KEEP_ESC).sub("", out)
            if self.unwrap_fences and ("```" in out or "~~~" in out):
                out = _unwrap_fence(out)
            if self.strip_trailing_whitespace:
                out = _TRAILING_WS.sub("", out)
            if self.collapse_blank_lines:
                out = _BLANK_RUN.sub("\n\n", out)
                out = _strip_outer_blank_lines(out)
            return text if out == text else out
        except Exception:
            return text


def _fold_redraws(text: str, aid: str) -> str:
    """Each run of `\\r`-ended lines (a line redrawn in place) up to its last non-blank
    state: the earlier states become one fold marker naming their original lines."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    changed = False
    while i < len(lines):
        if not _redrawn(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < len(lines) and _redrawn(lines[j]):
            j += 1
        end = min(j, len(lines) - 1)  # the group: lines i..end, the last one ends the line
        last = max((k for k in range(i, end + 1) if lines[k].strip()), default=end)
        if last > i:
            marker = fold_marker(aid, i + 1, last, f"{last - i} progress redraws of the next line")
            if sum(len(ln) for ln in lines[i:last]) >= MARKER_WORTH * len(marker):
                out.append(marker + "\n")
                out.extend(lines[last : end + 1])
                i = end + 1
                changed = True
                continue
        out.extend(lines[i : end + 1])
        i = end + 1
    return "".join(out) if changed else text


def _redrawn(line: str) -> bool:
    """Does this line (as `splitlines` keeps its end) end in a bare `\\r`: drawn over next?"""
    return line.endswith("\r") and not line.endswith("\r\n")


def _strip_outer_blank_lines(text: str) -> str:
    # Blank lines before the first and after the last non-blank line; one final newline stays.
    start = 0
    while True:
        nl = text.find("\n", start)
        if nl < 0 or text[start:nl].strip(" \t"):
            break
        start = nl + 1
    text = text[start:]
    stripped = text.rstrip(" \t\n")
    if stripped != text:
        nl = text.find("\n", len(stripped))  # the end of the last non-blank line
        if nl >= 0:
            text = text[: nl + 1]
    return text
