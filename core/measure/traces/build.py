"""Shared construction for importers: neutral messages, tool-call pairing, call indices.

Importers append messages and mark calls by the *message objects* involved; `Builder`
then repairs tool-call pairing (which may move, add or convert messages) and only
afterwards turns those objects into indices, so a repair can never leave a call
pointing at the wrong message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tokenpilot._canonical import canonical_json, sha256_hex

from .model import RecordedCall, Session, Usage

MISSING_RESULT = "[no tool result was recorded for this call]"


def args_json(arguments: Any) -> str:
    """Tool-call arguments as a JSON object string (invariant I4; Anthropic needs an object).

    A string that parses to an object is kept byte-for-byte; anything else is wrapped
    as `{"raw_arguments": value}` so nothing is lost.
    """
    if arguments is None or arguments == "":
        return "{}"
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return arguments
        return json.dumps({"raw_arguments": arguments}, ensure_ascii=False)
    if not isinstance(arguments, dict):
        arguments = {"raw_arguments": arguments}
    return json.dumps(arguments, ensure_ascii=False)


def tool_call(call_id: str | None, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id or "",
        "type": "function",
        "function": {"name": name or "", "arguments": args_json(arguments)},
    }


def openai_tool_calls(raw: Any) -> list[dict[str, Any]]:
    """Normalise OpenAI-ish or flat ({id, name, arguments}) tool calls to the neutral form."""
    out: list[dict[str, Any]] = []
    for tc in raw or []:
        if not isinstance(tc, dict):
            continue
        fn = tc.get("function")
        if isinstance(fn, dict):
            out.append(tool_call(tc.get("id"), fn.get("name", ""), fn.get("arguments")))
        else:
            out.append(tool_call(tc.get("id"), tc.get("name", ""), tc.get("arguments", tc.get("input"))))
    return out


def content_from_blocks(blocks: Any) -> str | list[dict[str, Any]]:
    """Text/image blocks (Anthropic, OpenClaw or OpenAI parts) as OpenAI content.

    All-text content becomes one string; images keep the list-of-parts form.
    """
    if blocks is None:
        return ""
    if isinstance(blocks, str):
        return blocks
    if isinstance(blocks, dict):
        blocks = [blocks]
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, str):
            parts.append({"type": "text", "text": b})
            continue
        if not isinstance(b, dict):
            continue
        kind = b.get("type")
        if kind in ("text", "input_text", "output_text"):
            parts.append({"type": "text", "text": b.get("text") or ""})
        elif kind == "image_url":
            parts.append({"type": "image_url", "image_url": b.get("image_url") or {}})
        elif kind == "image":
            src = b.get("source") or {}
            data = src.get("data", b.get("data", ""))
            mime = src.get("media_type", b.get("mimeType", "image/png"))
            url = src.get("url") or f"data:{mime};base64,{data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "tool_result":  # nested results: flatten their content
            inner = content_from_blocks(b.get("content"))
            parts.append({"type": "text", "text": inner if isinstance(inner, str) else text_of(inner)})
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def text_of(content: Any) -> str:
    """The text of a message content (string or parts); images count as nothing."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def message(role: str, content: Any = "", **extra: Any) -> dict[str, Any]:
    """A neutral message with only the standard keys that are set."""
    msg: dict[str, Any] = {"role": role, "content": content if content is not None else ""}
    for key in ("tool_calls", "tool_call_id", "name"):
        value = extra.get(key)
        if value:
            msg[key] = value
    return msg


def clean_openai_message(raw: dict[str, Any]) -> dict[str, Any]:
    """Keep the standard keys of an OpenAI-style message; normalise its tool calls."""
    role = raw.get("role") or "user"
    tool_calls = openai_tool_calls(raw.get("tool_calls")) if role == "assistant" else []
    tool_call_id = raw.get("tool_call_id")
    if role == "tool" and not tool_call_id:
        ids = raw.get("tool_call_ids") or []
        tool_call_id = raw.get("id") or (ids[0] if ids else None)
    content = raw.get("content")
    if isinstance(content, list):
        content = content_from_blocks(content)
    return message(
        role,
        content,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id if role == "tool" else None,
        name=raw.get("name") if role in ("user", "system", "assistant") else None,
    )


def parse_time(value: Any) -> float | None:
    """Epoch seconds from ISO strings (naive = UTC), epoch seconds or epoch milliseconds."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        v = float(value)
        return v / 1000.0 if v > 1e11 else v
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.timestamp()
    return None


# -- pairing -----------------------------------------------------------------------------


@dataclass(slots=True)
class PairingStats:
    ids_synthesized: int = 0
    ids_renamed: int = 0
    results_synthesized: int = 0
    orphans_converted: int = 0
    duplicates_converted: int = 0
    moved: int = 0

    def as_meta(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k)}


def repair_pairing(messages: list[dict[str, Any]], seed: str) -> tuple[list[dict[str, Any]], PairingStats]:
    """Make every assistant tool call be followed by exactly one tool message with its id.

    Results are moved right after their call (other messages keep their order after
    them); missing ids are synthesised deterministically from `seed` and the position;
    an id used again later in the conversation (Anthropic rejects that) gets a `~n`
    suffix, in its call and its result; missing results become a placeholder; results
    without a call become user text so their tokens still count. Message objects are
    reused, never copied.
    """
    stats = PairingStats()
    tag = sha256_hex(seed)[:8]
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    n = len(messages)
    i = 0
    while i < n:
        msg = messages[i]
        role = msg.get("role")
        if role == "tool":
            out.append(_as_user(msg))
            stats.orphans_converted += 1
            i += 1
            continue
        out.append(msg)
        if role != "assistant" or not msg.get("tool_calls"):
            i += 1
            continue
        j = i + 1
        while j < n and messages[j].get("role") != "assistant":
            j += 1
        window = messages[i + 1 : j]
        results = [m for m in window if m.get("role") == "tool"]
        claimed: dict[int, dict[str, Any]] = {}
        for k, tc in enumerate(msg["tool_calls"]):
            if not tc.get("id"):
                tc["id"] = f"call_{tag}_{i}_{k}"
                stats.ids_synthesized += 1
            res = next(
                (m for m in results if id(m) not in claimed and m.get("tool_call_id") == tc["id"]), None
            )
            if res is None:
                res = next((m for m in results if id(m) not in claimed and not m.get("tool_call_id")), None)
            if res is None:
                res = message("tool", MISSING_RESULT)
                stats.results_synthesized += 1
            claimed[id(res)] = res
            new_id, suffix = tc["id"], 1
            while new_id in seen:
                new_id, suffix = f"{tc['id']}~{suffix}", suffix + 1
            if new_id != tc["id"]:
                tc["id"] = new_id
                stats.ids_renamed += 1
            seen.add(new_id)
            res["tool_call_id"] = new_id
            out.append(res)
        last_result = max((k for k, m in enumerate(window) if id(m) in claimed), default=-1)
        if any(m.get("role") != "tool" for m in window[:last_result]):
            stats.moved += 1
        for m in window:
            if id(m) in claimed:
                continue
            if m.get("role") == "tool":
                ids = [tc["id"] for tc in msg["tool_calls"]]
                if m.get("tool_call_id") in ids or any(m.get("tool_call_id") == x.split("~")[0] for x in ids):
                    stats.duplicates_converted += 1
                else:
                    stats.orphans_converted += 1
                m = _as_user(m)
            out.append(m)
        i = j
    return out, stats


def _as_user(msg: dict[str, Any]) -> dict[str, Any]:
    """Turn an unpairable tool result into user text in place (identity is kept)."""
    text = text_of(msg.get("content"))
    msg.clear()
    msg.update({"role": "user", "content": f"[tool result]\n{text}"})
    return msg


def pairing_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Every way `messages` breaks OpenAI's/Anthropic's tool-call rules (empty = valid).

    Each tool call has an id unique in the conversation and JSON-object arguments, and
    is answered by exactly one of the tool messages right after its assistant message;
    no tool message answers anything else.
    """
    problems: list[str] = []
    seen: set[str] = set()
    i, n = 0, len(messages)
    while i < n:
        msg = messages[i]
        if msg.get("role") == "tool":
            problems.append(f"message {i}: tool result without a preceding tool call")
            i += 1
            continue
        calls = (msg.get("tool_calls") or []) if msg.get("role") == "assistant" else []
        if not calls:
            i += 1
            continue
        ids = [tc.get("id") for tc in calls]
        for tc in calls:
            cid = tc.get("id")
            if not cid or cid in seen:
                problems.append(f"message {i}: tool call id {cid!r} is missing or used twice")
            seen.add(cid)
            try:
                ok = isinstance(json.loads(tc["function"]["arguments"]), dict)
            except (KeyError, TypeError, ValueError):
                ok = False
            if not ok:
                problems.append(f"message {i}: tool call {cid!r} arguments are not a JSON object")
        got = []
        while i + 1 + len(got) < n and messages[i + 1 + len(got)].get("role") == "tool":
            got.append(messages[i + 1 + len(got)].get("tool_call_id"))
        if sorted(map(str, got)) != sorted(map(str, ids)):
            problems.append(f"message {i}: results {got} do not match calls {ids}")
        i += 1 + len(got)
    return problems


# -- sessions ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Spec:
    output: dict[str, Any]
    start: dict[str, Any] | None
    usage: Usage | None
    timestamp: float | None
    model: str | None
    sent: tuple[tuple[dict[str, Any], Any], ...] = ()


@dataclass(slots=True)
class Builder:
    """Collects messages and calls for one session; `finish` repairs and indexes them."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    specs: list[_Spec] = field(default_factory=list)
    starts: list[dict[str, Any]] = field(default_factory=list)

    def add(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.messages.append(msg)
        return msg

    def call(
        self,
        output: dict[str, Any],
        usage: Usage | None = None,
        timestamp: float | None = None,
        model: str | None = None,
        start: dict[str, Any] | None = None,
        sent: Sequence[tuple[dict[str, Any], Any]] = (),
    ) -> None:
        """Mark `output` (an added assistant message) as a call whose prompt begins at `start`.

        `sent` pairs an added message with the content this call sent it with, where the
        agent rewrote it (its own elision of old output); role and ids stay the message's
        own, as the pairing repair leaves them."""
        self.specs.append(_Spec(output, start, usage, timestamp, model, tuple(sent)))

    def task_start(self, msg: dict[str, Any]) -> None:
        self.starts.append(msg)

    def finish(
        self,
        *,
        session_id: str,
        source: str,
        fmt: str,
        tools: list[dict[str, Any]] | None = None,
        meta: dict[str, Any] | None = None,
        hidden_prefix_tokens: int | None = None,
    ) -> Session:
        """Repair pairing, resolve indices; estimate the hidden prefix when not given."""
        messages, stats = repair_pairing(self.messages, session_id)
        index = {id(m): k for k, m in enumerate(messages)}
        calls: list[RecordedCall] = []
        forms: dict[tuple[int, str], dict[str, Any]] = {}  # one object per rewritten form
        for spec in self.specs:
            end = index.get(id(spec.output))
            if end is None:
                continue
            start = index.get(id(spec.start), 0) if spec.start is not None else 0
            sent: dict[int, dict[str, Any]] = {}
            for orig, content in spec.sent:
                k = index.get(id(orig))
                if k is not None:
                    key = (k, sha256_hex(canonical_json(content)))
                    sent[k] = forms.setdefault(key, {**orig, "content": content})
            calls.append(
                RecordedCall(min(start, end), end, spec.usage, spec.timestamp, spec.model, sent=sent or None)
            )
        calls.sort(key=lambda c: c.end)
        starts = {index[id(m)] for m in self.starts if id(m) in index}
        first_user = next((k for k, m in enumerate(messages) if m.get("role") == "user"), None)
        if first_user is not None:
            starts.add(first_user)  # the first user message always opens the first task
        task_starts = sorted(starts)
        meta = dict(meta or {})
        if stats.as_meta():
            meta["pairing_repairs"] = stats.as_meta()
        session = Session(
            id=session_id,
            source=source,
            fmt=fmt,
            messages=messages,
            tools=list(tools or []),
            calls=calls,
            task_starts=task_starts,
            meta=meta,
        )
        session.hidden_prefix_tokens = (
            estimate_hidden_prefix(session) if hidden_prefix_tokens is None else hidden_prefix_tokens
        )
        return session


def called_tools(
    messages: Sequence[dict[str, Any]], declared: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Name-only schemas of the tools a session calls that its record does not declare.

    For agents that send their tool list on every call but do not record it (Claude Code,
    Codex CLI's built-in tools): a context manager reads the list to decide what to offer
    beside it (`recall_tool_from="auto"`). Their names, sorted, stand in for it; the
    schemas' size stays in the hidden prefix, which the importer estimates after them
    from the first recorded prompt."""
    known = {str((t.get("function") or {}).get("name") or "") for t in declared}
    names = sorted(
        {
            str((c.get("function") or {}).get("name") or "")
            for m in messages
            for c in m.get("tool_calls") or []
            if isinstance(c, dict)
        }
        - {""}
        - known
    )
    return [{"type": "function", "function": {"name": n}} for n in names]


def estimate_hidden_prefix(session: Session) -> int:
    """First recorded prompt minus our count of what the record holds, floored at 0.

    Our count uses the same segments the cache simulator sees (canonical JSON per
    message), so hidden prefix + our count reproduces the first call's prompt exactly.
    """
    from tokenpilot.measure.cache_segments import request_segments, segments_tokens

    first = next((c for c in session.calls if c.usage is not None and c.usage.prompt_tokens > 0), None)
    if first is None:
        return 0
    ours = segments_tokens(request_segments(session.prompt(first), session.tools, system_breakpoint=False))
    return max(0, first.usage.prompt_tokens - ours)


def share_hidden_prefix(sessions: list[Session], tolerance: float = 0.002, slack: int = 16) -> None:
    """Give sessions of one deployment one hidden prefix each (cross-session warm starts).

    Per-session estimates of the same unrecorded prefix differ by a few tokens (our
    count of the first message varies); estimates within `slack` tokens or
    `tolerance` of each other form a group that takes the group's median, so the
    simulator sees one shared synthetic segment. A deployment change between runs (a
    new tool) shows up as a separate group.
    """
    est = sorted((estimate_hidden_prefix(s), k) for k, s in enumerate(sessions))
    groups: list[list[tuple[int, int]]] = []
    for value, k in est:
        if groups and value - groups[-1][-1][0] <= max(slack, tolerance * value):
            groups[-1].append((value, k))
        else:
            groups.append([(value, k)])
    for group in groups:
        median = group[len(group) // 2][0]
        for _, k in group:
            sessions[k].hidden_prefix_tokens = median
