"""The handler of every API the proxy translates (`apis.Api`: Anthropic Messages, Responses).

Parse and translate the request (the API module), take the shared `RequestPath` (session,
lock, prepare, send), and answer, whole or streamed, running the model's
`recall_artifact` calls in between (`apis.RecallTurns`): clients such as Claude Code and
Codex have no plugin to run them.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import aiohttp
from aiohttp import web

from tokenpilot.messages.model import tool_name
from tokenpilot_proxy import sse
from tokenpilot_proxy.apis import MAX_RECALL_ROUNDS, RECALL_TOOL_NAME, Api, RecallTurns, StreamRelay
from tokenpilot_proxy.errors import bad_request, internal_error_message
from tokenpilot_proxy.request_path import RequestPath, StreamBroken, is_event_stream, upstream_chunks
from tokenpilot_proxy.sessions import SessionStats
from tokenpilot_proxy.wire import BadRequest

log = logging.getLogger("tokenpilot.openclaw")


class Translated:
    """`handle`: one request of a translated API, on the shared `RequestPath`."""

    def __init__(self, path: RequestPath, api: Api) -> None:
        self.path = path
        self.api = api

    async def body(
        self, request: web.Request
    ) -> tuple[dict[str, Any], list[Any], Any, str | None] | web.Response:
        """(body, chat history, chat tools, named session) of a request, or its 400."""
        api = self.api
        body = await self.path.parse(await self.path.read(request), api.parse)
        if isinstance(body, web.Response):
            return body
        try:
            history, tools = api.to_core(body)
        except BadRequest as exc:
            return bad_request(exc)
        return body, history, tools, api.session_hint(body, request.headers)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Prepare, forward and answer one request (see the module docstring)."""
        api, path = self.api, self.path
        parsed = await self.body(request)
        if isinstance(parsed, web.Response):
            return parsed
        body, history, tools, sid = parsed
        call = await path.begin(
            history, tools, sid, request.headers, body.get("model"), managed=api.managed(body)
        )
        if isinstance(call, web.Response):
            return call
        stats = call.stats
        out = api.upstream_body(body, call.prepared, call.session_id)
        headers = api.headers(path.upstream_headers(request), request.headers, path.upstream.api_key)
        # a client that lists recall_artifact itself runs it (as OpenClaw's plugin does)
        rounds = 0 if any(tool_name(t) == RECALL_TOOL_NAME for t in tools or []) else MAX_RECALL_ROUNDS
        turns = RecallTurns(path.recall, api, call.session_id)
        if api.streams(body):
            return await self._stream(request, turns, out, headers, stats, rounds)
        for n in range(rounds + 1):
            resp = await path.send(out, headers, stats, path=api.path)
            if isinstance(resp, web.Response):
                return resp
            try:
                whole = await path.relay_whole(resp, stats)
            finally:
                resp.release()
            nxt = await turns.after(whole, out) if n < rounds else None
            if nxt is None:
                break
            out = nxt
        return turns.answer(whole)

    async def _stream(
        self,
        request: web.Request,
        turns: RecallTurns,
        out: dict[str, Any],
        headers: dict[str, str],
        stats: SessionStats,
        max_rounds: int,
    ) -> web.StreamResponse:
        """Relay a streamed answer event by event; a recall turn is answered and continued."""
        relay = self.api.relay()
        started: list[web.StreamResponse] = []  # the client's stream, once its head is sent
        try:
            return await self._stream_turns(request, turns, out, headers, stats, max_rounds, relay, started)
        except Exception as exc:  # a proxy bug: a started stream still ends with an error event
            if not started:
                raise  # the middleware answers it as JSON
            stats.errors += 1
            log.error("tokenpilot: internal error during a %s stream", self.api.name, exc_info=exc)
            with contextlib.suppress(ConnectionError):
                await started[0].write(relay.error_event(internal_error_message(exc), "internal_error"))
            return started[0]

    async def _stream_turns(
        self,
        request: web.Request,
        turns: RecallTurns,
        out: dict[str, Any],
        headers: dict[str, str],
        stats: SessionStats,
        max_rounds: int,
        relay: StreamRelay,
        started: list[web.StreamResponse],
    ) -> web.StreamResponse:
        """`_stream`'s turns; the client's stream goes into `started` once prepared."""
        headers = {**headers, "Accept": "text/event-stream"}
        client: web.StreamResponse | None = None
        for rounds in range(max_rounds + 1):
            resp = await self.path.send(out, headers, stats, path=self.api.path)
            if isinstance(resp, web.Response):
                if client is None:
                    return resp
                await client.write(relay.error_event("upstream failed during a recall", "upstream_error"))
                return client
            try:
                if not is_event_stream(resp):
                    whole = await self.path.relay_whole(resp, stats)
                    if client is None:
                        return whole
                    await client.write(
                        relay.error_event(f"upstream answered {whole.status}", "upstream_error")
                    )
                    return client
                if client is None:
                    client = await self.path.open_stream(request, resp)
                    started.append(client)
                if not await self._relay_turn(resp, client, relay, stats):
                    return client
            except ConnectionResetError:
                log.info("tokenpilot: client went away during a stream")
                return client or web.Response(status=499)
            finally:
                resp.release()
            recall = relay.recall_turn() if rounds < max_rounds else None
            if recall is None:
                try:
                    for event in relay.flush():
                        await client.write(event)
                    await client.write_eof()
                except ConnectionResetError:  # Codex closes right after response.completed
                    log.debug("tokenpilot: client closed the stream after its last event")
                return client
            out = await turns.continued(out, recall)
            relay.next_turn()
        return client  # pragma: no cover - the loop returns

    async def _relay_turn(
        self,
        resp: aiohttp.ClientResponse,
        client: web.StreamResponse,
        relay: StreamRelay,
        stats: SessionStats,
    ) -> bool:
        """One upstream stream through `relay`; False when it ended in an error (said to the client)."""
        splitter = sse.SSESplitter()
        try:
            async for chunk in upstream_chunks(resp, self.path.settings.read_timeout_s):
                for event in splitter.feed(chunk):
                    for out in relay.feed(event):
                        await client.write(out)
        except StreamBroken as exc:
            stats.errors += 1
            await client.write(relay.error_event(str(exc), exc.code))
            return False
        if (usage := relay.usage()) is not None:
            stats.record_usage(usage)
        if relay.failed:
            stats.errors += 1
            return False
        if not relay.ended:
            stats.errors += 1
            await client.write(
                relay.error_event(
                    "upstream closed the stream before it finished", "upstream_stream_interrupted"
                )
            )
            return False
        return True
