"""`/v1beta/models/{model}:generateContent`, `:streamGenerateContent` and `:countTokens`
(Gemini CLI, the google-genai SDKs): the Gemini API.

Translation is `gemini_wire`'s (in) and `gemini_render`'s (out); this module names the
upstream path, passes the key, and handles the answers on the shared request path
(`translated.Translated`). The upstream is Gemini's host without a version
(`https://generativelanguage.googleapis.com`): the client's version (`v1beta`, `v1`) and
query (`alt=sse`) go on as they came.

A streamed turn is relayed chunk by chunk until its first `functionCall` part; from there
its chunks are held until the turn ends (a `finishReason`): without a recall they go out
as they came, with one the proxy answers it and streams the next turn. A request that
uses an explicit cache (`cachedContent`) is forwarded untouched: its system instruction
and tools live in the cache, and Gemini refuses a request that adds any.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from tokenpilot import Prepared
from tokenpilot.errors import MessageError
from tokenpilot_proxy import gemini_render, gemini_wire, sse, wire
from tokenpilot_proxy.apis import DEFERRED, RECALL_TOOL_NAME, keyed_headers
from tokenpilot_proxy.errors import json_error
from tokenpilot_proxy.request_path import RequestPath
from tokenpilot_proxy.sessions import SessionStats
from tokenpilot_proxy.translated import Translated
from tokenpilot_proxy.upstream import response_headers

log = logging.getLogger("tokenpilot.openclaw")

VERSIONS = ("v1beta", "v1", "v1alpha")
GENERATE, STREAM, COUNT = "generateContent", "streamGenerateContent", "countTokens"
KEY_HEADER = "x-goog-api-key"
FORWARD_HEADERS = ("x-goog-api-client", "x-goog-user-project", "user-agent")


def add_routes(app: web.Application, path: RequestPath) -> None:
    routes = GeminiRoutes(path)
    for version in VERSIONS:
        app.router.add_post(f"/{version}/models/{{target}}", routes.handle)


class GeminiRoutes:
    """One handler for `models/{model}:{method}`: the method picks the answer."""

    def __init__(self, path: RequestPath) -> None:
        self.path = path

    async def handle(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["target"].rpartition(":")
        if not model or method not in (GENERATE, STREAM, COUNT):
            raise web.HTTPNotFound(
                reason=f"the proxy serves {GENERATE}, {STREAM} and {COUNT}; not {method!r}"
            )
        version = request.path.split("/", 2)[1]
        api = GeminiApi(self._upstream_path(version, model, method, request.query_string), method == STREAM)
        if method == COUNT:
            return await self._count(request, api)
        return await Translated(self.path, api).handle(request)

    def _upstream_path(self, version: str, model: str, method: str, query: str) -> str:
        """The client's path and query; the version is the upstream URL's when it ends with one."""
        base = self.path.upstream.base_url.rstrip("/")
        prefix = "" if base.rsplit("/", 1)[-1] in VERSIONS else f"/{version}"
        return f"{prefix}/models/{model}:{method}" + (f"?{query}" if query else "")

    async def _count(self, request: web.Request, api: GeminiApi) -> web.Response:
        """The managed request's size, from the upstream's countTokens, counted on a copy of
        the session (a count commits nothing). Both forms: `contents` at the top, or a whole
        `generateContentRequest`."""
        path = self.path
        raw = await path.read(request)
        body = await path.parse(raw, _parse_count)
        if isinstance(body, web.Response):
            return body
        inner = body.get("generateContentRequest", body)
        history, tools = gemini_wire.to_core(inner)
        prepared: Prepared | None = None
        if api.managed(inner):
            try:
                prepared = await path.pools.prepare(
                    lambda: path.prepare_copy(
                        history, tools, api.session_hint(inner, request.headers), request.headers
                    )  # fmt: skip
                )
            except MessageError as exc:
                return json_error(400, str(exc), type_="invalid_request_error", param="contents")
            except Exception:  # count what the client sent rather than fail the count
                log.exception("tokenpilot: counting failed; counting the Gemini request as sent")
        managed = gemini_render.upstream_body(inner, prepared)
        if "generateContentRequest" in body:
            out = {**body, "generateContentRequest": managed}
        else:  # countTokens takes contents only at the top: the rest would be refused
            out = {k: v for k, v in managed.items() if k in body or k == "contents"}
        headers = api.headers(path.upstream_headers(request), request.headers, path.upstream.api_key)
        resp = await path.send(out, headers, SessionStats(), path=api.path)
        if isinstance(resp, web.Response):
            return resp
        try:
            payload = await resp.read()
        except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
            return json_error(502, f"upstream response broken: {exc}", type_="upstream_error",
                              code="upstream_broken")  # fmt: skip
        finally:
            resp.release()
        return web.Response(status=resp.status, body=payload, headers=response_headers(resp))


def _parse_count(raw: bytes) -> dict[str, Any]:
    body = wire.parse_body(raw)
    if isinstance(body, dict) and "generateContentRequest" in body:
        inner = body["generateContentRequest"]
        if not isinstance(inner, dict):
            raise wire.BadRequest(
                f"'generateContentRequest' must be an object, got {wire.json_kind(inner)}",
                "generateContentRequest",
            )
        return {**body, "generateContentRequest": gemini_wire.check_body(inner)}
    if isinstance(body, dict) and "contents" not in body:
        body = {**body, "contents": []}
    return gemini_wire.check_body(body)


@dataclass(slots=True)
class GeminiApi:
    """Gemini `generateContent` for one request (its upstream path and whether it streams)."""

    path: str
    streaming: bool = False
    name: str = "gemini"

    def parse(self, raw: bytes) -> dict[str, Any]:
        return gemini_wire.check_body(wire.parse_body(raw))

    def streams(self, body: Mapping[str, Any]) -> bool:
        return self.streaming

    def session_hint(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        return gemini_wire.session_hint(body, headers)

    def to_core(self, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return gemini_wire.to_core(body)

    def managed(self, body: Mapping[str, Any]) -> bool:
        return "cachedContent" not in body

    def upstream_body(
        self, body: Mapping[str, Any], prepared: Prepared | None, session_id: str | None
    ) -> dict[str, Any]:
        return gemini_render.upstream_body(body, prepared)

    def headers(
        self, base: dict[str, str], incoming: Mapping[str, str], api_key: str | None
    ) -> dict[str, str]:
        """Gemini's key is `x-goog-api-key` (the proxy's own key, else the client's)."""
        return keyed_headers(base, incoming, api_key, KEY_HEADER, FORWARD_HEADERS)

    def recall_calls(self, response: Mapping[str, Any]) -> list[tuple[str, str, str]] | None:
        """The first candidate's calls when one is a recall (ids made up where Gemini gave
        none: the continuation pairs them by position); None for any other answer."""
        parts = _parts(response)
        if parts is None:
            return None
        calls = [p["functionCall"] for p in parts if isinstance(p.get("functionCall"), Mapping)]
        if not any(c.get("name") == RECALL_TOOL_NAME for c in calls):
            return None
        if not all(isinstance(c.get("name"), str) and isinstance(c.get("args", {}), (dict, type(None)))
                   for c in calls):  # fmt: skip
            return None
        return [(f"{k}", c["name"], json.dumps(c.get("args") or {})) for k, c in enumerate(calls)]

    def continue_body(
        self, out: Mapping[str, Any], response: Mapping[str, Any], results: Mapping[str, str]
    ) -> dict[str, Any]:
        """The request again, with the model's turn and one response per call, in order."""
        parts = _parts(response) or []
        calls = [p["functionCall"] for p in parts if isinstance(p.get("functionCall"), Mapping)]
        answers = []
        for k, c in enumerate(calls):
            fr: dict[str, Any] = {"name": c.get("name")}
            if isinstance(c.get("id"), str):
                fr["id"] = c["id"]
            fr["response"] = {"output": results[f"{k}"]} if f"{k}" in results else {"error": DEFERRED}
            answers.append({"functionResponse": fr})
        turn = {"role": "model", "parts": parts}
        return {**out, "contents": [*out["contents"], turn, {"role": "user", "parts": answers}]}

    def visible(self, response: Mapping[str, Any]) -> list[Any]:
        parts = _parts(response) or []
        cut = next((i for i, p in enumerate(parts) if "functionCall" in p), len(parts))
        return parts[:cut]

    def merge(self, shown: list[Any], response: Mapping[str, Any]) -> dict[str, Any]:
        candidates = response.get("candidates")
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], Mapping):
            return dict(response)
        first = dict(candidates[0])
        content = dict(first.get("content") or {"role": "model"})
        content["parts"] = [*shown, *(content.get("parts") or [])]
        first["content"] = content
        return {**response, "candidates": [first, *candidates[1:]]}

    def relay(self) -> GeminiRelay:
        return GeminiRelay()


def _parts(response: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The first candidate's parts, when every one is an object (else None: not readable)."""
    candidates = response.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], Mapping):
        return None
    content = candidates[0].get("content")
    parts = content.get("parts") if isinstance(content, Mapping) else None
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        return None
    return parts


STATUS_NAMES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    405: "INVALID_ARGUMENT", 408: "DEADLINE_EXCEEDED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}  # fmt: skip


def google_error(status: int, message: str) -> dict[str, Any]:
    """Google's error body: the google-genai SDKs and Gemini CLI read `error.message`."""
    return {"error": {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}}


def google_shaped(resp: web.StreamResponse) -> web.StreamResponse:
    """One of the proxy's own JSON errors (OpenAI-shaped, `error.type`) in Google's shape;
    anything else, the upstream's errors included, as it is."""
    if not isinstance(resp, web.Response) or resp.status < 400 or not isinstance(resp.body, bytes):
        return resp
    try:
        err = json.loads(resp.body).get("error")
    except (ValueError, AttributeError):
        return resp
    if not isinstance(err, dict) or "type" not in err or "status" in err:
        return resp
    headers = {k: v for k, v in resp.headers.items() if k.lower() not in ("content-length", "content-type")}
    return web.json_response(google_error(resp.status, str(err.get("message"))), status=resp.status,
                             headers=headers)  # fmt: skip


class GeminiRelay:
    """One client stream from one or more upstream streamed turns (module docstring)."""

    def __init__(self) -> None:
        self.ended = False
        self.failed = False
        self._turn()

    def _turn(self) -> None:
        self._parts: list[dict[str, Any]] = []
        self._last: dict[str, Any] = {}  # the turn's last chunk, its parts aside
        self._usage: dict[str, Any] = {}
        self._holding = False
        self._held: list[bytes] = []

    def next_turn(self) -> None:
        self.ended = False
        self._turn()

    def feed(self, event: bytes) -> list[bytes]:
        obj = sse.event_object(event)
        if obj is None:
            return [event]
        if isinstance(obj.get("error"), Mapping):
            self.ended = self.failed = True
            return [*self._held, event]
        if isinstance(obj.get("usageMetadata"), Mapping):
            self._usage = dict(obj["usageMetadata"])
        self._last = {k: v for k, v in obj.items() if k != "candidates"}
        parts = _parts(obj) or []
        self._parts += parts
        candidates = obj.get("candidates")
        first = candidates[0] if isinstance(candidates, list) and candidates else None
        if isinstance(first, Mapping):
            self._last["candidate"] = {k: v for k, v in first.items() if k != "content"}
            if first.get("finishReason"):
                self.ended = True
        elif isinstance(obj.get("promptFeedback"), Mapping) and obj["promptFeedback"].get("blockReason"):
            self.ended = True  # a refused prompt: no candidate comes
        if self._holding:
            self._held.append(event)
            return []
        cut = next((i for i, p in enumerate(parts) if "functionCall" in p), None)
        if cut is None:
            return [event]
        self._holding = True
        if cut == 0:
            self._held.append(event)
            return []
        before, after = _split_chunk(obj, cut)
        self._held.append(after)
        return [before]

    def recall_turn(self) -> dict[str, Any] | None:
        if not self.ended or self.failed:
            return None
        candidate = {**self._last.get("candidate", {}), "content": {"role": "model", "parts": self._parts}}
        turn = {**{k: v for k, v in self._last.items() if k != "candidate"}, "candidates": [candidate]}
        return turn if GeminiApi("").recall_calls(turn) is not None else None

    def flush(self) -> list[bytes]:
        held, self._held = self._held, []
        return held

    def usage(self) -> dict[str, Any] | None:
        return dict(self._usage) or None

    def error_event(self, message: str, code: str) -> bytes:
        status = 504 if "timeout" in code else 502 if code.startswith("upstream") else 500
        return _event(google_error(status, f"{message} ({code})"))


def _event(obj: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _split_chunk(obj: Mapping[str, Any], cut: int) -> tuple[bytes, bytes]:
    """A chunk whose first candidate's parts are cut at `cut`: (the parts before, shown now;
    the rest, held), each a whole chunk."""
    first = dict(obj["candidates"][0])
    content = dict(first["content"])
    parts = content["parts"]

    shown = {k: v for k, v in first.items() if k not in ("finishReason", "finishMessage")}
    before = {k: v for k, v in obj.items() if k != "usageMetadata"}  # said once, by the last chunk
    before["candidates"] = [{**shown, "content": {**content, "parts": parts[:cut]}}]
    after = {
        **obj,
        "candidates": [{**first, "content": {**content, "parts": parts[cut:]}}, *obj["candidates"][1:]],
    }
    return _event(before), _event(after)
