"""Gemini `generateContent` requests to the core's chat messages, checked at the boundary.

Gemini CLI and the google-genai SDKs send the whole conversation as `contents` on each
call: `user` and `model` turns of `parts`. `to_core` maps them onto chat messages without
dropping anything:

- `systemInstruction`'s text parts become leading system messages (each its own, as
  Anthropic's blocks do), so the core stabilises them like any system prompt;
- a `model` turn is an assistant message: text parts (with `thought` and
  `thoughtSignature` kept on the part) and `functionCall` parts as `tool_calls`;
- each `functionResponse` part is a `tool` message whose text is the response's
  `output` (or `error`), which is what the core reduces and keeps recallable; any other
  response shape rides as its JSON text;
- images (`inlineData` of an image type) become `image_url` parts the image pass reads;
  every other part (`fileData`, `executableCode`, other inline data) rides as a
  `gemini_part` the core never edits.

Gemini's Developer API answers function calls without ids, so calls are paired with
their responses by position, as Gemini does: each call gets an id made from its place and
content (`GENERATED_ID_PREFIX`), which the way back (`gemini_render`) leaves out again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from tokenpilot_proxy.sessions import SESSION_HEADERS, normalize_session_id
from tokenpilot_proxy.wire import BadRequest, json_kind

PART = "gemini_part"  # a content-part type: a Gemini part the core never edits
TOOL = "gemini_tool"  # a tool entry with no function declaration (googleSearch, codeExecution)
META = "tp_gemini"  # a message's or call's Gemini details, for the way back
NEW_TURN = "tp_gemini_turn"  # a message that opened its own `contents` entry
GENERATED_ID_PREFIX = "gc_"
SHAPES = ("output", "error")  # functionResponse.response shapes whose text is managed
_TEXT_KEYS = frozenset({"text", "thought", "thoughtSignature"})


# ---------------------------------------------------------------------------
# Checking
# ---------------------------------------------------------------------------
# Google's JSON takes a field by its proto name too (`system_instruction`, `inline_data`:
# the form of its own curl examples); the SDKs send the camelCase one. The fields the
# translation reads are taken in either form and go on in camelCase.
_CAMEL = {
    "system_instruction": "systemInstruction", "cached_content": "cachedContent",
    "function_declarations": "functionDeclarations", "parameters_json_schema": "parametersJsonSchema",
    "function_call": "functionCall", "function_response": "functionResponse", "inline_data": "inlineData",
    "mime_type": "mimeType", "thought_signature": "thoughtSignature", "file_data": "fileData",
}  # fmt: skip


def _renamed(d: dict[str, Any]) -> dict[str, Any]:
    """`d`'s keys in camelCase where `_CAMEL` names them; a key given both ways is kept as sent."""
    if not any(k in _CAMEL for k in d):
        return d
    return {(_CAMEL[k] if k in _CAMEL and _CAMEL[k] not in d else k): v for k, v in d.items()}


def _each(items: list[Any], fn: Any) -> list[Any]:
    """`fn` over `items`: the same list when no item changed (the usual, camelCase body)."""
    out = [fn(x) for x in items]
    return items if all(a is b for a, b in zip(out, items)) else out


def _with(d: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """`d` with `key` set to `value`: `d` itself when that is what it holds."""
    return d if d.get(key) is value else {**d, key: value}


def _part(p: Any) -> Any:
    if not isinstance(p, dict):
        return p
    p = _renamed(p)
    for key in ("inlineData", "fileData", "functionCall", "functionResponse"):
        if isinstance(p.get(key), dict):
            p = _with(p, key, _renamed(p[key]))  # their own fields only: args and responses are the agent's
    return p


def _content(c: Any) -> Any:
    if not isinstance(c, dict) or not isinstance(c.get("parts"), list):
        return c
    return _with(c, "parts", _each(c["parts"], _part))


def _tool(t: Any) -> Any:
    if not isinstance(t, dict):
        return t
    t = _renamed(t)
    decls = t.get("functionDeclarations")
    if isinstance(decls, list):
        t = _with(
            t, "functionDeclarations", _each(decls, lambda d: _renamed(d) if isinstance(d, dict) else d)
        )
    return t


def camel(body: Any) -> Any:
    """The request with the fields the translation reads in camelCase: the top level, each
    content and part (and the fields of its call, response or data), each tool and
    function declaration; never inside arguments, responses, schemas or configs. A body
    already in camelCase comes back as it is, no container copied: this runs on every call."""
    if not isinstance(body, dict):
        return body
    body = _renamed(body)
    if isinstance(body.get("contents"), list):
        body = _with(body, "contents", _each(body["contents"], _content))
    if isinstance(body.get("systemInstruction"), dict):
        body = _with(body, "systemInstruction", _content(body["systemInstruction"]))
    if isinstance(body.get("tools"), list):
        body = _with(body, "tools", _each(body["tools"], _tool))
    return body
    body = _renamed(body)
    if isinstance(body.get("contents"), list):
        body = {**body, "contents": [_content(c) for c in body["contents"]]}
    if isinstance(body.get("systemInstruction"), dict):
        body = {**body, "systemInstruction": _content(body["systemInstruction"])}
    if isinstance(body.get("tools"), list):
        tools = []
        for t in body["tools"]:
            if isinstance(t, dict):
                t = _renamed(t)
                decls = t.get("functionDeclarations")
                if isinstance(decls, list):
                    t = {
                        **t,
                        "functionDeclarations": [_renamed(d) if isinstance(d, dict) else d for d in decls],
                    }
            tools.append(t)
        body = {**body, "tools": tools}
    return body


def check_body(body: Any) -> dict[str, Any]:
    """The body as a dict (its fields in camelCase: `camel`), or `BadRequest` naming the
    first field Gemini would refuse, to the depth `to_core` and the renderer read it."""
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {json_kind(body)}")
    body = camel(body)
    contents = body.get("contents")
    if not isinstance(contents, list):
        raise BadRequest(f"'contents' must be a list of contents, got {json_kind(contents)}", "contents")
    for i, c in enumerate(contents):
        _check_content(c, f"contents[{i}]", "contents")
    system = body.get("systemInstruction")
    if system is not None and not isinstance(system, str):
        _check_content(system, "systemInstruction", "systemInstruction")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest(f"'tools' must be a list of tools, got {json_kind(tools)}", "tools")
    for j, t in enumerate(tools or []):
        if not isinstance(t, dict):
            raise BadRequest(f"tools[{j}] must be an object, got {json_kind(t)}", "tools")
        decls = t.get("functionDeclarations", [])
        if not isinstance(decls, list):
            raise BadRequest(
                f"tools[{j}].functionDeclarations must be a list, got {json_kind(decls)}", "tools"
            )
        for k, d in enumerate(decls):
            if not isinstance(d, dict) or not isinstance(d.get("name"), str):
                raise BadRequest(f"tools[{j}].functionDeclarations[{k}] must be an object with a string 'name'",
                                 "tools")  # fmt: skip
            for key in ("parameters", "parametersJsonSchema"):
                if key in d and not isinstance(d[key], dict):
                    raise BadRequest(
                        f"tools[{j}].functionDeclarations[{k}].{key} must be an object, got {json_kind(d[key])}",
                        "tools",
                    )
    if "cachedContent" in body and not isinstance(body["cachedContent"], str):
        raise BadRequest(f"'cachedContent' must be a string, got {json_kind(body['cachedContent'])}",
                         "cachedContent")  # fmt: skip
    return body


def _check_content(c: Any, where: str, param: str) -> None:
    """One Content: an optional string role and a list of parts."""
    if not isinstance(c, dict):
        raise BadRequest(f"{where} must be an object, got {json_kind(c)}", param)
    role = c.get("role")
    if role is not None and not isinstance(role, str):
        raise BadRequest(f"{where}.role must be a string, got {json_kind(role)}", param)
    parts = c.get("parts")
    if not isinstance(parts, list):
        raise BadRequest(f"{where}.parts must be a list of parts, got {json_kind(parts)}", param)
    for k, p in enumerate(parts):
        _check_part(p, f"{where}.parts[{k}]", param)


def _check_part(p: Any, where: str, param: str) -> None:
    if not isinstance(p, dict):
        raise BadRequest(f"{where} must be an object, got {json_kind(p)}", param)
    if "text" in p and not isinstance(p["text"], str):
        raise BadRequest(f"{where}.text must be a string, got {json_kind(p['text'])}", param)
    for key in ("functionCall", "functionResponse", "inlineData"):
        if key in p and not isinstance(p[key], dict):
            raise BadRequest(f"{where}.{key} must be an object, got {json_kind(p[key])}", param)
    call = p.get("functionCall")
    if call is not None:
        if not isinstance(call.get("name"), str):
            raise BadRequest(
                f"{where}.functionCall.name must be a string, got {json_kind(call.get('name'))}", param
            )
        if "args" in call and not isinstance(call["args"], (dict, type(None))):
            raise BadRequest(
                f"{where}.functionCall.args must be an object, got {json_kind(call['args'])}", param
            )
        if "id" in call and not isinstance(call["id"], (str, type(None))):
            raise BadRequest(f"{where}.functionCall.id must be a string, got {json_kind(call['id'])}", param)
    resp = p.get("functionResponse")
    if resp is not None:
        if not isinstance(resp.get("name", ""), str):
            raise BadRequest(f"{where}.functionResponse.name must be a string", param)
        if "response" in resp and not isinstance(resp["response"], (dict, type(None))):
            raise BadRequest(
                f"{where}.functionResponse.response must be an object, got {json_kind(resp['response'])}",
                param,
            )
        if "id" in resp and not isinstance(resp["id"], (str, type(None))):
            raise BadRequest(
                f"{where}.functionResponse.id must be a string, got {json_kind(resp['id'])}", param
            )
    data = p.get("inlineData")
    if data is not None:
        for key in ("mimeType", "data"):
            if not isinstance(data.get(key), str):
                raise BadRequest(f"{where}.inlineData.{key} must be a string, got {json_kind(data.get(key))}",
                                 param)  # fmt: skip


# ---------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------
def session_hint(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """The generic session headers, normalised; else None (the id is derived from the
    conversation's start and the caller's key: Gemini CLI names no session on the wire)."""
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value and value.strip():
            return normalize_session_id(value)
    return None


# ---------------------------------------------------------------------------
# Gemini -> core
# ---------------------------------------------------------------------------
def generated_id(turn: int, k: int, call: Mapping[str, Any]) -> str:
    """The id of a call Gemini sent without one: its place and content (deterministic, so
    the same history gives the same ids on every call)."""
    digest = hashlib.sha256(
        json.dumps([call.get("name"), call.get("args")], sort_keys=True, ensure_ascii=False).encode()
    ).hexdigest()[:8]
    return f"{GENERATED_ID_PREFIX}{turn}_{k}_{digest}"


def part_to_core(part: Mapping[str, Any]) -> dict[str, Any]:
    """One non-call part as a chat content part."""
    if "text" in part and set(part) <= _TEXT_KEYS:
        return {"type": "text", **part}
    data = part.get("inlineData")
    if set(part) == {"inlineData"} and isinstance(data, Mapping) and set(data) == {"mimeType", "data"}:
        if data["mimeType"].startswith("image/"):
            return {
                "type": "image_url",
                "image_url": {"url": f"data:{data['mimeType']};base64,{data['data']}"},
            }
    return {"type": PART, "part": dict(part)}


def _response_text(resp: Mapping[str, Any]) -> tuple[str, str]:
    """(the text the core manages, the response's shape: `output`, `error` or `json`)."""
    response = resp.get("response")
    if isinstance(response, Mapping) and len(response) == 1:
        ((key, value),) = response.items()
        if key in SHAPES and isinstance(value, str):
            return value, key
    return json.dumps(response, ensure_ascii=False), "json"


class _Pending:
    """The calls of the last model turn, answered in order (by id when the response has
    the call's, else the first unanswered call of the same name, else the first unanswered)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str]] = []  # (core id, Gemini's id, name)
        self.answered: set[int] = set()

    def match(self, resp: Mapping[str, Any]) -> str | None:
        order = [i for i in range(len(self.calls)) if i not in self.answered]
        rid, name = resp.get("id"), resp.get("name")
        for rule in (lambda i: rid is not None and self.calls[i][1] == rid, lambda i: self.calls[i][2] == name,
                     lambda i: True):  # fmt: skip
            hit = next((i for i in order if rule(i)), None)
            if hit is not None:
                self.answered.add(hit)
                return self.calls[hit][0]
        return None


def to_core(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(chat messages, chat tools) for `TokenPilot.prepare`; see the module docstring."""
    out: list[dict[str, Any]] = []
    system = body.get("systemInstruction")
    if isinstance(system, str):
        system = {"parts": [{"text": system}]}
    if isinstance(system, Mapping):
        meta = {k: v for k, v in system.items() if k != "parts"}
        for p in system.get("parts") or []:
            if set(p) == {"text"}:
                out.append({"role": "system", "content": p["text"], META: meta})
            else:
                out.append({"role": "system", "content": [part_to_core(p)], META: meta})
    pending = _Pending()
    for i, c in enumerate(body.get("contents") or []):
        extra = {k: v for k, v in c.items() if k not in ("role", "parts")}
        if c.get("role") == "model":
            out.append(_model_message(i, c, extra))
            pending = _Pending()
            pending.calls = [(tc["id"], tc[META].get("id"), tc["function"]["name"])
                             for tc in out[-1].get("tool_calls", [])]  # fmt: skip
            continue
        msgs = _user_messages(i, c, pending)
        head = msgs[0]
        head[NEW_TURN] = True
        if c.get("role") != "user":  # another role, or none: given back as it came
            head[META] = {**head.get(META, {}), "content_role": c.get("role")}
        if extra:
            head[META] = {**head.get(META, {}), "content": extra}
        out += msgs
    tools = body.get("tools")
    return out, (tools_to_core(tools) if isinstance(tools, list) else None)


def _user_messages(i: int, c: Mapping[str, Any], pending: _Pending) -> list[dict[str, Any]]:
    """A user turn: each functionResponse a tool message, the parts between them user messages."""
    out: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for p in [*c["parts"], None]:
        resp = p.get("functionResponse") if p is not None else None
        if p is not None and not isinstance(resp, Mapping):
            rest.append(part_to_core(p))
            continue
        if rest or (p is None and not out):  # a content with no parts is kept, for the way back
            out.append({"role": "user", "content": rest})
            rest = []
        if resp is None:
            break
        text, shape = _response_text(resp)
        meta = {"shape": shape, "response": {k: v for k, v in resp.items() if k != "response"},
                "part": {k: v for k, v in p.items() if k != "functionResponse"}}  # fmt: skip
        msg: dict[str, Any] = {"role": "tool", "tool_call_id": pending.match(resp) or f"gr_{i}_{len(out)}",
                               "content": text, META: meta}  # fmt: skip
        if shape == "error":
            msg["is_error"] = True
        out.append(msg)
    return out


def _model_message(i: int, c: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for p in c["parts"]:
        call = p.get("functionCall")
        if not isinstance(call, Mapping):
            parts.append(part_to_core(p))
            continue
        own = call.get("id")
        meta = {"id": own, "call": {k: v for k, v in call.items() if k not in ("name", "args", "id")},
                "part": {k: v for k, v in p.items() if k != "functionCall"}, "args": "args" in call}  # fmt: skip
        calls.append({"id": own or generated_id(i, len(calls), call), "type": "function",
                      "function": {"name": call["name"],
                                   "arguments": json.dumps(call.get("args") or {}, ensure_ascii=False)},
                      META: meta})  # fmt: skip
    msg: dict[str, Any] = {"role": "assistant", "content": parts or None, NEW_TURN: True}
    if calls:
        msg["tool_calls"] = calls
    if extra:
        msg[META] = {"content": dict(extra)}
    return msg


def tools_to_core(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each function declaration as a chat function tool (its other keys kept under `META`);
    every other tool entry (built-ins) rides whole."""
    out: list[dict[str, Any]] = []
    for t in tools:
        rest = {k: v for k, v in t.items() if k != "functionDeclarations"}
        for d in t.get("functionDeclarations") or []:
            schema_key = "parametersJsonSchema" if "parametersJsonSchema" in d else "parameters"
            fn: dict[str, Any] = {"name": d["name"]}
            if "description" in d:
                fn["description"] = d["description"]
            fn["parameters"] = d.get(schema_key) or {"type": "object", "properties": {}}
            extra = {k: v for k, v in d.items() if k not in ("name", "description", schema_key)}
            fn[META] = {"schema_key": schema_key, **({"extra": extra} if extra else {}),
                        **({"no_schema": True} if schema_key not in d else {})}  # fmt: skip
            out.append({"type": "function", "function": fn})
        if rest:  # named by its keys: the core keeps tools by name
            out.append({"type": TOOL, "name": "gemini:" + ",".join(sorted(rest)), "tool": rest})
    return out
