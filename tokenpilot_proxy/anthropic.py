"""`/v1/messages` and `/v1/messages/count_tokens` (Claude Code): the Anthropic Messages API.

Translation is `anthropic_wire`'s (in) and `anthropic_render`'s (out, with the cache
breakpoints); this module handles the answers, on the shared request path
(`translated.Translated`). A streamed turn is relayed event by event until its first `tool_use` block; from there
on its events are held until the turn ends: without a recall they go out as they
came, with one the proxy answers it and relays the next turn's blocks renumbered after
the ones the client already has, as one message (one `message_start`, one
`message_stop`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp import web

from tokenpilot import Prepared
from tokenpilot.errors import MessageError
from tokenpilot_proxy import anthropic_render, anthropic_wire, sse, wire
from tokenpilot_proxy.apis import DEFERRED, RECALL_TOOL_NAME, keyed_headers
from tokenpilot_proxy.errors import json_error
from tokenpilot_proxy.request_path import RequestPath
from tokenpilot_proxy.sessions import SessionStats
from tokenpilot_proxy.translated import Translated
from tokenpilot_proxy.upstream import response_headers
from tokenpilot_proxy.wire import MAX_UPSTREAM_JSON_DEPTH, loads_bounded

log = logging.getLogger("tokenpilot.openclaw")

DEFAULT_VERSION = "2023-06-01"
FORWARD_HEADERS = ("anthropic-version", "anthropic-beta")


def add_routes(app: web.Application, path: RequestPath) -> None:
    app.router.add_post("/v1/messages", Translated(path, AnthropicApi()).handle)
    app.router.add_post("/v1/messages/count_tokens", CountTokens(path).handle)


class CountTokens:
    """The managed request's size, from the upstream's count_tokens. Counted on a copy of
    the session, so a count commits nothing (Claude Code counts what it never sends)."""

    def __init__(self, path: RequestPath) -> None:
        self.path = path
        self.api = AnthropicApi()

    async def handle(self, request: web.Request) -> web.Response:
        path, api = self.path, self.api
        parsed = await Translated(path, api).body(request)
        if isinstance(parsed, web.Response):
            return parsed
        body, history, tools, sid = parsed
        prepared: Prepared | None = None
        try:
            prepared = await path.pools.prepare(
                lambda: path.prepare_copy(history, tools, sid, request.headers)
            )
        except MessageError as exc:
            return json_error(400, str(exc), type_="invalid_request_error", param="messages")
        except Exception:  # count what the client sent rather than fail the count
            log.exception("tokenpilot: counting failed for session %s; counting the request as sent", sid)
        out = api.upstream_body(body, prepared, sid)  # the client's keys: it knows what counts take
        headers = api.headers(path.upstream_headers(request), request.headers, path.upstream.api_key)
        resp = await path.send(out, headers, SessionStats(), path="/messages/count_tokens")
        if isinstance(resp, web.Response):
            return resp
        try:
            payload = await resp.read()
        except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
            return json_error(
                502, f"upstream response broken: {exc}", type_="upstream_error", code="upstream_broken"
            )
        finally:
            resp.release()
        return web.Response(status=resp.status, body=payload, headers=response_headers(resp))


class AnthropicApi:
    """Anthropic Messages; see the module docstring."""

    name = "anthropic"
    path = "/messages"

    def parse(self, raw: bytes) -> dict[str, Any]:
        return anthropic_wire.check_body(wire.parse_body(raw))

    def streams(self, body: Mapping[str, Any]) -> bool:
        return body.get("stream") is True

    def session_hint(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        return anthropic_wire.session_hint(body, headers)

    def to_core(self, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return anthropic_wire.to_core(body)

    def managed(self, body: Mapping[str, Any]) -> bool:
        return True

    def upstream_body(
        self, body: Mapping[str, Any], prepared: Prepared | None, session_id: str | None
    ) -> dict[str, Any]:
        return anthropic_render.upstream_body(body, prepared)

    def headers(
        self, base: dict[str, str], incoming: Mapping[str, str], api_key: str | None
    ) -> dict[str, str]:
        """Anthropic's auth is `x-api-key` (an OAuth client's `Authorization` is passed on)."""
        out = keyed_headers(base, incoming, api_key, "x-api-key", FORWARD_HEADERS)
        out.setdefault("anthropic-version", DEFAULT_VERSION)
        return out

    def recall_calls(self, response: Mapping[str, Any]) -> list[tuple[str, str, str]] | None:
        """The turn's tool calls when one is a recall; None for any answer of another shape
        (relayed to the client as it came: the proxy only continues turns it can read)."""
        content = response.get("content")
        if not isinstance(content, list) or not all(isinstance(b, Mapping) for b in content):
            return None
        uses = [b for b in content if b.get("type") == "tool_use"]
        if not any(b.get("name") == RECALL_TOOL_NAME for b in uses):
            return None
        if not all(isinstance(b.get("id"), str) and isinstance(b.get("name"), str) for b in uses):
            return None
        # `input` was read within MAX_UPSTREAM_JSON_DEPTH (`wire.loads_bounded`): it writes back
        return [(b["id"], b["name"], json.dumps(b.get("input", {}))) for b in uses]

    def continue_body(
        self, out: Mapping[str, Any], response: Mapping[str, Any], results: Mapping[str, str]
    ) -> dict[str, Any]:
        """The request again, with the recall turn and its results appended (no new breakpoint)."""
        content = list(response.get("content") or [])
        answers = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": results.get(b["id"], DEFERRED),
             **({} if b["id"] in results else {"is_error": True})}
            for b in content if b.get("type") == "tool_use"
        ]  # fmt: skip
        return {**out, "messages": [*out["messages"], {"role": "assistant", "content": content},
                                    {"role": "user", "content": answers}]}  # fmt: skip

    def visible(self, response: Mapping[str, Any]) -> list[Any]:
        content = list(response.get("content") or [])
        cut = next((i for i, b in enumerate(content) if b.get("type") == "tool_use"), len(content))
        return content[:cut]

    def merge(self, shown: list[Any], response: Mapping[str, Any]) -> dict[str, Any]:
        return {**response, "content": [*shown, *_as_list(response.get("content"))]}

    def relay(self) -> AnthropicRelay:
        return AnthropicRelay()


def _event(obj: Mapping[str, Any]) -> bytes:
    return (
        f"event: {obj.get('type')}\ndata: ".encode() + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"
    )


class AnthropicRelay:
    """One client message from one or more upstream streamed turns (module docstring)."""

    def __init__(self) -> None:
        self.ended = False
        self.failed = False
        self._offset = 0  # blocks the client already has from earlier turns
        self._started = False
        self._turn()

    def _turn(self) -> None:
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}
        self._usage: dict[str, Any] = {}
        self._cut: int | None = None  # index of the turn's first tool_use: held from there
        self._held: list[bytes] = []
        self._stop: dict[str, Any] = {}

    def next_turn(self) -> None:
        self._offset += self._cut if self._cut is not None else len(self._blocks)
        self.ended = False
        self._turn()

    def feed(self, event: bytes) -> list[bytes]:
        obj = sse.event_object(event)
        if obj is None:
            return [event]
        kind = obj.get("type")
        if kind == "message_start":
            self._message = dict(obj.get("message") or {})
            self._usage.update(self._message.get("usage") or {})
            if self._started:
                return []
            self._started = True
            return [event]
        if kind == "error":
            self.ended = self.failed = True
            return [*self._held, event]
        if kind == "message_delta":
            self._usage.update(obj.get("usage") or {})
            self._stop = dict(obj.get("delta") or {})
        elif kind == "message_stop":
            self.ended = True
        elif kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            self._track(kind, obj)
            if self._offset and isinstance(obj.get("index"), int):
                event = _event({**obj, "index": obj["index"] + self._offset})
        if self._cut is not None and (kind in ("message_delta", "message_stop") or _index(obj) >= self._cut):
            self._held.append(event)
            return []
        return [event]

    def _track(self, kind: str, obj: Mapping[str, Any]) -> None:
        i = _index(obj)
        if kind == "content_block_start":
            block = dict(obj.get("content_block") or {})
            self._blocks[i] = block
            if block.get("type") == "tool_use" and self._cut is None:
                self._cut = i
            return
        block = self._blocks.setdefault(i, {})
        if kind == "content_block_stop":
            if i in self._json:
                text = self._json.pop(i)
                try:
                    block["input"] = loads_bounded(text, MAX_UPSTREAM_JSON_DEPTH) if text.strip() else {}
                except ValueError:  # not JSON, or nested too deep to read (`wire.TooDeep`)
                    block["input"] = {"_unparsed": text}
            return
        delta = obj.get("delta") or {}
        dt = delta.get("type")
        if dt == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
        elif dt == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
        elif dt == "signature_delta":
            block["signature"] = delta.get("signature", "")
        elif dt == "input_json_delta":
            self._json[i] = self._json.get(i, "") + delta.get("partial_json", "")
        elif dt == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))

    def recall_turn(self) -> dict[str, Any] | None:
        if not self.ended or self.failed:
            return None
        content = [self._blocks[i] for i in sorted(self._blocks)]
        turn = {**self._message, "content": content, **self._stop}
        return turn if AnthropicApi().recall_calls(turn) is not None else None

    def flush(self) -> list[bytes]:
        held, self._held = self._held, []
        return held

    def usage(self) -> dict[str, Any] | None:
        return dict(self._usage) or None

    def error_event(self, message: str, code: str) -> bytes:
        return _event({"type": "error", "error": {"type": "api_error", "message": message, "code": code}})


def _index(obj: Mapping[str, Any]) -> int:
    i = obj.get("index")
    return i if isinstance(i, int) else -1


def _as_list(value: Any) -> list[Any]:
    """An upstream answer's item list; anything else (it is the upstream's) as one item."""
    return value if isinstance(value, list) else [] if value is None else [value]
