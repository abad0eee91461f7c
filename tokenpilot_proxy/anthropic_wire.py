"""Anthropic Messages requests to the core's message model, checked at the boundary.

The core speaks OpenAI chat messages; `/v1/messages` clients (Claude Code) speak
Anthropic blocks. `to_core` maps a request onto chat messages without dropping
anything: each system block becomes its own leading system message (so the block
structure comes back), `tool_result` blocks become `tool` messages (`is_error` kept),
text blocks keep their extra keys (citations), base64/URL images become `image_url`
parts (the core's image pass reads those), and every other block (thinking,
redacted_thinking, documents, server tools) rides as a content part the core never
edits. The way back, with TokenPilot's cache breakpoints, is `anthropic_render`'s.

Client `cache_control` markers are removed before the core sees the request: Claude
Code moves its marker to the newest message on every call, so a kept marker would make
each old message differ from its frozen form and break the prefix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tokenpilot_proxy.sessions import SESSION_HEADERS, normalize_session_id
from tokenpilot_proxy.wire import MAX_JSON_DEPTH, BadRequest, json_kind, loads_bounded

SESSION_HEADER = "x-claude-code-session-id"


# ---------------------------------------------------------------------------
# Checking and session ids
# ---------------------------------------------------------------------------
def check_body(body: Any) -> dict[str, Any]:
    """The body as a dict, or `BadRequest` naming the first field Anthropic would refuse.

    Every block the translation reads is checked here, at the boundary, to the depth
    `to_core` and `render` read it: past this check they never meet a shape they cannot
    take (a number where a list of blocks goes, an image source that is a string).
    """
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {json_kind(body)}")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest(f"'messages' must be a list of messages, got {json_kind(messages)}", "messages")
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise BadRequest(f"{where} must be an object, got {json_kind(m)}", "messages")
        if not isinstance(m.get("role"), str):
            # any string: Claude Code sends `system` messages mid-conversation, and Anthropic
            # takes them; the upstream judges the roles it knows
            raise BadRequest(f"{where}.role must be a string, got {_shown(m.get('role'))}", "messages")
        content = m.get("content")
        if not isinstance(content, (str, list)):
            raise BadRequest(
                f"{where}.content must be a string or a list of blocks, got {json_kind(content)}", "messages"
            )
        if isinstance(content, list):
            for j, b in enumerate(content):
                _check_block(b, f"{where}.content[{j}]", "messages")
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise BadRequest(f"'system' must be a string or a list of blocks, got {json_kind(system)}", "system")
    if isinstance(system, list):
        for j, b in enumerate(system):
            _check_block(b, f"system[{j}]", "system")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest(f"'tools' must be a list of tools, got {json_kind(tools)}", "tools")
    for j, t in enumerate(tools or []):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise BadRequest(f"tools[{j}] must be an object with a string 'name'", "tools")
        for key, types in (("input_schema", dict), ("description", str), ("cache_control", dict)):
            if key in t and not isinstance(t[key], types):
                raise BadRequest(
                    f"tools[{j}].{key} must be {json_kind(types())}, got {json_kind(t[key])}", "tools"
                )
    if "model" in body and not isinstance(body["model"], str):
        raise BadRequest(f"'model' must be a string, got {json_kind(body['model'])}", "model")
    if body.get("stream") not in (None, True, False):
        raise BadRequest(f"'stream' must be a boolean, got {json_kind(body['stream'])}", "stream")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise BadRequest(f"'metadata' must be an object, got {json_kind(body['metadata'])}", "metadata")
    return body


# Keys a block must hold as strings, by block type (what the translation reads of it).
_STRING_KEYS: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "tool_use": ("id", "name"),
    "tool_result": ("tool_use_id",),
    "thinking": ("thinking",),
}


def _check_block(b: Any, where: str, param: str, *, nested: bool = False) -> None:
    """One content block as `to_core` reads it; `nested`: inside a tool_result."""
    if not isinstance(b, dict) or not isinstance(b.get("type"), str):
        raise BadRequest(
            f"{where} must be a block: an object with a string 'type', got {json_kind(b)}", param
        )
    kind = b["type"]
    for key in _STRING_KEYS.get(kind, ()):
        if not isinstance(b.get(key), str):
            raise BadRequest(f"{where}.{key} must be a string, got {json_kind(b.get(key))}", param)
    if "cache_control" in b and not isinstance(b["cache_control"], dict):
        raise BadRequest(
            f"{where}.cache_control must be an object, got {json_kind(b['cache_control'])}", param
        )
    if kind == "image":
        _check_image_source(b.get("source"), f"{where}.source", param)
    elif kind == "tool_use":
        if "input" in b and not isinstance(b["input"], dict):
            raise BadRequest(f"{where}.input must be an object, got {json_kind(b['input'])}", param)
    elif kind == "tool_result":
        if nested:
            raise BadRequest(f"{where}: a tool_result cannot hold another tool_result", param)
        content = b.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise BadRequest(
                f"{where}.content must be a string or a list of blocks, got {json_kind(content)}", param
            )
        for k, inner in enumerate(content if isinstance(content, list) else []):
            _check_block(inner, f"{where}.content[{k}]", param, nested=True)
        if "is_error" in b and not isinstance(b["is_error"], (bool, type(None))):
            raise BadRequest(f"{where}.is_error must be a boolean, got {json_kind(b['is_error'])}", param)


def _check_image_source(src: Any, where: str, param: str) -> None:
    if not isinstance(src, dict) or not isinstance(src.get("type"), str):
        raise BadRequest(f"{where} must be an object with a string 'type', got {json_kind(src)}", param)
    needs = {"base64": ("media_type", "data"), "url": ("url",)}.get(src["type"], ())
    for key in needs:
        if not isinstance(src.get(key), str):
            raise BadRequest(f"{where}.{key} must be a string, got {json_kind(src.get(key))}", param)


def _shown(value: Any) -> str:
    """A client value in an error message: a short string quoted, anything else by its kind."""
    if isinstance(value, str):
        return repr(value[:40] + ("…" if len(value) > 40 else ""))
    return json_kind(value)


def session_hint(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """The session Claude Code names, normalised; None when it names none (the id is derived).

    Claude Code 2.1.86+ sends `X-Claude-Code-Session-Id`; before that the session rode
    in `metadata.user_id`, as a JSON string `{"session_id": ...}` (2.1.78+) or as
    `user_<hash>_account_<uuid>_session_<uuid>`. The generic session headers count too.
    """
    for name in (SESSION_HEADER, *SESSION_HEADERS):
        value = headers.get(name)
        if value and value.strip():
            return normalize_session_id(value)
    meta = body.get("metadata")
    user_id = meta.get("user_id") if isinstance(meta, Mapping) else None
    if not isinstance(user_id, str):
        return None
    sid: Any = None
    if user_id.lstrip().startswith("{"):
        try:  # any string: bounded, so a deeply nested one is no session name, not a crash
            parsed = loads_bounded(user_id, MAX_JSON_DEPTH)
        except ValueError:
            parsed = None
        sid = parsed.get("session_id") if isinstance(parsed, dict) else None
    elif "_session_" in user_id:
        sid = user_id.rsplit("_session_", 1)[1]
    return normalize_session_id(sid) if isinstance(sid, str) and sid.strip() else None


# ---------------------------------------------------------------------------
# Anthropic -> core
# ---------------------------------------------------------------------------
def _strip(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def block_to_part(block: Mapping[str, Any]) -> dict[str, Any]:
    """One Anthropic block as a chat content part (images as `image_url`, the rest as is)."""
    b = _strip(block)
    if b.get("type") == "image" and set(b) <= {"type", "source"}:
        src = b.get("source") or {}
        if src.get("type") == "base64" and set(src) == {"type", "media_type", "data"}:
            return {
                "type": "image_url",
                "image_url": {"url": f"data:{src['media_type']};base64,{src['data']}"},
            }
        if src.get("type") == "url" and set(src) == {"type", "url"}:
            return {"type": "image_url", "image_url": {"url": src["url"]}}
    return b


def _plain(content: Any) -> Any:
    """A lone plain text block as its string: clients send one message both ways (Claude Code
    makes the newest one a block to mark it), and both must freeze to one form."""
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], Mapping):
        b = _strip(content[0])
        if b.get("type") == "text" and set(b) == {"type", "text"} and isinstance(b["text"], str):
            return b["text"]
    return content


def _tool_message(block: Mapping[str, Any]) -> dict[str, Any]:
    content = _plain(block.get("content", ""))
    msg: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": block.get("tool_use_id"),
        "content": content if isinstance(content, str) else [block_to_part(b) for b in content],
    }
    if block.get("is_error"):
        msg["is_error"] = True
    return msg


def to_core(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(chat messages, chat tools) for `TokenPilot.prepare`; see the module docstring."""
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    elif isinstance(system, list):
        for b in system:
            if b.get("type") == "text" and set(b) <= {"type", "text", "cache_control"}:
                out.append({"role": "system", "content": b.get("text", "")})
            else:
                out.append({"role": "system", "content": [block_to_part(b)]})
    for m in body.get("messages") or []:
        role, content = m["role"], m["content"]
        if role != "assistant":
            content = _plain(content)
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if role == "assistant":
            parts: list[dict[str, Any]] = []
            calls: list[dict[str, Any]] = []
            for b in content:
                if b.get("type") == "tool_use":
                    args = json.dumps(b.get("input", {}), ensure_ascii=False)
                    calls.append(
                        {
                            "id": b.get("id"),
                            "type": "function",
                            "function": {"name": b.get("name"), "arguments": args},
                        }
                    )
                else:
                    parts.append(block_to_part(b))
            msg: dict[str, Any] = {"role": "assistant", "content": parts or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        rest = []
        for b in content:
            if b.get("type") == "tool_result":
                out.append(_tool_message(b))
            else:
                rest.append(block_to_part(b))
        if rest or not content:
            out.append({"role": role, "content": rest})
    tools = body.get("tools")
    return out, (tools_to_core(tools) if isinstance(tools, list) else None)


def tools_to_core(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Client tools as chat function tools; keys beyond name/description/schema ride along
    under `anthropic`, and server tools (no `input_schema`) pass as they are."""
    out = []
    for t in tools:
        t = _strip(t)
        if "input_schema" not in t:
            out.append(t)
            continue
        fn: dict[str, Any] = {"name": t["name"], "parameters": t["input_schema"]}
        if "description" in t:
            fn["description"] = t["description"]
        extra = {k: v for k, v in t.items() if k not in ("name", "description", "input_schema")}
        if extra:
            fn["anthropic"] = extra
        out.append({"type": "function", "function": fn})
    return out
