"""Lines a tool output shows again: runs the context already holds, verbatim, in an
earlier output (a file read again, a window scrolled back, a test rerun).

Agents re-read what they have read: on the shared recordings about a sixth of the
tool-output text of mini-swe-agent, and more of SWE-agent's, repeats a run of eight or
more lines of an earlier output of the same session. The later copy adds nothing the
model cannot see above it, and costs its tokens on every later call. At ingestion such
a run becomes one marker line that names the earlier output and the lines of it that
hold the run. Nothing is stored: the lines are in the context. When that earlier output
is evicted later while the fold stays, the fold is rendered with those lines
(`reshown_moves`).

`ShownLines` is the state: the lines of the outputs the context shows, in message
order, derived only from the frozen history (so every process that ingests the same
history and eviction plan builds the same index, I2). `fold_reshown` is the transform:
pure, given the text and the index. A marker names the latest output of its label only,
so "the output of `cat a.py`" is never ambiguous.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages.observations import OBSERVATION_TOOL, is_observation, text_call
from ..messages.turns import call_name_args, content_text, parsed_args, tool_calls_of
from ..passes.folding import MARKER_WORTH, marker_line, original_lines

__all__ = [
    "OutputsBefore",
    "MIN_RUN_LINES",
    "RESHOWN_NOTE",
    "ShownLines",
    "expand_hidden",
    "expand_in_context",
    "expand_reshown",
    "fold_reshown",
    "output_label",
    "reshown_marker",
    "shown_label",
]

MIN_RUN_LINES = 8  # a run shorter than this is a coincidence more often than a re-read
RESHOWN_NOTE = "already shown above, unchanged,"
_CANDIDATES = 8  # earlier places of a line tried as a run's start: the latest ones
_MAX_LINES = 50_000  # lines indexed per session (a few MB); older outputs drop out first
_MARKER = re.compile(
    r"\[… (\d+) lines " + re.escape(RESHOWN_NOTE) + r" as lines (\d+)–(\d+) of the output of `(.*)`\]"
)
_LABEL_KEYS = ("file_path", "path", "command", "cmd", "url", "pattern")


def output_label(tool: str, arguments: Mapping[str, Any]) -> str:
    """How a marker names an earlier output: its tool and the path or command it was
    given (whitespace collapsed, at most 80 chars)."""
    for key in _LABEL_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            value = " ".join(value.split())
            return f"{tool} {value[:80] + '…' if len(value) > 80 else value}"
    return tool


def shown_label(msg: Any, previous: Any, call: tuple[str, Mapping[str, Any]] | None) -> str | None:
    """The label an output is indexed and named under: a tool result's by the call it
    answers (`call`: its tool name and arguments), a text-action agent's observation by
    the action in `previous`; None for any other message (only outputs are indexed)."""
    if not isinstance(msg, Mapping) or not isinstance(msg.get("content"), str):
        return None
    if msg.get("role") == "tool":
        return output_label(*call) if call else str(msg.get("name") or "a tool")
    if msg.get("role") == "user" and isinstance(previous, Mapping) and is_observation(msg, previous):
        action = text_call(content_text(previous.get("content")))
        return output_label(*action) if action else output_label(OBSERVATION_TOOL, {})
    return None


@dataclass(slots=True)
class _Block:
    label: str
    lines: list[str]
    entry: int  # its place in the session's entries (an evicted one is not pointed at)


@dataclass(slots=True)
class ShownLines:
    """Where each line of the session's earlier outputs sits: line -> [(block, position)].

    Bounded: past `_MAX_LINES` lines the oldest blocks are dropped (they cannot be
    pointed at any more; a fold never points at a block it does not hold).
    """

    blocks: dict[int, _Block] = field(default_factory=dict)
    where: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    hidden: frozenset[int] = frozenset()  # entries the eviction plan hides now
    latest: dict[str, int] = field(default_factory=dict)  # label -> its latest block: the one a marker names
    _next: int = 0
    _lines: int = 0

    def add(self, text: str, label: str, entry: int) -> None:
        lines = original_lines(text)
        b = self._next
        self._next += 1
        self.blocks[b] = _Block(label, lines, entry)
        self.latest[label] = b
        for pos, line in enumerate(lines):
            if line.strip():
                self.where.setdefault(line, []).append((b, pos))
        self._lines += len(lines)
        while self._lines > _MAX_LINES and len(self.blocks) > 1:
            self._drop(min(self.blocks))

    def _drop(self, b: int) -> None:
        block = self.blocks.pop(b)
        if self.latest.get(block.label) == b:
            del self.latest[block.label]
        self._lines -= len(block.lines)
        for line in set(block.lines):  # each list filtered once: linear in what is dropped
            places = self.where.get(line)
            if places is None:
                continue
            kept = [p for p in places if p[0] != b]
            if kept:
                self.where[line] = kept
            else:
                del self.where[line]

    def longest_run(self, lines: list[str], i: int) -> tuple[int, int, _Block | None]:
        """(length, start in the block, block) of the longest run of `lines[i:]` that an
        earlier, still shown block holds verbatim."""
        best, best_pos, best_block = 0, 0, None
        for b, pos in reversed(self.where.get(lines[i], ())[-_CANDIDATES:]):
            block = self.blocks.get(b)
            if block is None or block.entry in self.hidden or self.latest.get(block.label) != b:
                continue  # gone, evicted, or not what its label names now (a later run of it)
            other = block.lines
            n = 0
            while i + n < len(lines) and pos + n < len(other) and lines[i + n] == other[pos + n]:
                n += 1
            if n > best:
                best, best_pos, best_block = n, pos, block
        return best, best_pos, best_block


def reshown_marker(n: int, label: str, first: int) -> str:
    """One line standing for `n` lines that are lines `first`.. of the earlier output of `label`."""
    return f"[… {n} lines {RESHOWN_NOTE} as lines {first}–{first + n - 1} of the output of `{label}`]"


def fold_reshown(text: str, shown: ShownLines) -> str | None:
    """`text` (an output as it would be frozen, reduced or not) with every run of
    `MIN_RUN_LINES`+ lines that an earlier output still shown holds verbatim replaced by
    one marker line naming that output and its lines; None when no run pays off. Nothing
    is stored: the lines are in the context, in the output named (and when that output is
    evicted later, in the lines an eviction moves into the fold, `reshown_moves`)."""
    if not shown.blocks:
        return None
    lines = original_lines(text)
    out: list[str] = []
    pos = 0
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        n, at, block = shown.longest_run(lines, i)
        if n < MIN_RUN_LINES or block is None:
            i += 1
            continue
        marker = reshown_marker(n, block.label, at + 1)
        if sum(len(ln) for ln in lines[i : i + n]) >= MARKER_WORTH * len(marker):
            out.extend(lines[pos:i])
            out.append(marker_line(out, marker))
            pos = i + n
        i += n
    if pos == 0:
        return None
    out.extend(lines[pos:])
    return "".join(out)


def expand_reshown(text: str, earlier: Sequence[tuple[str, str]]) -> str:
    """`text` with each marker line replaced by the lines it names: the lines of the latest
    of `earlier` ((label, text as shown), in message order) with that label. What the
    output said before the fold; `ValueError` when a marker names lines nothing holds."""
    return _expand(text, [(label, t, k) for k, (label, t) in enumerate(earlier)], None)


def _expand(text: str, earlier: Sequence[tuple[str, str, int]], only: Collection[int] | None) -> str:
    """`expand_reshown` over (label, text, place) outputs; with `only`, a marker is
    expanded only when the output it names is at one of those places."""
    out: list[str] = []
    for line in original_lines(text):
        m = _MARKER.fullmatch(line.rstrip("\n"))
        if m is None:
            out.append(line)
            continue
        n, first, last, label = int(m[1]), int(m[2]), int(m[3]), m[4]
        source = next(((t, k) for lab, t, k in reversed(earlier) if lab == label), None)
        if only is not None and (source is None or source[1] not in only):
            out.append(line)
            continue
        lines = original_lines(source[0])[first - 1 : last] if source is not None else []
        if len(lines) != n or last - first + 1 != n:
            raise ValueError(
                f"a marker names lines {first}–{last} of `{label}`, which no earlier output holds"
            )
        out.extend(lines)
    return "".join(out)


def _outputs_before(messages: Sequence[Any], index: int) -> list[tuple[str, str, int]]:
    """(label, text, place) of each output before `messages[index]`, in order."""
    calls: dict[Any, tuple[str, Mapping[str, Any]]] = {}
    shown: list[tuple[str, str, int]] = []
    for k, m in enumerate(messages[:index]):
        if not isinstance(m, Mapping):  # a malformed message passed through: no output, no call
            continue
        for c in tool_calls_of(m):
            name, raw = call_name_args(c)
            if isinstance(c.get("id"), str):  # a malformed id (passed through) names no call
                calls[c["id"]] = (name, parsed_args(raw))
        tid = m.get("tool_call_id")
        label = shown_label(
            m, messages[k - 1] if k else None, calls.get(tid) if isinstance(tid, str) else None
        )
        if label is not None:
            shown.append((label, m["content"], k))
    return shown


class OutputsBefore:
    """The outputs before each place of one history (`_outputs_before`), from one walk of
    it, made at the first question: a plan expands many folds of the same history, and a
    walk per fold made a batch cost the history's length times its folds."""

    __slots__ = ("_messages", "_places", "_shown")

    def __init__(self, messages: Sequence[Any]) -> None:
        self._messages = messages
        self._shown: list[tuple[str, str, int]] | None = None
        self._places: list[int] = []

    def before(self, index: int) -> list[tuple[str, str, int]]:
        """`_outputs_before(messages, index)`: the labels a walk to `index` gives are the
        first ones of a walk to the end (each is made from what came before it)."""
        if self._shown is None:
            self._shown = _outputs_before(self._messages, len(self._messages))
            self._places = [place for _, _, place in self._shown]
        return self._shown[: bisect_left(self._places, index)]


def expand_in_context(
    messages: Sequence[Mapping[str, Any]], index: int, outputs: OutputsBefore | None = None
) -> str:
    """The text of `messages[index]` (a tool output or an observation, as frozen) with
    each marker replaced by the lines it names in the outputs before it: what the output
    said before its fold. For an eviction's archive, so that a recall of an evicted
    output never depends on another evicted one. `outputs`: this history's, when the
    caller expands several folds of it."""
    earlier = outputs.before(index) if outputs is not None else _outputs_before(messages, index)
    return _expand(str(messages[index].get("content")), earlier, None)


def expand_hidden(messages: Sequence[Any], hidden: Collection[int], start: int = 0) -> dict[int, str]:
    """For each output of `messages` (the frozen history) that stays in view while a
    marker of it names an output at one of the `hidden` places (evicted), its text with
    those markers replaced by the lines they name (the others stay): an eviction moves
    the lines a later output points at into that output, so the model still sees them.
    Computed from the frozen history and the plan only, so every process renders alike.
    `start`: only outputs from that place on (the ones before were checked already)."""
    out: dict[int, str] = {}
    if not hidden:
        return out
    earlier: list[tuple[str, str, int]] | None = None
    for k in range(start, len(messages)):
        m = messages[k]
        if k in hidden or not isinstance(m, Mapping):
            continue
        content = m.get("content")
        if not isinstance(content, str) or RESHOWN_NOTE not in content:
            continue
        if earlier is None:
            earlier = _outputs_before(messages, len(messages))
        before = [e for e in earlier if e[2] < k]
        try:
            text = _expand(content, before, hidden)
        except ValueError:  # a marker naming nothing (a caller's own text): left as it is
            continue
        if text != content:
            out[k] = text
    return out
