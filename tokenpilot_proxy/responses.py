"""`/v1/responses` for the proxy: OpenAI Responses requests to the core's chat messages and back.

Codex and OpenClaw's `openai-responses` api send the whole conversation as `input`
items each call (`store: false`), so TokenPilot manages it like a chat history:

- `instructions` is the first system message (marked, so it comes back as
  `instructions`); leading `system`/`developer` items are system messages too.
- `message` items keep their keys; `input_text`/`output_text` parts become `text`
  parts (the core reads those) and get their type back from the role.
- consecutive `function_call` (and `custom_tool_call`, Codex's apply_patch) items become
  one assistant message's `tool_calls`, each `function_call_output` (`custom_tool_call_output`)
  a `tool` message: the core reduces those outputs and keeps calls and results paired.
- every other item (reasoning with its encrypted content, item references, built-in
  tool calls) rides untouched inside an assistant message the core never edits.

`prompt_cache_key` is the client's when it sent one, else the session id: never
stripped. A request that continues a stored response (`previous_response_id`) holds
only the new items, which is no history to manage: it is forwarded as it came.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from tokenpilot import Prepared
from tokenpilot.messages.model import parse_arguments, tool_name
from tokenpilot_proxy import codex_wire, sse, wire
from tokenpilot_proxy.apis import DEFERRED, RECALL_TOOL_NAME
from tokenpilot_proxy.request_path import RequestPath
from tokenpilot_proxy.sessions import resolve_session_id
from tokenpilot_proxy.translated import Translated
from tokenpilot_proxy.wire import BadRequest, json_kind


def add_routes(app: web.Application, path: RequestPath) -> None:
    app.router.add_post("/v1/responses", Translated(path, ResponsesApi()).handle)
    app.router.add_get("/v1/responses", codex_wire.refuse_websocket)  # Codex's WebSocket try: 426, use HTTP


INSTRUCTIONS = "tp_instructions"  # marks the system message that was `instructions`
ITEM = "tp_item"  # an input item with no chat equivalent, as a content part
BUILTIN = "tp_builtin"  # a built-in tool without a name, inside a function entry
CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")
_TEXT_TYPES = ("input_text", "output_text")
_SYSTEM = ("system", "developer")


# ---------------------------------------------------------------------------
# Request translation
# ---------------------------------------------------------------------------
def check_body(body: Any) -> dict[str, Any]:
    """The body as a dict, or `BadRequest` naming the first field OpenAI would refuse.

    Every item and tool is checked here to the depth `to_core` reads it, so the
    translation never meets a shape it cannot take (a tool that is a number).
    """
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {json_kind(body)}")
    inp = body.get("input")
    if inp is not None and not isinstance(inp, (str, list)):
        raise BadRequest(f"'input' must be a string or a list of items, got {json_kind(inp)}", "input")
    for i, item in enumerate(inp if isinstance(inp, list) else []):
        _check_item(item, f"input[{i}]")
    for name, types in (
        ("instructions", (str,)),
        ("prompt_cache_key", (str,)),
        ("model", (str,)),
        ("tools", (list,)),
    ):
        if body.get(name) is not None and not isinstance(body[name], types):
            raise BadRequest(f"'{name}' must be {json_kind(types[0]())}, got {json_kind(body[name])}", name)
    for j, t in enumerate(body.get("tools") or []):
        if not isinstance(t, dict) or not isinstance(t.get("type"), str):
            raise BadRequest(
                f"tools[{j}] must be an object with a string 'type', got {json_kind(t)}", "tools"
            )
        if (t["type"] == "function" or "name" in t) and not isinstance(t.get("name"), str):
            raise BadRequest(f"tools[{j}].name must be a string, got {json_kind(t.get('name'))}", "tools")
    if body.get("stream") not in (None, True, False):
        raise BadRequest(f"'stream' must be a boolean, got {json_kind(body['stream'])}", "stream")
    return body


def _check_item(item: Any, where: str) -> None:
    """One `input` item, as far as `to_core` reads it (other item kinds ride untouched)."""
    if not isinstance(item, dict):
        raise BadRequest(f"{where} must be an object, got {json_kind(item)}", "input")
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise BadRequest(f"{where}.type must be a string, got {json_kind(kind)}", "input")
    if kind == "message":
        _need_str(item, "role", where)
        _check_parts(item.get("content"), f"{where}.content", none_ok=True)
    elif kind in CALLS:
        _need_str(item, "call_id", where)
        _need_str(item, "name", where)
        if kind == "function_call" and not isinstance(item.get("arguments", ""), str):
            raise BadRequest(
                f"{where}.arguments must be a string, got {json_kind(item['arguments'])}", "input"
            )
    elif kind in OUTPUTS:
        _need_str(item, "call_id", where)
        _check_parts(item.get("output", ""), f"{where}.output", none_ok=False)


def _need_str(item: dict[str, Any], key: str, where: str) -> None:
    if not isinstance(item.get(key), str):
        raise BadRequest(f"{where}.{key} must be a string, got {json_kind(item.get(key))}", "input")


def _check_parts(content: Any, where: str, *, none_ok: bool) -> None:
    """A string, or a list of parts (objects with a string 'type'); null where `none_ok`."""
    if content is None and none_ok or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise BadRequest(f"{where} must be a string or a list of parts, got {json_kind(content)}", "input")
    for k, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise BadRequest(
                f"{where}[{k}] must be an object with a string 'type', got {json_kind(part)}", "input"
            )


def _to_part(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") in _TEXT_TYPES:
        return {**part, "type": "text"}
    return part


def _from_part(part: Any, role: str) -> Any:
    if isinstance(part, dict) and part.get("type") == "text":
        return {**part, "type": "output_text" if role == "assistant" else "input_text"}
    return part


def _content_in(content: Any) -> Any:
    return [_to_part(p) for p in content] if isinstance(content, list) else content


def _content_out(content: Any, role: str) -> Any:
    return [_from_part(p, role) for p in content] if isinstance(content, list) else content


def to_core(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(chat messages, chat tools) for `TokenPilot.prepare`; see the module docstring."""
    out: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        out.append({"role": "system", "content": body["instructions"], INSTRUCTIONS: True})
    inp = body.get("input")
    items = [{"role": "user", "content": inp}] if isinstance(inp, str) else list(inp or [])
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and isinstance(item.get("role"), str):
            extra = {k: v for k, v in item.items() if k not in ("role", "content")}
            out.append({"role": item["role"], "content": _content_in(item.get("content")), **extra})
        elif kind in CALLS:  # a custom tool's free-form input rides as a JSON string
            args = item.get("arguments", "") if kind == "function_call" else json.dumps(item.get("input", ""))
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": args},
                    ITEM: {k: v for k, v in item.items() if k not in ("call_id", "name", "arguments", "input")}}  # fmt: skip
            prev = out[-1] if out else None
            if (
                prev is not None
                and prev.get("role") == "assistant"
                and prev.get("content") is None
                and prev.get("tool_calls")
            ):
                prev["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in OUTPUTS:
            extra = {k: v for k, v in item.items() if k not in ("call_id", "output")}
            output = item.get("output", "")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": _content_in(output),
                    ITEM: extra,
                }
            )
        else:
            out.append({"role": "assistant", "content": [{"type": ITEM, "item": item}]})
    tools = body.get("tools")
    if isinstance(tools, list):
        return out, tools_to_core(tools)
    carried = codex_wire.item_tools(items)  # Codex: tools in an `additional_tools` item
    if carried is None:
        return out, None
    return out, tools_to_core(codex_wire.core_view(carried) + codex_wire.deferred_recall(items))


def tools_to_core(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Function tools in chat form (their other keys, like `strict`, kept). Named tools of
    other kinds (`custom`) pass as they are; a built-in without a name (`web_search`) rides
    inside a function entry named after its type, since the core keys tools by name."""
    out = []
    for t in tools:
        if t.get("type") == "function" and isinstance(t.get("name"), str):
            fn = {k: v for k, v in t.items() if k != "type"}
            out.append({"type": "function", "function": fn})
        elif isinstance(t.get("name"), str):
            out.append(dict(t))
        else:
            out.append({"type": "function", "function": {"name": f"__{t.get('type')}", BUILTIN: dict(t)}})
    return out


def tools_from_core(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in tools:
        fn = t.get("function")
        if t.get("type") == "function" and isinstance(fn, Mapping):
            out.append(dict(fn[BUILTIN]) if BUILTIN in fn else {"type": "function", **fn})
        else:
            out.append(dict(t))
    return out


def from_core(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """(instructions, input items) from the managed chat messages."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        extra = {
            k: v
            for k, v in m.items()
            if k not in ("role", "content", "tool_calls", "tool_call_id", ITEM, INSTRUCTIONS)
        }
        content = m.get("content")
        if m.get(INSTRUCTIONS) and not items and isinstance(content, str):
            instructions.append(content)
        elif role == "tool":
            items.append({"type": "function_call_output", **(m.get(ITEM) or {}), "call_id": m.get("tool_call_id"),
                          "output": _content_out(content, "user") if content is not None else ""})  # fmt: skip
        elif (
            role == "assistant"
            and isinstance(content, list)
            and len(content) == 1
            and content[0].get("type") == ITEM
        ):
            items.append(content[0]["item"])
        else:
            if content is not None and not (m.get("tool_calls") and content in ("", [])):
                items.append({**extra, "role": role, "content": _content_out(content, str(role))})
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                item = {"type": "function_call", **(call.get(ITEM) or {})}
                item.update(call_id=call.get("id"), name=fn.get("name"))
                if item["type"] == "custom_tool_call":
                    item["input"] = parse_arguments(fn.get("arguments") or '""')
                else:
                    item["arguments"] = fn.get("arguments", "")
                items.append(item)
    return ("\n\n".join(instructions) if instructions else None), items


def upstream_body(
    body: Mapping[str, Any], prepared: Prepared | None, session_id: str | None
) -> dict[str, Any]:
    """The client's body (its key order) with managed instructions, input and tools."""
    out = dict(body)
    if prepared is not None:
        instructions, items = from_core(prepared.messages)
        if instructions is not None:
            out["instructions"] = instructions
        else:
            out.pop("instructions", None)
        out["input"] = items
        if prepared.tools and not isinstance(body.get("tools"), list) and codex_wire.item_tools(items):
            # tools stay where the client put them; recall_artifact joins them there
            recall = [t for t in prepared.tools if tool_name(t) == RECALL_TOOL_NAME]
            out["input"] = codex_wire.add_to_items(items, tools_from_core(recall)[0]) if recall else items
        elif prepared.tools:
            out["tools"] = tools_from_core(prepared.tools)
    key = body.get("prompt_cache_key") or (prepared.session_id if prepared else session_id)
    if key:
        out["prompt_cache_key"] = key
    return out


# ---------------------------------------------------------------------------
# The Api
# ---------------------------------------------------------------------------
class ResponsesApi:
    """OpenAI Responses; see the module docstring."""

    name = "responses"
    path = "/responses"

    def parse(self, raw: bytes) -> dict[str, Any]:
        return check_body(wire.parse_body(raw))

    def streams(self, body: Mapping[str, Any]) -> bool:
        return body.get("stream") is True

    def session_hint(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        return resolve_session_id(body, headers)

    def to_core(self, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return to_core(body)

    def managed(self, body: Mapping[str, Any]) -> bool:
        return not body.get("previous_response_id")

    def upstream_body(
        self, body: Mapping[str, Any], prepared: Prepared | None, session_id: str | None
    ) -> dict[str, Any]:
        return upstream_body(body, prepared, session_id)

    def headers(
        self, base: dict[str, str], incoming: Mapping[str, str], api_key: str | None
    ) -> dict[str, str]:
        """The client's own headers (Codex's session and `x-codex-*`), then the proxy's."""
        own = {k.lower() for k in base}
        passed = codex_wire.passthrough_headers(incoming)
        return {**{k: v for k, v in passed.items() if k not in own}, **base}

    def recall_calls(self, response: Mapping[str, Any]) -> list[tuple[str, str, str]] | None:
        """The turn's tool calls when one is a recall; None for any answer of another shape
        (relayed to the client as it came: the proxy only continues turns it can read)."""
        output = response.get("output")
        if not isinstance(output, list) or not all(isinstance(x, Mapping) for x in output):
            return None
        calls = [x for x in output if x.get("type") in CALLS]
        if not any(c.get("type") == "function_call" and c.get("name") == RECALL_TOOL_NAME for c in calls):
            return None
        if not all(isinstance(c.get("call_id"), str) and isinstance(c.get("name"), str) for c in calls):
            return None
        args = [c.get("arguments", "") for c in calls]
        return [(c["call_id"], c["name"], a if isinstance(a, str) else "") for c, a in zip(calls, args)]

    def continue_body(
        self, out: Mapping[str, Any], response: Mapping[str, Any], results: Mapping[str, str]
    ) -> dict[str, Any]:
        output = list(response.get("output") or [])
        answers = [{"type": OUTPUTS[CALLS.index(c["type"])], "call_id": c["call_id"],
                    "output": results.get(c["call_id"], DEFERRED)}
                   for c in output if c.get("type") in CALLS]  # fmt: skip
        inp = out.get("input")
        items = [{"role": "user", "content": inp}] if isinstance(inp, str) else list(inp or [])
        return {**out, "input": [*items, *output, *answers]}

    def visible(self, response: Mapping[str, Any]) -> list[Any]:
        output = list(response.get("output") or [])
        cut = next((i for i, x in enumerate(output) if x.get("type") in CALLS), len(output))
        return output[:cut]

    def merge(self, shown: list[Any], response: Mapping[str, Any]) -> dict[str, Any]:
        return {**response, "output": [*shown, *_as_list(response.get("output"))]}

    def relay(self) -> ResponsesRelay:
        return ResponsesRelay()


_ENDS = ("response.completed", "response.failed", "response.incomplete")
_STARTS = ("response.created", "response.in_progress", "response.queued")


def _event(obj: Mapping[str, Any]) -> bytes:
    return (
        f"event: {obj.get('type')}\ndata: ".encode() + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"
    )


class ResponsesRelay:
    """One client response from one or more upstream streamed turns.

    Items are relayed until the turn's first tool call item; its events and the
    rest are held until `response.completed`. Later turns' events get output indexes
    after the items the client has, one running `sequence_number`, and the first
    turn's response id; the final `response.completed` lists every item shown.
    """

    def __init__(self) -> None:
        self.ended = False
        self.failed = False
        self._seq = 0
        self._offset = 0
        self._shown: list[Any] = []
        self._id: str | None = None
        self._turns = 0
        self._turn()

    def _turn(self) -> None:
        self._cut: int | None = None
        self._held: list[dict[str, Any]] = []
        self._response: dict[str, Any] | None = None

    def next_turn(self) -> None:
        output = list((self._response or {}).get("output") or [])
        cut = self._cut if self._cut is not None else len(output)
        self._shown += output[:cut]
        self._offset += cut
        self._turns += 1
        self.ended = False
        self._turn()

    def feed(self, event: bytes) -> list[bytes]:
        obj = sse.event_object(event)
        if obj is None:
            return [event]
        kind = str(obj.get("type"))
        resp = obj.get("response") if isinstance(obj.get("response"), dict) else None
        if kind in _STARTS:
            if self._id is None and resp is not None:
                self._id = resp.get("id")
            if self._turns:
                return []
        if kind == "error":
            self.ended = self.failed = True
        idx = obj.get("output_index")
        if kind == "response.output_item.added" and (obj.get("item") or {}).get("type") in CALLS:
            self._cut = idx if self._cut is None else self._cut
        if kind in _ENDS and resp is not None:
            self.ended = True
            self._response = resp
            obj = {**obj, "response": {**resp, "id": self._id or resp.get("id"),
                                       "output": [*self._shown, *(resp.get("output") or [])]}}  # fmt: skip
        if isinstance(idx, int) and self._offset:
            obj = {**obj, "output_index": idx + self._offset}
        if self._cut is not None and (kind in _ENDS or (isinstance(idx, int) and idx >= self._cut)):
            self._held.append(obj)
            return []
        return [self._emit(obj)]

    def _emit(self, obj: Mapping[str, Any]) -> bytes:
        """The event as sent: numbered in the client's one sequence."""
        if "sequence_number" in obj:
            obj = {**obj, "sequence_number": self._seq}
            self._seq += 1
        return _event(obj)

    def recall_turn(self) -> dict[str, Any] | None:
        if not self.ended or self.failed or self._response is None:
            return None
        return self._response if ResponsesApi().recall_calls(self._response) is not None else None

    def flush(self) -> list[bytes]:
        held, self._held = self._held, []
        return [self._emit(obj) for obj in held]

    def usage(self) -> dict[str, Any] | None:
        u = (self._response or {}).get("usage")
        return dict(u) if isinstance(u, dict) else None

    def error_event(self, message: str, code: str) -> bytes:
        obj = {"type": "error", "code": code, "message": message, "param": None, "sequence_number": self._seq}
        return _event(obj)


def _as_list(value: Any) -> list[Any]:
    """An upstream answer's item list; anything else (it is the upstream's) as one item."""
    return value if isinstance(value, list) else [] if value is None else [value]
