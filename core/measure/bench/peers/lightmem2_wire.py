"""Chat messages <-> the OpenAI Responses bodies LightMem2's Codex and OpenClaw proxies take.

LightMem2's Codex and OpenClaw adapters are local Responses-API proxies, so the bench
sends them the body each host's agent would send for a recorded prompt, and reads
back what the proxy would forward. What maps, per host:

- Codex (its CLI's wire form): the leading system message is `instructions`; later
  system messages are `developer` messages; user and assistant text are typed
  `message` items (`input_text` / `output_text` parts); each tool call is a
  `function_call` item, each result a `function_call_output` with a string output.
- OpenClaw (its pi-ai Responses provider): the system prompt is a leading
  `developer` item with string content and there is no `instructions`; a recorded
  call id `call_X|fc_Y` is pi-ai's pair (`call_id` call_X, item `id` fc_Y).

What does not map: chat image parts become `input_image` items by URL and come back as
they went; other non-text parts, `name` fields and a message's extra keys are not sent
(the adapters never read them), and come back from the agent's own message since the
adapters do not change them. Reasoning items and `previous_response_id` chains do not
exist in the recorded chat sessions, so every request carries the whole history.

`to_responses` also returns which message each item came from, so `from_responses` can
rebuild only the messages whose items the proxy changed and leave the rest as the
agent's own objects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
HOSTS = ("codex", "openclaw")


@dataclass(frozen=True, slots=True)
class Wire:
    """A Responses body and, per `input` item, the index of the chat message it came
    from (`instructions`, when set, came from message `instructions_from`)."""

    body: dict[str, Any]
    owners: list[int]
    instructions_from: int | None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and "text" in p)
    return "" if content is None else json.dumps(content)


def _parts(content: Any, role: str) -> list[dict[str, Any]]:
    """Chat content as typed Responses parts."""
    kind = "output_text" if role == "assistant" else "input_text"
    if not isinstance(content, list):
        return [{"type": kind, "text": _text(content)}]
    out: list[dict[str, Any]] = []
    for p in content:
        if isinstance(p, dict) and p.get("type") == "image_url":
            url = p.get("image_url")
            out.append({"type": "input_image", "image_url": url.get("url") if isinstance(url, dict) else url})
        elif isinstance(p, dict) and "text" in p:
            out.append({"type": kind, "text": p["text"]})
    return out


def _split_id(call_id: str, host: str) -> tuple[str, str | None]:
    if host == "openclaw" and "|" in call_id:
        call, item = call_id.split("|", 1)
        return call, item
    return call_id, None


def to_responses(messages: list[Message], tools: list[dict[str, Any]], host: str, model: str) -> Wire:
    """The body `host`'s agent would send for this chat prompt."""
    if host not in HOSTS:
        raise ValueError(f"host must be one of {HOSTS}")
    body: dict[str, Any] = {"model": model}
    items: list[dict[str, Any]] = []
    owners: list[int] = []
    instructions_from = None
    for i, m in enumerate(messages):
        role = m.get("role")
        content = m.get("content")
        if role in ("system", "developer"):
            if host == "codex" and i == 0:
                body["instructions"] = _text(content)
                instructions_from = i
                continue
            item: dict[str, Any] = {"role": "developer", "content": _text(content)}
            if host == "codex":
                item = {"type": "message", "role": "developer", "content": _parts(content, "developer")}
            items.append(item)
            owners.append(i)
        elif role == "tool":
            call, _ = _split_id(str(m.get("tool_call_id", "")), host)
            items.append({"type": "function_call_output", "call_id": call, "output": _text(content)})
            owners.append(i)
        elif role == "assistant":
            if content not in (None, "", []):
                items.append(
                    {"type": "message", "role": "assistant", "content": _parts(content, "assistant")}
                )
                owners.append(i)
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                call, item_id = _split_id(str(c.get("id", "")), host)
                fc = {
                    "type": "function_call",
                    "call_id": call,
                    "name": fn.get("name", ""),
                    "arguments": fn.get("arguments") or "{}",
                }
                items.append({**fc, "id": item_id} if item_id else fc)
                owners.append(i)
        else:  # user
            items.append({"type": "message", "role": "user", "content": _parts(content, "user")})
            owners.append(i)
    body["input"] = items
    body["tools"] = [_tool(t) for t in tools]
    return Wire(body, owners, instructions_from)


def _tool(t: dict[str, Any]) -> dict[str, Any]:
    fn = t.get("function") if t.get("type") == "function" else None
    return {"type": "function", **fn} if isinstance(fn, dict) else dict(t)


def _chat_content(parts: Any, original: Any) -> Any:
    """Responses content back in the original message's shape (a string stays a string)."""
    if isinstance(parts, str):
        return parts
    text_only = all(isinstance(p, dict) and p.get("type") in ("input_text", "output_text") for p in parts)
    if text_only and not isinstance(original, list):
        return "\n".join(p.get("text", "") for p in parts)
    out = []
    for p in parts:
        if isinstance(p, dict) and p.get("type") in ("input_text", "output_text"):
            out.append({"type": "text", "text": p.get("text", "")})
        elif isinstance(p, dict) and p.get("type") == "input_image":
            out.append({"type": "image_url", "image_url": {"url": p.get("image_url")}})
        else:
            out.append(p)
    return out


def _rebuild(original: Message, items: list[dict[str, Any]]) -> Message:
    """`original` with the text the proxy forwarded in its items."""
    out = dict(original)
    if original.get("role") == "tool":
        output = items[0].get("output", "")
        if isinstance(output, str) and isinstance(original.get("content"), list):
            output = [{"type": "input_text", "text": output}]  # a list result keeps its shape
        out["content"] = _chat_content(output, original.get("content"))
        return out
    calls = [it for it in items if it.get("type") == "function_call"]
    texts = [it for it in items if it.get("type") != "function_call"]
    if texts:
        out["content"] = _chat_content(texts[0].get("content", ""), original.get("content"))
    if calls and original.get("tool_calls"):
        out["tool_calls"] = [
            {**c, "function": {**(c.get("function") or {}), "arguments": it.get("arguments", "")}}
            for c, it in zip(original["tool_calls"], calls, strict=False)
        ]
    return out


def _shape(items: list[Any]) -> list[tuple[Any, Any]]:
    return [(it.get("type"), it.get("role")) if isinstance(it, dict) else (None, None) for it in items]


def from_responses(sent: Wire, forwarded: dict[str, Any], messages: list[Message]) -> list[Message] | None:
    """The chat prompt the proxy forwarded: each message whose items it changed, rebuilt;
    the others, the agent's own objects. Instructions it added lead as a system message.
    None when the proxy changed the items' shape (then no message-level map exists)."""
    before = sent.body["input"]
    after = forwarded.get("input")
    if not isinstance(after, list) or _shape(after) != _shape(before):
        return None
    groups: dict[int, list[int]] = {}
    for k, owner in enumerate(sent.owners):
        groups.setdefault(owner, []).append(k)
    out: list[Message] = []
    for i, m in enumerate(messages):
        ks = groups.get(i, [])
        if i == sent.instructions_from:
            text = forwarded.get("instructions")
            out.append(m if text == sent.body.get("instructions") else {**m, "content": text})
        elif ks and any(after[k] != before[k] for k in ks):
            out.append(_rebuild(m, [after[k] for k in ks]))
        else:
            out.append(m)
    added = forwarded.get("instructions")
    if sent.instructions_from is None and isinstance(added, str) and added:
        out.insert(0, {"role": "system", "content": added})
    return out
