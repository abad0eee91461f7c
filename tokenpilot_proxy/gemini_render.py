"""The core's messages back to a Gemini `generateContent` body (`gemini_wire.to_core`'s inverse).

Leading system messages are the `systemInstruction`; every other message goes into
`contents`, a new entry where the client had one (`NEW_TURN`) or the role changes, so a
history the core did not touch comes back as it was sent, byte for byte in meaning.
Ids the proxy made up for calls Gemini sent without one are left out again, and each
`functionResponse` gets back its name, its own id and its response's shape. Gemini
caches implicitly, by prefix: no marker is placed, the prefix is simply kept stable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tokenpilot import Prepared
from tokenpilot.messages.model import parse_arguments
from tokenpilot_proxy.gemini_wire import GENERATED_ID_PREFIX, META, NEW_TURN, PART, TOOL


def part_from_core(part: Any) -> dict[str, Any]:
    """One chat content part as a Gemini part."""
    if not isinstance(part, Mapping):
        return {"text": str(part)}
    kind = part.get("type")
    if kind == PART and isinstance(part.get("part"), Mapping):
        return dict(part["part"])
    if kind == "text":
        return {k: v for k, v in part.items() if k != "type"}
    if kind == "image_url":
        url = (part.get("image_url") or {}).get("url", "")
        if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
            mime, data = url[5:].split(";base64,", 1)
            return {"inlineData": {"mimeType": mime, "data": data}}
        return {"fileData": {"fileUri": url}}
    text = part.get("text")  # a part the core wrote (a note): its words, never its wrapper
    return {"text": text if isinstance(text, str) else json.dumps(dict(part), ensure_ascii=False)}


def _parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}]
    return [part_from_core(p) for p in content]


def _call_part(call: Mapping[str, Any]) -> dict[str, Any]:
    meta = call.get(META) or {}
    fn = call.get("function") or {}
    try:
        args = parse_arguments(fn.get("arguments") or "")
    except ValueError:
        args = {"_unparsed": fn.get("arguments")}
    fc: dict[str, Any] = {"name": fn.get("name")}
    if meta.get("args", True) or args:
        fc["args"] = args
    own = meta.get("id") if META in call else call.get("id")
    if isinstance(own, str) and not own.startswith(GENERATED_ID_PREFIX):
        fc["id"] = own
    fc.update(meta.get("call") or {})
    return {**(meta.get("part") or {}), "functionCall": fc}


def _response_part(msg: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    meta = msg.get(META) or {}
    content = msg.get("content")
    text = (
        content
        if isinstance(content, str)
        else "".join(p.get("text", "") for p in content or [] if isinstance(p, Mapping))
    )
    shape = meta.get("shape", "output")
    response: Any = {shape: text} if shape in ("output", "error") else None
    if response is None:
        try:
            response = json.loads(text)
        except ValueError:
            response = None
        if not isinstance(response, dict):  # reduced by the core: its text, as an output
            response = {"output": text}
    fr: dict[str, Any] = {"name": names.get(str(msg.get("tool_call_id")), "")}
    fr.update(meta.get("response") or {})
    fr["response"] = response
    return {**(meta.get("part") or {}), "functionResponse": fr}


def contents_from_core(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(systemInstruction or None, contents) from chat messages."""
    k = 0
    system_parts: list[dict[str, Any]] = []
    system_meta: dict[str, Any] = {}
    while k < len(messages) and messages[k].get("role") in ("system", "developer"):
        system_meta = dict(messages[k].get(META) or system_meta)
        system_parts += _parts(messages[k].get("content"))
        k += 1
    system = {**system_meta, "parts": system_parts} if system_parts else None
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for m in messages[k:]:
        role = m.get("role")
        meta = m.get(META) or {}
        if role == "assistant":
            parts = _parts(m.get("content"))
            for call in m.get("tool_calls") or []:
                names[str(call.get("id"))] = (call.get("function") or {}).get("name", "")
                parts.append(_call_part(call))
            wire_role: str | None = "model"
        elif role == "tool":
            parts = [_response_part(m, names)]
            wire_role = "user"
        else:  # user, or a later system note: user text (Gemini has no mid-conversation system)
            parts = _parts(m.get("content"))
            wire_role = "user"
        if "content_role" in meta:
            wire_role = meta["content_role"]
        last = contents[-1] if contents else None
        if last is not None and not m.get(NEW_TURN) and last.get("role") == wire_role:
            last["parts"].extend(parts)
            continue
        entry: dict[str, Any] = {} if wire_role is None else {"role": wire_role}
        entry["parts"] = parts
        entry.update(meta.get("content") or {})
        contents.append(entry)
    return system, contents


def tools_from_core(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One `functionDeclarations` entry (in the core's canonical order), then the built-ins."""
    decls: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    for t in tools:
        fn = t.get("function")
        if t.get("type") == "function" and isinstance(fn, Mapping):
            meta = fn.get(META) or {}
            d: dict[str, Any] = {"name": fn.get("name")}
            if "description" in fn:
                d["description"] = fn["description"]
            if not meta.get("no_schema"):
                d[meta.get("schema_key", "parameters")] = fn.get("parameters") or {"type": "object"}
            d.update(meta.get("extra") or {})
            decls.append(d)
        elif t.get("type") == TOOL and isinstance(t.get("tool"), Mapping):
            others.append(dict(t["tool"]))
        else:
            others.append(dict(t))
    return ([{"functionDeclarations": decls}] if decls else []) + others


def upstream_body(body: Mapping[str, Any], prepared: Prepared | None) -> dict[str, Any]:
    """The body sent upstream: the client's keys in its order, managed contents,
    systemInstruction and tools."""
    if prepared is None:
        return dict(body)
    system, contents = contents_from_core(prepared.messages)
    tools = tools_from_core(prepared.tools)
    out = dict(body)
    out["contents"] = contents
    for key, value in (("systemInstruction", system), ("tools", tools)):
        if value:
            out[key] = value
        else:
            out.pop(key, None)
    return out
