"""The neutral message model: OpenAI Chat Completions messages plus the `tools` list.

Every adapter translates to and from this shape. This module checks it (with errors
that name the message and the field) and converts it to and from Anthropic Messages.
Unknown roles, unknown content-part types and unknown keys pass through untouched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import MessageError

KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


# ---------------------------------------------------------------------------
# Checking
# ---------------------------------------------------------------------------
def check_message(msg: Any, index: int | None = None) -> None:
    """Raise `MessageError` when `msg` cannot be an OpenAI chat message.

    Only what would make the request invalid is checked; extra keys are allowed.
    """
    if not isinstance(msg, Mapping):
        raise MessageError(index, f"expected an object, got {type(msg).__name__}")
    role = msg.get("role")
    if not isinstance(role, str) or not role:
        raise MessageError(index, "missing or non-string 'role'")
    content = msg.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise MessageError(
            index, f"'content' must be a string, a list of parts or null, got {type(content).__name__}"
        )
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                raise MessageError(index, f"content part {j} must be an object with a string 'type'")
    if msg.get("tool_calls") is not None:  # any role: an unknown one is read the same way
        calls = msg["tool_calls"]
        if not isinstance(calls, list):
            raise MessageError(index, "'tool_calls' must be a list")
        for j, call in enumerate(calls):
            if not isinstance(call, Mapping):
                raise MessageError(index, f"tool_calls[{j}] must be an object")
            fn = call.get("function")
            if not isinstance(call.get("id"), str) or not isinstance(fn, Mapping):
                raise MessageError(index, f"tool_calls[{j}] needs a string 'id' and a 'function' object")
            if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments", ""), str):
                raise MessageError(
                    index, f"tool_calls[{j}].function needs a string 'name' and string 'arguments'"
                )
    if role == "tool" and not isinstance(msg.get("tool_call_id"), str):
        raise MessageError(index, "a 'tool' message needs a string 'tool_call_id'")


def check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        raise MessageError(None, f"expected a list of messages, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        check_message(m, i)


def check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise MessageError(None, f"'tools' must be a list, got {type(tools).__name__}")
    for j, t in enumerate(tools):
        if not isinstance(t, Mapping) or not tool_name(t):
            raise MessageError(None, f"tools[{j}] must be an object with a function name")


def tool_name(tool: Mapping[str, Any]) -> str:
    """The name of an OpenAI tool entry (function tools, or other types with a name)."""
    fn = tool.get("function")
    if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
        return fn["name"]
    name = tool.get("name")
    return name if isinstance(name, str) else ""


def role_and_text(msg: Any) -> tuple[str, str] | None:
    """(role, text) of a message that holds only a role and a text (a stub, a marker the
    planner wrote), else None: such a message can be remembered by its text."""
    if isinstance(msg, dict) and len(msg) == 2:
        role, content = msg.get("role"), msg.get("content")
        if isinstance(role, str) and isinstance(content, str):
            return role, content
    return None


def content_text(content: Any) -> str:
    """The text of a message's content: the string, or its text parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
            out.append(part["text"])
    return "\n".join(out)


def parse_arguments(arguments: str) -> Any:
    """Tool-call arguments as a value; raises `ValueError` when they are not JSON."""
    return json.loads(arguments) if arguments.strip() else {}


# ---------------------------------------------------------------------------
# Anthropic Messages <-> OpenAI chat
# ---------------------------------------------------------------------------
def tools_to_anthropic(tools: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    out = []
    for t in tools or []:
        fn = t.get("function") if t.get("type", "function") == "function" else None
        if isinstance(fn, Mapping):
            entry: dict[str, Any] = {
                "name": fn["name"],
                "input_schema": fn.get("parameters") or {"type": "object"},
            }
            if fn.get("description"):
                entry["description"] = fn["description"]
            out.append(entry)
        else:
            out.append(dict(t))  # server tools and unknown kinds pass through
    return out


def tools_from_anthropic(tools: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    out = []
    for t in tools or []:
        if "input_schema" in t:
            fn: dict[str, Any] = {"name": t["name"], "parameters": t["input_schema"]}
            if t.get("description"):
                fn["description"] = t["description"]
            out.append({"type": "function", "function": fn})
        else:
            out.append(dict(t))
    return out


def _image_part_to_block(part: Mapping[str, Any]) -> dict[str, Any]:
    url = (part.get("image_url") or {}).get("url", "")
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _block_to_part(block: Mapping[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "image":
        src = block.get("source") or {}
        if src.get("type") == "base64":
            return {
                "type": "image_url",
                "image_url": {"url": f"data:{src.get('media_type')};base64,{src.get('data')}"},
            }
        if src.get("type") == "url":
            return {"type": "image_url", "image_url": {"url": src.get("url")}}
    return dict(block)  # thinking, documents, unknown kinds: untouched


def _parts_to_blocks(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image_url":
            blocks.append(_image_part_to_block(part))
        else:
            blocks.append(dict(part))
    return blocks


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Anthropic wants alternating roles: merge consecutive same-role turns."""
    if not blocks:
        return
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": blocks})


def to_anthropic(
    messages: list[Mapping[str, Any]], tools: list[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """An Anthropic Messages request body (`system`, `messages`, `tools`).

    Leading system/developer messages become the system blocks; a later one becomes
    user text tagged `<system>` (Anthropic has no mid-conversation system role).
    Tool results become `tool_result` blocks placed first in their user turn.
    """
    check_messages(list(messages))
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    leading = True
    for i, m in enumerate(messages):
        role = m["role"]
        if role in ("system", "developer") and leading:
            system.extend(_parts_to_blocks(m.get("content")))
            continue
        leading = False
        if role in ("system", "developer"):
            _append(
                out, "user", [{"type": "text", "text": f"<system>{content_text(m.get('content'))}</system>"}]
            )
        elif role == "user":
            _append(out, "user", _parts_to_blocks(m.get("content")))
        elif role == "assistant":
            blocks = _parts_to_blocks(m.get("content"))
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                try:
                    args = parse_arguments(fn.get("arguments", ""))
                except ValueError as exc:
                    raise MessageError(
                        i, f"tool call {call['id']!r} has arguments that are not JSON: {exc}"
                    ) from exc
                blocks.append({"type": "tool_use", "id": call["id"], "name": fn["name"], "input": args})
            _append(out, "assistant", blocks)
        elif role == "tool":
            content = m.get("content")
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": content if isinstance(content, str) else _parts_to_blocks(content),
            }
            if m.get("is_error"):
                result["is_error"] = True
            if out and out[-1]["role"] == "user":
                # tool_result blocks must precede any text in the user turn
                prev = out[-1]["content"]
                n = 0
                while n < len(prev) and prev[n].get("type") == "tool_result":
                    n += 1
                prev.insert(n, result)
            else:
                out.append({"role": "user", "content": [result]})
        else:
            _append(out, role, _parts_to_blocks(m.get("content")))
    body: dict[str, Any] = {"messages": out}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools_to_anthropic(tools)
    return body


def from_anthropic(
    messages: list[Mapping[str, Any]],
    system: str | list[Mapping[str, Any]] | None = None,
    tools: list[Mapping[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """OpenAI chat messages and tools from an Anthropic request's parts."""
    out: list[dict[str, Any]] = []
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    elif isinstance(system, list) and system:
        texts = [b.get("text", "") for b in system if b.get("type") == "text"]
        if len(texts) == len(system):
            out.append({"role": "system", "content": "\n\n".join(texts)})
        else:
            out.append({"role": "system", "content": [_block_to_part(b) for b in system]})
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise MessageError(i, "expected an object with a string 'role'")
        role, content = m["role"], m.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise MessageError(i, "'content' must be a string or a list of blocks")
        if role == "assistant":
            parts, calls = [], []
            for b in content:
                if b.get("type") == "tool_use":
                    args = json.dumps(b.get("input", {}), ensure_ascii=False)
                    calls.append(
                        {
                            "id": b["id"],
                            "type": "function",
                            "function": {"name": b["name"], "arguments": args},
                        }
                    )
                else:
                    parts.append(_block_to_part(b))
            msg: dict[str, Any] = {"role": "assistant", "content": _simplify(parts)}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        rest = []
        for b in content:
            if b.get("type") == "tool_result":
                c = b.get("content", "")
                tool_msg: dict[str, Any] = {
                    "role": "tool",
                    "tool_call_id": b["tool_use_id"],
                    "content": c if isinstance(c, str) else _simplify([_block_to_part(x) for x in c]),
                }
                if b.get("is_error"):
                    tool_msg["is_error"] = True
                out.append(tool_msg)
            else:
                rest.append(_block_to_part(b))
        if rest:
            out.append({"role": role, "content": _simplify(rest)})
    return out, tools_from_anthropic(tools)


def _simplify(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    """A single text part becomes a plain string, as most OpenAI clients send it."""
    if not parts:
        return None
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0]["text"]
    return parts
