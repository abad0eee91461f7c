"""The chat request as it arrives and as it leaves: checks, per-call messages, rewrite.

OpenClaw appends one unsaved user message per call (`<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>`:
active exec sessions, subagents). Handed to TokenPilot as history it would be
"rewritten" on every call (the next call has the assistant's reply in its place),
breaking the append-only prefix. It is held out and re-appended after TokenPilot's
per-call tail, where per-call content belongs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tokenpilot import Prepared
from tokenpilot.errors import MessageError
from tokenpilot.messages import check_messages, content_text

PER_CALL_MARKERS = ("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>",)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


_JSON_NAMES = {
    str: "a string",
    list: "a list",
    bool: "a boolean",
    dict: "an object",
    int: "a number",
    float: "a number",
}


class BadRequest(ValueError):
    """The request body is not a valid chat completion request; `param` names the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def check_chat_body(body: Any) -> dict[str, Any]:
    """The body as a dict, or `BadRequest` naming the first wrong field."""
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {_kind(body)}")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest(f"'messages' must be a list of messages, got {_kind(messages)}", "messages")
    try:
        check_messages(messages)
    except MessageError as exc:
        raise BadRequest(str(exc), "messages") from exc
    expected = {
        "model": (str,),
        "tools": (list, type(None)),
        "stream": (bool, type(None)),
        "stream_options": (dict, type(None)),
        "prompt_cache_key": (str, type(None)),
    }
    for name, types in expected.items():
        if name in body and not isinstance(body[name], types):
            want = " or ".join("null" if t is type(None) else _JSON_NAMES[t] for t in types)
            raise BadRequest(f"'{name}' must be {want}, got {_kind(body[name])}", name)
    for j, tool in enumerate(body.get("tools") or []):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(
                f"tools[{j}] must be an object with a 'function' object that has a string 'name'", "tools"
            )
    return body


def _kind(value: Any) -> str:
    """A JSON value's kind, for error messages."""
    return "null" if value is None else _JSON_NAMES.get(type(value), type(value).__name__)


def is_per_call(msg: Any) -> bool:
    """An unsaved message the agent regenerates on every call (OpenClaw's internal context)."""
    if not isinstance(msg, Mapping) or msg.get("role") != "user":
        return False
    return content_text(msg.get("content")).lstrip().startswith(PER_CALL_MARKERS)


def split_per_call(messages: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(history, trailing per-call messages)."""
    k = len(messages)
    while k > 0 and is_per_call(messages[k - 1]):
        k -= 1
    return list(messages[:k]), list(messages[k:])


def upstream_body(
    body: Mapping[str, Any],
    prepared: Prepared | None,
    per_call: Sequence[Any],
    session_id: str | None,
) -> dict[str, Any]:
    """The body sent upstream: managed messages and tools, a cache key, usage in streams.

    Keys keep the client's order (one byte form per client); `prompt_cache_key` is the
    client's when it sent one (OpenClaw's changes only at a compaction, a real break).
    """
    out = dict(body)
    if prepared is not None:
        out["messages"] = [*prepared.messages, *per_call]
        if prepared.tools:
            out["tools"] = prepared.tools
    key = body.get("prompt_cache_key") or (prepared.session_id if prepared else session_id)
    if key:
        out["prompt_cache_key"] = key
    if body.get("stream") is True:
        out["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return out


def client_wants_usage(body: Mapping[str, Any]) -> bool:
    opts = body.get("stream_options")
    return isinstance(opts, Mapping) and opts.get("include_usage") is True


def encode(body: Mapping[str, Any]) -> bytes:
    """One compact, valid UTF-8 byte form: the same body always gives the same bytes.

    A lone surrogate (a `\\ud800` escape in the client's JSON) has no UTF-8 form; it is
    written back as that escape, and only it, so every other character keeps its bytes.
    """
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(_escape, text).encode("utf-8")


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def first_difference(prev: Sequence[Any] | None, cur: Sequence[Any]) -> str:
    """Where a rendered prefix first differs from the previous call's, in one line."""
    if not prev:
        return "no earlier request of this session in this process"
    for i, (a, b) in enumerate(zip(prev, cur)):
        if a != b:
            role = b.get("role") if isinstance(b, Mapping) else type(b).__name__
            return f"first differing message: #{i} ({role}): {_excerpt(a)!r} -> {_excerpt(b)!r}"
    if len(cur) < len(prev):
        return f"history shortened from {len(prev)} to {len(cur)} messages"
    return "messages identical; tools or system values changed"


def _excerpt(msg: Any, width: int = 80) -> str:
    if isinstance(msg, Mapping):
        text = content_text(msg.get("content")) or json.dumps(msg.get("tool_calls") or "", ensure_ascii=False)
    else:
        text = str(msg)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
