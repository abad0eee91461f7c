"""What stands in for what goes: the stub that replaces evicted messages, the marker an
output cut in place shows, the few words that say what a bundle was, and what a recall
of either returns (`archived`). Deterministic text: the same messages give the same bytes."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._canonical import canonical_json
from ..ingest.reshown import RESHOWN_NOTE, OutputsBefore, expand_in_context
from ..messages.observations import OBSERVATION_TOOL, is_observation, text_call
from ..messages.turns import Turn, call_name_args, content_text, parsed_args, tool_calls_of

Message = Mapping[str, Any]
_DESCRIBE_KEYS = ("file_path", "path", "command", "cmd", "pattern", "url", "query", "filepath", "file")


def _clean(text: str, limit: int) -> str:
    text = " ".join(text.replace('"', "'").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def stub_text(title: str, outcome: str, start: int, end: int, artifact_id: str) -> str:
    """The one line the model sees instead of an evicted segment."""
    return (
        f'[tokenpilot: evicted task "{_clean(title, 80)}" ({_clean(outcome, 100)}), '
        f'messages {start}..{end - 1}; recall_artifact(artifact_id="{artifact_id}") returns them]'
    )


_LEADING_CD = re.compile(r"^\s*cd\s+\S+\s*&&\s*")


_PATH_KEYS = frozenset({"file_path", "path", "filepath", "file"})


def describe_call(call: Mapping[str, Any]) -> str:
    """`Read core/x.py`, `Bash "pytest -q"`: what one tool call asked for, in a few words
    (a command without the `cd <dir> &&` every one of them starts with; a file by its last
    three path parts, which name it in the session as well as the whole path does)."""
    name, raw = call_name_args(call)
    args = parsed_args(raw)
    key = next((k for k in _DESCRIBE_KEYS if isinstance(args.get(k), str) and args[k].strip()), None)
    if key is None:
        return name
    what = args[key].strip()
    if key in _PATH_KEYS and what.count("/") > 3:
        what = "…/" + "/".join(what.rstrip("/").rsplit("/", 3)[1:])
    return f"{name} {_clean(_LEADING_CD.sub('', what, count=1), 60)}"


def describe_turn(messages: Sequence[Message], turn: Turn) -> str:
    """What a bundle asked for, in a few words: each of its calls (`describe_call`)."""
    parts = [describe_call(c) for k in range(turn.start, turn.end) for c in tool_calls_of(messages[k])]
    if not parts:  # a text-action agent: the command is in the assistant's words
        k = assistant_index(messages, turn)
        action = text_call(content_text(messages[k].get("content"))) if k < turn.end else None
        if action:
            name, args = action
            call = {"function": {"name": name, "arguments": canonical_json(args)}}
            fenced = name == OBSERVATION_TOOL and isinstance(args.get("command"), str)
            parts.append(f"`{_clean(args['command'], 60)}`" if fenced else describe_call(call))
    return ", ".join(parts) or "turn"


def segment_stub_text(
    items: Sequence[tuple[str, str]], start: int, end: int, artifact_id: str, outputs: int | None = None
) -> str:
    """The one line that stands in for tool bundles a segment rule retired: each rule said
    once, with the bundles it retired (`items`: (reason, what the bundle was)) in the
    order they stood. A stub is re-sent on every later call: it says why in a few words,
    not once per bundle."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for reason, what in items:
        groups.setdefault(_rule_label(reason), []).append((reason, what))
    parts = []
    for label, group in groups.items():
        if label == _STALE:
            turns = [int(m.group(1)) for reason, _ in group if (m := _STALE_TURNS.search(reason))]
            label = f"not named for {_round_down(min(turns))}+ turns" if turns else "not named for a while"
        parts.append((label, "; ".join(what for _, what in group)))
    n = outputs or len(items)
    if len(parts) == 1:  # one rule: said in the header
        label, shown = parts[0]
        label = "from " + label if label.startswith("before the last") else label
        head = f"evicted {n} tool result(s) {label}: {shown}"
    else:
        head = f"evicted {n} tool result(s) no longer needed. " + ". ".join(f"{a}: {b}" for a, b in parts)
    return (
        f"[tokenpilot: {head}. "
        f'Messages {start}..{end - 1}; recall_artifact(artifact_id="{artifact_id}") returns them all]'
    )


def _round_down(turns: int) -> int:
    """`turns` down to 1, 2 or 5 times a power of ten. The stub of a stale bundle the gate
    defers is made again at every batch while the bundle waits; a count that only steps
    on these few values keeps its text (and its token count, which the gate reads) the
    same from batch to batch. The "+" keeps it true."""
    if turns < 1:
        return turns
    scale = 10 ** (len(str(turns)) - 1)
    lead = turns // scale
    return (5 if lead >= 5 else 2 if lead >= 2 else 1) * scale


_STALE = "stale"
_STALE_TURNS = re.compile(r"not used for (\d+) turns")
_RULE_LABELS = {
    "superseded read": "read again or rewritten later",
    "superseded write": "written or read whole again later",
    "superseded command": "the same call ran again later",
    "consumed listing": "hits opened later or never named again",
    "stale output": _STALE,
}


def _rule_label(reason: str) -> str:
    """A few words for a rule's reason (the window's own: 'before the last 5 calls')."""
    if reason.startswith("window: "):
        return reason[len("window: ") :]
    return next((label for rule, label in _RULE_LABELS.items() if reason.startswith(rule)), reason)


def archived(
    messages: Sequence[Message], start: int, end: int, outputs: OutputsBefore | None = None
) -> list[dict[str, Any]]:
    """`messages[start:end]` as an eviction archives them: an output folded against an
    earlier one (`reshown`) holds its lines again, so its recall stands on its own.
    `outputs`: the history's `OutputsBefore`, shared by the caller's folds."""
    out = []
    for k in range(start, end):
        m = dict(messages[k])
        if isinstance(m.get("content"), str) and RESHOWN_NOTE in m["content"]:
            try:
                m["content"] = expand_in_context(messages, k, outputs)
            except ValueError:  # a marker whose lines are gone: archived as it was shown
                pass
        out.append(m)
    return out


def output_indices(messages: Sequence[Message], turn: Turn) -> list[int]:
    """The tool outputs of a turn (text-action observations too): what a cut takes."""
    return [
        k
        for k in range(turn.start, turn.end)
        if messages[k].get("role") == "tool"
        or (k > turn.start and is_observation(messages[k], messages[k - 1]))
    ]


def output_text(message: Message) -> str:
    """An output as its recall returns it: its text, or the JSON of its parts."""
    content = message.get("content")
    return content if isinstance(content, str) else canonical_json(content)


ID_SHAPE = "art_" + "0" * 24  # an artifact id's length, to size a marker before naming it


def worth_cutting(
    messages: Sequence[Message], k: int, why: str, outputs: OutputsBefore | None = None
) -> bool:
    """An output is cut in place only where its marker is at most half of what it shows (a
    fold that points at lines shown earlier is as short as it shows): a cut that saves
    less is not worth the recall it may cost."""
    held = output_text(archived(messages, k, k + 1, outputs)[0])
    return 2 * len(cut_text(held, why, ID_SHAPE)) <= len(output_text(messages[k]))


def cut_marker(
    messages: Sequence[Message],
    k: int,
    why: str,
    archive: Callable[[str], str],
    outputs: OutputsBefore | None = None,
) -> str:
    """What an output cut in place shows instead of itself: why it went, what it held (its
    size and first line) and the recall that returns it byte for byte."""
    text = output_text(archived(messages, k, k + 1, outputs)[0])
    return cut_text(text, why, archive(text))


def cut_text(text: str, why: str, aid: str) -> str:
    """The marker an output cut in place shows: why, its size and first line, its recall."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    lines = text.count("\n") + 1 if text else 0
    return (
        f"[tokenpilot: output cut, {_clean(why, 80)}: {lines} lines, {len(text):,} chars, first "
        f'"{_clean(first, 80)}"; recall_artifact(artifact_id="{aid}") returns it]'
    )


def results_with_calls(messages: Sequence[Message], turn: Turn) -> list[tuple[int, Mapping[str, Any]]]:
    """(index, its call) of each tool result of a turn that answers one of its calls."""
    calls = {c.get("id"): c for k in range(turn.start, turn.end) for c in tool_calls_of(messages[k])}
    return [
        (k, calls[m.get("tool_call_id")])
        for k in range(turn.start, turn.end)
        if (m := messages[k]).get("role") == "tool" and m.get("tool_call_id") in calls
    ]


def assistant_index(messages: Sequence[Message], turn: Turn) -> int:
    """Where a turn's assistant message is (after the messages that opened the turn)."""
    for k in range(turn.start, turn.end):
        if messages[k].get("role") == "assistant":
            return k
    return turn.start
