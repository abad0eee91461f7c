"""The core's messages back to Anthropic Messages, with TokenPilot's cache breakpoints.

`messages_from_core` is `anthropic_wire.to_core`'s inverse, placing every `tool_result`
first in the user turn right after its `tool_use`, as Anthropic requires. The client's
own `cache_control` markers were removed on the way in (`anthropic_wire`); `render`
places at most `MAX_BREAKPOINTS` of TokenPilot's own where its stable prefix ends: the
last stable message, the end of the part of the system prompt every session shares, the
end of the previous turn (so a turn that appended more than Anthropic's 20-block
lookback still reads the last cached prefix), and the tools. The client's own marker
value is reused for them (a `ttl` of 1 h stays 1 h): that is how its markers are folded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokenpilot import Prepared
from tokenpilot.messages.model import parse_arguments

MAX_BREAKPOINTS = 4
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
VALUES_PREFIX = "<tokenpilot-values>"
# Blocks Anthropic refuses a cache_control on.
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def part_to_block(part: Mapping[str, Any]) -> dict[str, Any]:
    if part.get("type") == "image_url":
        url = (part.get("image_url") or {}).get("url", "")
        if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
            media, data = url[5:].split(";base64,", 1)
            return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
        return {"type": "image", "source": {"type": "url", "url": url}}
    return dict(part)


def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [part_to_block(p) for p in content]


def tools_from_core(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in tools:
        fn = t.get("function")
        if t.get("type") != "function" or not isinstance(fn, Mapping):
            out.append(dict(t))
            continue
        entry: dict[str, Any] = {"name": fn["name"]}
        if "description" in fn:
            entry["description"] = fn["description"]
        entry["input_schema"] = fn.get("parameters") or {"type": "object"}
        entry.update(fn.get("anthropic") or {})
        out.append(entry)
    return out


def messages_from_core(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, alternating turns) from chat messages; leading system messages are the system."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    k = 0
    while k < len(messages) and messages[k].get("role") in ("system", "developer"):
        system.extend(_blocks(messages[k].get("content")))
        k += 1
    for m in messages[k:]:
        role = m.get("role")
        if role == "tool":
            content = m.get("content")
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.get("tool_call_id"),
                "content": content if isinstance(content, str) or content is None else _blocks(content),
            }
            if result["content"] is None:
                result["content"] = ""
            if m.get("is_error"):
                result["is_error"] = True
            if turns and turns[-1]["role"] == "user":
                prev = turns[-1]["content"]
                n = 0
                while n < len(prev) and prev[n].get("type") == "tool_result":
                    n += 1
                prev.insert(n, result)  # results come first in their user turn
            else:
                turns.append({"role": "user", "content": [result]})
            continue
        if role in ("system", "developer"):  # a later system note: user text (no mid-turn system role)
            role, blocks = "user", _blocks(m.get("content"))
        else:
            blocks = _blocks(m.get("content"))
        if role == "assistant":
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                blocks.append({"type": "tool_use", "id": call["id"], "name": fn["name"],
                               "input": parse_arguments(fn.get("arguments") or "")})  # fmt: skip
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        elif blocks or role != "user":
            turns.append({"role": role, "content": blocks})
    return system, turns


def _markable(blocks: Sequence[Mapping[str, Any]]) -> int | None:
    """The last block that can carry a cache_control (not thinking, not empty text)."""
    for i in range(len(blocks) - 1, -1, -1):
        b = blocks[i]
        if b.get("type") in _UNMARKABLE or (b.get("type") == "text" and not b.get("text")):
            continue
        return i
    return None


def client_marker(body: Mapping[str, Any]) -> dict[str, Any]:
    """The client's first cache_control value (its ttl kept), else a plain ephemeral one."""

    def blocks() -> Any:
        yield from body.get("tools") or []
        if isinstance(body.get("system"), list):
            yield from body["system"]
        for m in body.get("messages") or []:
            if isinstance(m.get("content"), list):
                for b in m["content"]:
                    yield b
                    if isinstance(b.get("content"), list):
                        yield from b["content"]

    for b in blocks():
        cc = b.get("cache_control") if isinstance(b, Mapping) else None
        if isinstance(cc, dict) and cc.get("type") == "ephemeral":
            return dict(cc)
    return dict(EPHEMERAL)


def render(prepared: Prepared, marker: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`system`, `messages` and `tools` of the upstream body, with TokenPilot's breakpoints."""
    cc = dict(marker or EPHEMERAL)
    system, turns = messages_from_core(prepared.messages)
    system = _split_values(system)
    tools = tools_from_core(prepared.tools)
    _, stable = messages_from_core(prepared.stable_messages)
    marks: list[tuple[str, int, int]] = []  # (where, turn or -1, block), most valuable first
    if stable and (j := _markable(stable[-1]["content"])) is not None:
        marks.append(("messages", len(stable) - 1, j))
    n_sys = _shared_system_blocks(system)
    if n_sys:
        marks.append(("system", -1, n_sys - 1))
    # the previous turn's end: the last message before the newest assistant turn
    last_assistant = max((i for i, t in enumerate(stable) if t["role"] == "assistant"), default=-1)
    if last_assistant >= 1 and (j := _markable(stable[last_assistant - 1]["content"])) is not None:
        marks.append(("messages", last_assistant - 1, j))
    if tools:
        marks.append(("tools", -1, len(tools) - 1))
    for where, t, j in list(dict.fromkeys(marks))[:MAX_BREAKPOINTS]:
        target = tools if where == "tools" else system if where == "system" else turns[t]["content"]
        target[j] = {**target[j], "cache_control": cc}
    out: dict[str, Any] = {"messages": turns}
    if system:
        out["system"] = system
    if tools:
        out["tools"] = tools
    return out


def _split_values(system: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system blocks with the session's values block on its own: the core may append it
    to the last system text, and what comes before it is what every session shares."""
    out = []
    for b in system:
        text = b.get("text") if b.get("type") == "text" else None
        cut = text.find("\n\n" + VALUES_PREFIX) if isinstance(text, str) else -1
        if cut > 0:
            out += [{**b, "text": text[:cut]}, {**b, "text": text[cut + 2 :]}]
        else:
            out.append(b)
    return out


def _shared_system_blocks(system: Sequence[Mapping[str, Any]]) -> int:
    """How many system blocks come before the session's values block (the part sessions share)."""
    for i, b in enumerate(system):
        if isinstance(b.get("text"), str) and b["text"].startswith(VALUES_PREFIX):
            return i
    return len(system)


def upstream_body(body: Mapping[str, Any], prepared: Prepared | None) -> dict[str, Any]:
    """The body sent upstream: the client's keys in its order, managed system/messages/tools."""
    if prepared is None:
        return dict(body)
    managed = render(prepared, client_marker(body))
    out = dict(body)
    for key in ("system", "messages", "tools"):
        if key in managed:
            out[key] = managed[key]
        else:
            out.pop(key, None)
    return out


def breakpoints(body: Mapping[str, Any]) -> int:
    """The number of cache_control markers in a body (Anthropic refuses more than 4)."""
    n = 0

    def walk(x: Any) -> None:
        nonlocal n
        if isinstance(x, dict):
            if "cache_control" in x:
                n += 1
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk([body.get("tools"), body.get("system"), body.get("messages")])
    return n


def pairing_errors(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Anthropic's tool pairing rules, broken: each tool_use answered by a tool_result in the
    next (user) turn, placed before its other blocks, and no tool_result without its tool_use."""
    errors: list[str] = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m.get("content"), list) else []
        uses = [b.get("id") for b in content if b.get("type") == "tool_use"]
        if m.get("role") == "assistant" and uses:
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            got = nxt.get("content") if nxt is not None and isinstance(nxt.get("content"), list) else []
            results = [b.get("tool_use_id") for b in got if b.get("type") == "tool_result"]
            if nxt is None:
                continue  # the conversation's last turn: the client has not answered yet
            if sorted(results) != sorted(uses):
                errors.append(f"messages[{i}]: tool_use ids {uses} answered by {results}")
            kinds = [b.get("type") == "tool_result" for b in got]
            if kinds != sorted(kinds, reverse=True):
                errors.append(f"messages[{i + 1}]: tool_result blocks must come first")
        if m.get("role") == "user" and i > 0:
            prev = messages[i - 1].get("content") if isinstance(messages[i - 1].get("content"), list) else []
            prev_uses = {b.get("id") for b in prev if b.get("type") == "tool_use"}
            for b in content:
                if b.get("type") == "tool_result" and b.get("tool_use_id") not in prev_uses:
                    errors.append(f"messages[{i}]: orphan tool_result {b.get('tool_use_id')!r}")
        elif m.get("role") == "user" and any(b.get("type") == "tool_result" for b in content):
            errors.append(f"messages[{i}]: tool_result in the first turn")
    return errors
