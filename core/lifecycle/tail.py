"""Decisions at the prompt's tail: what an output becomes once the agent has answered it.

The call after an output arrives is the cheapest moment to change it. That call's
request differs from the one before only from the output on, and what follows it (the
agent's answer, its new results) is new and uncached anyway, so cutting the output
re-sends almost nothing. Later, every turn after it would be sent again. Each turn is
looked at once, at the first call after the one that showed its outputs (the agent has
read them and answered), and only outputs are touched: the agent's call stays as it
wrote it, each cut output shows a marker naming its recall (`evict.Segment.cuts`).

- **Images** (`images`): an image in a tool output has been seen by the model at the
  call it arrived for. Re-sending it on every later call is what makes screenshot and
  browser sessions dear (a screenshot is about 1,500 tokens on Anthropic, and far more
  where the image travels as text); Anthropic's own computer-use loop keeps only the
  latest few. Its text parts stay; each image becomes a marker.
- **Nothing to cite** (`uncitable`): an output that names no file, path, URL, identifier
  or number and holds no prose ("ok", a progress bar, a blank run, bytes) holds nothing a
  later answer could quote.
- **What the agent recalled** (`recalled`): a `recall_artifact` result is a copy of what
  the archive holds, asked for the answer the agent has now given. Kept, it would be
  re-sent on every later call (as dear as the original it stood for); cut, the call
  above it still names what it returns, and the same call returns it again. In the
  bench, with what an agent recalls kept in its history as it would be live, keeping
  them cost more on four of the six coding sets and the same on the other two (spotter
  0.818x against 0.802x, codex_cli 0.758x against 0.736x). A turn that is only the
  recall (the agent's message holds recall calls and no words: `recall_turns`) leaves
  whole, one line quoting its calls in its place: its call and marker held nothing
  else, and the original's own stub or marker stays where it was.
- **What the agent looked through** (`shrink`): a listing, a search or a plain shell
  output whose lines the agent's own words have named keeps those lines and
  `context_lines` around each; every other run of lines becomes one marker with the
  line range to recall. Not file reads (the agent edits with names it has not repeated
  yet), not writes or edits. Off by default: it saves where outputs are long and the
  agent names what it uses, and costs recalls where it later quotes lines it never named.

A cut is made only where its marker is at most half the output (`evict.worth_cutting`).
Pure: the same messages and rules give the same cuts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._canonical import canonical_json
from ..estimator import extract_refs
from ..ingest.reshown import OutputsBefore
from ..ingest.stabilize import RECALLED_MARKER, is_recall_tool
from ..messages.call_kinds import SHELL_TOOLS, call_kind, norm_tool
from ..messages.turns import Turn, call_name_args, content_text, parsed_args, tool_calls_of
from .evict import Segment
from .stubs import ID_SHAPE, archived, assistant_index, cut_text, output_indices, output_text, worth_cutting

Message = Mapping[str, Any]

__all__ = ["TailRules", "citable", "recall_exchange_stub", "tail_cuts", "tail_segments"]


@dataclass(frozen=True, slots=True)
class TailRules:
    """Which tail decisions run (see the module). `context_lines`: lines kept on each
    side of a line the agent named, when `shrink` runs (two kept most later needs of
    listings and searches in the studies of `../shared/FRONTIER.md`: 4-5% lost, against
    12-15% with none)."""

    images: bool = True
    uncitable: bool = True
    shrink: bool = False
    recalled: bool = True
    recall_turns: bool = True
    context_lines: int = 2

    def to_dict(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "uncitable": self.uncitable,
            "shrink": self.shrink,
            "recalled": self.recalled,
            "recall_turns": self.recall_turns,
            "context_lines": self.context_lines,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TailRules:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in dict(d).items() if k in known})

    @property
    def enabled(self) -> bool:
        return self.images or self.uncitable or self.shrink or self.recalled


# Identifier-like words (snake_case, camelCase, CamelCase), numbers of three digits or
# more, hex ids: with extract_refs' files, paths and URLs, what an answer can quote.
_WORDISH = re.compile(
    r"\b[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+\b|\b[a-z]+[A-Z][A-Za-z0-9]*\b|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b"
    r"|\b\d{3,}\b|\b[0-9a-f]{7,}\b"
)


# A marker TokenPilot wrote into an output when it took it in (a fold, a truncation):
# its line numbers and recall ids are ours, not the output's.
_OWN_MARKER = re.compile(r"^\[(?:…|tokenpilot:)[^\n]*\]$", re.MULTILINE)


_WORD = re.compile(r"[^\W\d_]{3,}")
_PROSE_WORDS = 8  # distinct words a line of prose holds: less is a status, a bar, a blank run


def citable(text: str) -> bool:
    """Whether a text holds anything a later answer could quote: a file, path, URL,
    identifier or number, or prose (a line's worth of distinct words: a transcript's
    names and sentences). TokenPilot's own markers in it are left out."""
    text = _OWN_MARKER.sub("", text)
    if _WORDISH.search(text) or extract_refs(text, identifiers=False):
        return True
    words: set[str] = set()
    for m in _WORD.finditer(text):
        words.add(m.group(0).lower())
        if len(words) >= _PROSE_WORDS:
            return True
    return False


def tail_cuts(
    messages: Sequence[Message],
    turn: Turn,
    rules: TailRules,
    mentioned: Collection[str],
    archive: Callable[[str], str],
    outputs: OutputsBefore | None = None,
) -> dict[int, str]:
    """Index -> what the output shows instead, for the outputs of one turn that a tail
    rule cuts (empty: none). `mentioned`: references the agent's and user's words and
    calls have named so far (`segments.BundleRecord.uses`); `outputs`: the history's
    `OutputsBefore`, shared by the turns of one look."""
    calls = [c for k in range(turn.start, turn.end) for c in tool_calls_of(messages[k])]
    kinds = {c.get("id"): call_kind(*_name_args(c)) for c in calls}
    shells = {c.get("id") for c in calls if _shell(c)}
    recalls = {c.get("id") for c in calls if is_recall_tool(call_name_args(c)[0])}
    out: dict[int, str] = {}
    for k in output_indices(messages, turn):
        m = messages[k]
        content = m.get("content")
        if rules.images and isinstance(content, list) and any(_is_image(p) for p in content):
            whole = output_text(m)
            if 2 * len(_without_images(content, ID_SHAPE)) <= len(whole):  # worth it, as any cut
                out[k] = _without_images(content, archive(whole))
            continue
        text = output_text(m)
        if not isinstance(content, str) or not text.strip():
            continue
        held = output_text(archived(messages, k, k + 1, outputs)[0])  # a fold with the lines it points at
        if rules.uncitable and not citable(held) and worth_cutting(messages, k, _UNCITABLE, outputs):
            out[k] = _marker(held, _UNCITABLE, archive(held))
            continue
        if rules.recalled and m.get("tool_call_id") in recalls and 2 * len(RECALLED_MARKER) <= len(text):
            out[k] = RECALLED_MARKER  # the call above names what it returns, and returns it again
            continue
        kind = kinds.get(m.get("tool_call_id"), "command")
        if rules.shrink and (kind == "search" or (kind == "command" and m.get("tool_call_id") in shells)):
            shrunk = _shrink(text, mentioned, rules.context_lines, archive)
            if shrunk is not None:
                out[k] = shrunk
    return out


_UNCITABLE = "it names no file, path, identifier or number"


def _name_args(call: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    name, raw = call_name_args(call)
    return name, parsed_args(raw)


def _shell(call: Mapping[str, Any]) -> bool:
    return norm_tool(call_name_args(call)[0]) in SHELL_TOOLS


def _is_image(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") in ("image_url", "image", "input_image")


def _without_images(parts: Sequence[Any], aid: str) -> str:
    """The output's text parts as they were, each image part a marker."""
    out: list[str] = []
    for p in parts:
        if _is_image(p):
            out.append(
                "[tokenpilot: image seen at its call, cut at the tail; "
                f'recall_artifact(artifact_id="{aid}") returns this output with it]'
            )
        elif isinstance(p, Mapping) and isinstance(p.get("text"), str):
            out.append(p["text"])
        elif isinstance(p, str):
            out.append(p)
    return "\n".join(out)


def _marker(text: str, why: str, aid: str) -> str:
    return cut_text(text, f"at the tail, {why}", aid)  # one wording for every cut in place


def _shrink(text: str, mentioned: Collection[str], context: int, archive: Callable[[str], str]) -> str | None:
    """The lines the agent named, with `context` lines around each; every other run of
    lines one marker that names its range in the original. None: nothing named, or the
    cut would keep more than half."""
    lines = text.split("\n")
    keep = [False] * len(lines)
    named = False
    for i, line in enumerate(lines):
        refs = extract_refs(line)
        refs |= {r.rstrip("/").rsplit("/", 1)[-1] for r in refs if "/" in r}
        if refs & set(mentioned):
            named = True
            for j in range(max(0, i - context), min(len(lines), i + context + 1)):
                keep[j] = True
    if not named:
        return None
    aid = archive(text)
    out: list[str] = []
    i = 0
    while i < len(lines):
        if keep[i]:
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < len(lines) and not keep[j]:
            j += 1
        out.append(
            f"[tokenpilot: {j - i} line(s) the agent has not named cut, lines {i + 1}-{j}; "
            f'recall_artifact(artifact_id="{aid}", start_line={i + 1}, end_line={j}) returns them]'
        )
        i = j
    shrunk = "\n".join(out)
    return shrunk if 2 * len(shrunk) <= len(text) else None


def tail_segments(
    messages: Sequence[Message],
    turns: Sequence[Turn],
    looked: int,
    rules: TailRules,
    mentioned: Collection[str],
    archive: Callable[[str], str],
    covered: Collection[int],
) -> list[Segment]:
    """One segment cut in place per turn among `turns[looked:-1]` that a tail rule cuts:
    the complete turns the agent has answered since the last look (the last turn is the
    one it has not answered yet), none already in a segment."""
    out: list[Segment] = []
    outputs = OutputsBefore(messages)
    for turn in turns[looked : len(turns) - 1]:
        if not turn.complete or any(k in covered for k in range(turn.start, turn.end)):
            continue
        cuts = tail_cuts(messages, turn, rules, mentioned, archive, outputs)
        if not cuts:
            continue
        start = assistant_index(messages, turn)
        aid = archive(canonical_json(archived(messages, start, turn.end, outputs)))
        if rules.recall_turns and _recall_exchange(messages, turn, cuts):
            stub = {"role": "user", "content": recall_exchange_stub(messages[start])}
            out.append(Segment(start, turn.end, (turn.turn_id,), (), aid, stub, ("tail: recalled",)))
            continue
        offsets = tuple((k - start, text) for k, text in sorted(cuts.items()))
        out.append(
            Segment(start, turn.end, (turn.turn_id,), (), aid, None, ("tail: " + _why(cuts),), offsets)
        )
    return out


def _recall_exchange(messages: Sequence[Message], turn: Turn, cuts: Mapping[int, str]) -> bool:
    """Whether a turn is only a recall exchange the tail cuts whole: the agent's message
    holds recall calls and no words, and every output is a recalled copy cut as read. The
    call and its marker then hold nothing the stub does not say (the original's own stub
    or marker stays where it was)."""
    outs = output_indices(messages, turn)
    if not outs or sorted(cuts) != outs or any(t != RECALLED_MARKER for t in cuts.values()):
        return False
    agent = [k for k in range(turn.start, turn.end) if k not in cuts]
    if len(agent) != 1 or agent[0] != turn.start or messages[turn.start].get("role") != "assistant":
        return False
    calls = tool_calls_of(messages[turn.start])
    words = content_text(messages[turn.start].get("content")).strip()
    return bool(calls) and not words and all(is_recall_tool(call_name_args(c)[0]) for c in calls)


def recall_exchange_stub(agent: Message) -> str:
    """The one line that stands in for a recall exchange the agent has read: the calls
    as it wrote them, which return the same text again."""
    calls = "; ".join(
        f"{name}({', '.join(f'{k}={json.dumps(v, ensure_ascii=False)}' for k, v in args.items())})"
        for name, args in map(_name_args, tool_calls_of(agent))
    )
    return f"[tokenpilot: recalled and read, cut at the tail; the same call returns it again: {calls}]"


def _why(cuts: Mapping[int, str]) -> str:
    text = " ".join(cuts.values())
    if "image seen" in text:
        return "images seen"
    if _UNCITABLE in text:
        return _UNCITABLE
    return "lines the agent has not named"
