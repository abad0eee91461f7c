"""Turns: the unit the lifecycle tracks, evicts and names.

A turn is the message(s) that opened it (user text, a mid-session system note),
one assistant message, and that assistant's tool results. Evicting whole turns
never separates a tool call from its result (invariant I4).

Turn ids come from content, not position, so they survive restarts, replays and
eviction: the hash covers role + content of the opening messages and of the
assistant message, and the assistant's tool-call *names and arguments*, but not
tool-call ids (OpenClaw rewrites them on replay) and not the tool results (they
arrive after the turn opens; leaving them out makes the id final as soon as the
assistant message exists). Identical turns are told apart by how many times the
same hash occurred before, which depends only on earlier history.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._canonical import canonical_json, sha256_hex
from .observations import is_observation

TURN_PREFIX = "t_"
TURN_HEX_CHARS = 12
_PREAMBLE_ROLES = frozenset({"system", "developer"})

Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Turn:
    """Messages [start, end) of the managed history that form one turn.

    `complete` is False while some tool call of the turn still lacks its result.
    """

    turn_id: str
    start: int
    end: int
    opens_with_user: bool
    complete: bool = True


def content_text(content: Any) -> str:
    """The text of a message `content`: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def tool_calls_of(message: Message) -> list[Mapping[str, Any]]:
    """The assistant's tool calls, tolerating None and malformed entries."""
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    if not isinstance(calls, list):
        return []
    return [c for c in calls if isinstance(c, Mapping)]


def call_name_args(call: Mapping[str, Any]) -> tuple[str, str]:
    """(name, arguments) of one tool call; arguments as the raw JSON string."""
    fn = call.get("function")
    if not isinstance(fn, Mapping):
        return "", ""
    name = fn.get("name")
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = canonical_json(args) if args is not None else ""
    return (name if isinstance(name, str) else ""), args


def parsed_args(raw: str) -> Mapping[str, Any]:
    """Tool-call arguments as a mapping; {} when they are empty, not JSON or not an object."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):  # not JSON, or nested past what Python reads
        return {}
    return value if isinstance(value, Mapping) else {}


def _stable_args(args: str) -> Any:
    """Arguments re-serialised canonically when they are JSON (whitespace-proof)."""
    try:
        return json.loads(args)
    except (ValueError, TypeError, RecursionError):
        return args


def _identity(message: Message) -> Any:
    """What of a message identifies it: role, content, tool-call names+arguments."""
    ident: dict[str, Any] = {"r": message.get("role"), "c": message.get("content")}
    calls = tool_calls_of(message)
    if calls:
        ident["t"] = [[n, _stable_args(a)] for n, a in map(call_name_args, calls)]
    return ident


def _call_ids(message: Message) -> set[str]:
    return {c["id"] for c in tool_calls_of(message) if isinstance(c.get("id"), str)}


def segment_turns(messages: Sequence[Message]) -> list[Turn]:
    """Split a Chat Completions message list into turns (see module docstring).

    Leading system/developer messages belong to no turn. Later system/developer
    messages, and tool messages that follow no assistant, open the next turn like
    user messages do. Trailing openers with no assistant yet are not a turn.
    """
    i = 0
    while i < len(messages) and messages[i].get("role") in _PREAMBLE_ROLES:
        i += 1
    return _segment(messages, i, {})


def _segment(messages: Sequence[Message], i: int, seen: dict[str, int]) -> list[Turn]:
    """Turns of messages[i:], counting repeated content in `seen` (updated)."""
    turns: list[Turn] = []
    n = len(messages)
    opener_start: int | None = None
    while i < n:
        role = messages[i].get("role")
        if role != "assistant":
            if opener_start is None:
                opener_start = i
            i += 1
            continue
        start = i if opener_start is None else opener_start
        a = i
        j = i + 1
        while j < n and (
            messages[j].get("role") == "tool" or (j == a + 1 and is_observation(messages[j], messages[a]))
        ):
            j += 1  # a text-action agent's observation is its action's result, like a tool's
        ids = _call_ids(messages[a])
        answered = {m.get("tool_call_id") for m in messages[a + 1 : j]}
        n_calls = len(tool_calls_of(messages[a]))
        complete = (ids <= answered) if ids else (j - a - 1 >= n_calls)
        opens_with_user = any(messages[k].get("role") == "user" for k in range(start, a))
        digest = sha256_hex(canonical_json([_identity(messages[k]) for k in range(start, a + 1)]))
        count = seen.get(digest, 0)
        seen[digest] = count + 1
        if count:  # the n-th repeat of identical content: a distinct, still stable id
            digest = sha256_hex(f"{digest}#{count}")
        turns.append(Turn(TURN_PREFIX + digest[:TURN_HEX_CHARS], start, j, opens_with_user, complete))
        opener_start = None
        i = j
    return turns


def same_objects(read: Sequence[Any], messages: Sequence[Any], upto: int | None = None) -> bool:
    """Whether `messages` starts with the very objects of `read[:upto]` (all of `read` by
    default): the history a memo was made from, extended, and not a copy or a rewrite."""
    n = len(read) if upto is None else upto
    return n <= min(len(read), len(messages)) and all(read[i] is messages[i] for i in range(n))


class TurnSegmenter:
    """`segment_turns` for an append-only history, re-reading only its tail.

    A turn followed by another message can no longer change, so it is kept; each
    `update` re-segments from the end of the last such turn. If the history was
    not appended to (a message before that point differs), it starts over.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._frozen: list[Turn] = []
        self._seen: dict[str, int] = {}
        self._resume = 0  # index where re-segmentation starts
        self._probe: tuple[int, Any] | None = None  # last frozen message, to detect rewrites
        self._read: Sequence[Message] = ()  # the history of the last update
        self._recheck = False

    def recheck(self) -> None:
        """The history may have been replaced whole (a state loaded over the session): the
        next update keeps the turns it froze only where their messages are the very objects
        it read, and starts over otherwise. A replica that loads the state another saved
        (each call, when calls alternate) keeps its turns instead of hashing every one again."""
        self._recheck = True

    def update(self, messages: Sequence[Message]) -> list[Turn]:
        if self._recheck:
            self._recheck = False
            if not same_objects(self._read, messages, self._resume):
                self._reset()
        if self._probe is not None:
            k, msg = self._probe
            if k >= len(messages) or messages[k] != msg:
                self._reset()
        if not self._frozen:  # still in the preamble: it may have grown
            while self._resume < len(messages) and messages[self._resume].get("role") in _PREAMBLE_ROLES:
                self._resume += 1
        seen = dict(self._seen)
        tail = _segment(messages, self._resume, seen)
        turns = self._frozen + tail
        # Freeze every tail turn that has a message after it; recount `seen` for them.
        n = len(messages)
        for t in tail:
            if t.end >= n:
                break
            self._frozen.append(t)
            self._seen = _count_after(self._seen, messages, t)
            self._resume = t.end
        if self._frozen:
            k = self._frozen[-1].end - 1
            self._probe = (k, dict(messages[k]))
        self._read = messages
        return turns


def _count_after(seen: dict[str, int], messages: Sequence[Message], t: Turn) -> dict[str, int]:
    out = dict(seen)
    a = t.start
    while messages[a].get("role") != "assistant":
        a += 1
    digest = sha256_hex(canonical_json([_identity(messages[k]) for k in range(t.start, a + 1)]))
    out[digest] = out.get(digest, 0) + 1
    return out
