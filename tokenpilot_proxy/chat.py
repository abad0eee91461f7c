"""`POST /v1/chat/completions` (OpenClaw, OpenAI SDKs): the core's own wire format.

No translation: the messages are the core's. What is the chat API's alone is OpenClaw's
per-call context (`wire.split_per_call`: regenerated each call, never saved, sent at
the very end), and the usage-only stream chunk, dropped unless the client asked for it.
The model's `recall_artifact` calls go back to the client, whose plugin runs them.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import aiohttp
from aiohttp import web

from tokenpilot_proxy import sse, wire
from tokenpilot_proxy.errors import internal_error_message
from tokenpilot_proxy.request_path import RequestPath, StreamBroken, is_event_stream, upstream_chunks
from tokenpilot_proxy.sessions import SessionStats, resolve_session_id

log = logging.getLogger("tokenpilot.openclaw")


def add_routes(app: web.Application, path: RequestPath) -> None:
    app.router.add_post("/v1/chat/completions", ChatCompletions(path).handle)


def chat_body(raw: bytes) -> dict[str, Any]:
    """Parse and check a chat request body (off the event loop: a big body takes a while)."""
    return wire.check_chat_body(wire.parse_body(raw))


class ChatCompletions:
    """The chat completions handler, on the shared `RequestPath`."""

    def __init__(self, path: RequestPath) -> None:
        self.path = path

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = self.path
        raw = await path.read(request)  # outside the slot: a slow sender holds none
        async with path.trimmer.slot(len(raw)):  # huge bodies parsed and prepared a few at a time
            # any Content-Type: OpenAI's SDKs send JSON, and so does a bare `curl -d`
            body = await path.parse(raw, chat_body)
            if isinstance(body, web.Response):
                return body
            del raw  # parsed: a huge body's bytes go now, not after the upstream's answer
            history, per_call = wire.split_per_call(body["messages"])
            sid = resolve_session_id(body, request.headers)
            call = await path.begin(history, body.get("tools"), sid, request.headers, body.get("model"))
        if isinstance(call, web.Response):
            return call
        out = wire.upstream_body(body, call.prepared, per_call, call.session_id)
        stream, wants_usage = body.get("stream") is True, wire.client_wants_usage(body)
        del body, history, per_call  # the client's messages: `out` holds what goes on
        stats = call.stats
        del call
        headers = path.upstream_headers(request)
        if stream:
            return await self._stream(request, out, headers, stats, wants_usage)
        return await self._complete(out, headers, stats)

    async def _complete(
        self, out: dict[str, Any], headers: dict[str, str], stats: SessionStats
    ) -> web.Response:
        resp = await self.path.send(out, headers, stats)
        if isinstance(resp, web.Response):
            return resp
        try:
            return await self.path.relay_whole(resp, stats)
        finally:
            resp.release()

    async def _stream(
        self,
        request: web.Request,
        out: dict[str, Any],
        headers: dict[str, str],
        stats: SessionStats,
        wants_usage: bool,
    ) -> web.StreamResponse:
        resp = await self.path.send(out, {**headers, "Accept": "text/event-stream"}, stats)
        if isinstance(resp, web.Response):
            return resp
        try:
            if not is_event_stream(resp):
                return await self.path.relay_whole(resp, stats)
            client = await self.path.open_stream(request, resp)
            try:
                await self._relay_events(resp, client, stats, wants_usage)
            except ConnectionResetError:
                log.info("tokenpilot: client went away during a stream")
            except Exception as exc:  # a proxy bug mid-stream: the stream still ends with an error event
                stats.errors += 1
                log.error("tokenpilot: internal error during a chat stream", exc_info=exc)
                with contextlib.suppress(ConnectionError):
                    await client.write(sse.error_event(internal_error_message(exc), code="internal_error",
                                                       type_="server_error"))  # fmt: skip
            return client
        finally:
            resp.release()

    async def _relay_events(
        self, resp: aiohttp.ClientResponse, client: web.StreamResponse, stats: SessionStats, wants_usage: bool
    ) -> None:
        """Pass events through one by one; end a broken stream with an error event."""
        splitter = sse.SSESplitter()
        done = finished = False
        try:
            async for chunk in upstream_chunks(resp, self.path.settings.read_timeout_s):
                for event in splitter.feed(chunk):
                    data = sse.event_data(event)
                    if data == sse.DONE:
                        done = True
                    elif data is not None and b'"usage"' in event:
                        obj = sse.parse_chunk(data)
                        if obj is not None and isinstance(obj.get("usage"), dict):
                            stats.record_usage(obj["usage"])
                            if not wants_usage and not obj.get("choices"):
                                continue  # the client did not ask for the usage-only chunk
                    finished = finished or sse.has_finish_reason(event)
                    await client.write(event)
        except StreamBroken as exc:
            stats.errors += 1
            await client.write(sse.error_event(str(exc), code=exc.code))
            return
        if not done and not finished:
            stats.errors += 1
            msg = "upstream closed the stream before it finished"
            await client.write(sse.error_event(msg, code="upstream_stream_interrupted"))
            return
        await client.write_eof()
