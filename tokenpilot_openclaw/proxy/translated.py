"""The proxy's `/v1/messages`, `/v1/messages/count_tokens` and `/v1/responses` routes.

One handler serves every non-chat API (`apis.Api`): parse and translate the request
(`anthropic_api`, `responses_api`), prepare it with the proxy's own `_prepare` (so state,
stats and saving are the chat path's), send it with `_send`, and answer, whole or
streamed, running the model's `recall_artifact` calls in between (`apis.RecallTurns`).
Kept apart from `proxy.py`, which is the chat path and the proxy's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp import web

from tokenpilot import Prepared, TokenPilot
from tokenpilot.errors import MessageError
from tokenpilot.messages import tool_name

from . import sse, timeline, wire
from .anthropic import AnthropicApi
from .apis import MAX_RECALL_ROUNDS, RECALL_TOOL_NAME, Api, RecallTurns, StreamRelay
from .app import Proxy, _StreamBroken, _upstream_chunks, internal_error_message, json_error
from .memtrim import read_body
from .pools import PoolBusy
from .responses import ResponsesApi
from .sessions import SessionStats
from .upstream import response_headers

log = logging.getLogger("tokenpilot.openclaw")


class ApiRoutes:
    """Handlers for the non-chat APIs, on top of a `Proxy` (its state, upstream and stats)."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy

    async def messages(self, request: web.Request) -> web.StreamResponse:
        """`POST /v1/messages` (Claude Code): managed like a chat request (`anthropic_api`)."""
        return await self._api_call(request, AnthropicApi())

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """`POST /v1/responses` (Codex, OpenClaw's openai-responses): see `responses_api`."""
        return await self._api_call(request, ResponsesApi())

    async def count_tokens(self, request: web.Request) -> web.Response:
        """The managed request's size, from the upstream's count_tokens. Counted on a copy
        of the session, so a count commits nothing (Claude Code counts what it never sends)."""
        api = AnthropicApi()
        parsed = await self._api_body(request, api)
        if isinstance(parsed, web.Response):
            return parsed
        body, history, tools, sid = parsed
        prepared: Prepared | None = None
        try:
            prepared = await self.proxy.pools.prepare(
                functools.partial(self._prepare_copy, history, tools, sid, request.headers)
            )
        except MessageError as exc:
            return json_error(400, str(exc), type_="invalid_request_error", param="messages")
        except Exception:  # count what the client sent rather than fail the count
            log.exception("tokenpilot: counting failed for session %s; counting the request as sent", sid)
        out = api.upstream_body(body, prepared, sid)  # the client's keys: it knows what counts take
        headers = api.headers(self._upstream_headers(request), request.headers, self.proxy.upstream.api_key)
        resp = await self.proxy._send(out, headers, SessionStats(), path="/messages/count_tokens")
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

    def _prepare_copy(
        self, history: list[Any], tools: Any, sid: str | None, headers: Mapping[str, str]
    ) -> Prepared:
        """`prepare` on a throw-away TokenPilot holding a copy of the session (same store),
        copied under the session lock with the newest state another replica wrote."""
        proxy = self.proxy
        sid = sid or proxy._derive_session_id(history, headers)
        with proxy._session_lock(sid):
            proxy._ensure_resident(sid)  # evicted from memory: read back first
            if proxy.state is not None and proxy.state.shared:
                proxy._refresh_or_note(sid)
            exported = proxy.pilot.export_session(sid) if sid in proxy.pilot.session_ids else None
        scratch = TokenPilot(proxy.pilot.config, store=proxy.pilot.store, lifecycle=False)
        if exported is not None:
            scratch.import_session(exported)
        return scratch.prepare(history, tools, session_id=sid)

    async def _recall(self, arguments: str, sid: str) -> str:
        """The model's `recall_artifact` call, answered with the newest state of the session
        (a recall changes state: the recall gate counts it, and other replicas must see it).
        Runs on the recall pool; when that is full the model is told to try again later."""
        proxy = self.proxy
        proxy.note_recall(sid)
        try:
            return await proxy.pools.recall.run(
                lambda: proxy._in_session(sid, lambda: proxy.pilot.execute_recall(arguments, session_id=sid))
            )
        except PoolBusy as exc:
            return f"[tokenpilot: {exc}; call {RECALL_TOOL_NAME} again later]"

    async def _api_body(
        self, request: web.Request, api: Api
    ) -> tuple[dict[str, Any], list[Any], Any, str | None] | web.Response:
        """(body, chat history, chat tools, named session) of a request, or its 400."""
        limit = self.proxy.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
        raw = await read_body(request, limit, self.proxy.settings.client_timeout_s)
        try:
            body = await self.proxy.pools.prepare(functools.partial(api.parse, raw))
            history, tools = api.to_core(body)
        except wire.BadRequest as exc:
            return json_error(400, str(exc), type_="invalid_request_error", code=exc.code, param=exc.param)
        return body, history, tools, api.session_hint(body, request.headers)

    def _upstream_headers(self, request: web.Request) -> dict[str, str]:
        return self.proxy.upstream.headers(
            request.headers, forward_authorization=self.proxy._auth_token is None
        )

    async def _api_call(self, request: web.Request, api: Api) -> web.StreamResponse:
        """Prepare, forward and answer one request of a non-chat API (`apis.Api`)."""
        parsed = await self._api_body(request, api)
        if isinstance(parsed, web.Response):
            return parsed
        body, history, tools, sid = parsed
        prepared: Prepared | None = None
        if api.managed(body):
            try:
                prepared = await self.proxy.pools.prepare(
                    functools.partial(self.proxy._prepare, history, tools, sid, request.headers)
                )
            except MessageError as exc:
                return json_error(400, str(exc), type_="invalid_request_error", param="messages")
            except Exception:  # a TokenPilot bug must not stop the agent
                log.exception(
                    "tokenpilot: prepare failed for session %s; forwarding the request unchanged", sid
                )
        if prepared is None:
            sid = sid or "unidentified"
            self.proxy._count_call(sid)
        else:
            sid = prepared.session_id
        stats = self.proxy.stats[sid]
        timeline.note_model(stats, body.get("model"))
        self.proxy._dirty.add(sid)
        out = api.upstream_body(body, prepared, sid)
        headers = api.headers(self._upstream_headers(request), request.headers, self.proxy.upstream.api_key)
        # a client that lists recall_artifact itself runs it (as OpenClaw's plugin does)
        rounds = 0 if any(tool_name(t) == RECALL_TOOL_NAME for t in tools or []) else MAX_RECALL_ROUNDS
        turns = RecallTurns(self._recall, api, sid)
        if body.get("stream") is True:
            return await self._api_stream(request, api, turns, out, headers, stats, rounds)
        for n in range(rounds + 1):
            resp = await self.proxy._send(out, headers, stats, path=api.path)
            if isinstance(resp, web.Response):
                return resp
            try:
                whole = await self.proxy._relay_whole(resp, stats)
            finally:
                resp.release()
            nxt = await turns.after(whole, out) if n < rounds else None
            if nxt is None:
                break
            out = nxt
        return turns.answer(whole)

    async def _api_stream(
        self,
        request: web.Request,
        api: Api,
        turns: RecallTurns,
        out: dict[str, Any],
        headers: dict[str, str],
        stats: SessionStats,
        max_rounds: int,
    ) -> web.StreamResponse:
        """Relay a streamed answer event by event; a recall turn is answered and continued."""
        relay = api.relay()
        started: list[web.StreamResponse] = []  # the client's stream, once its head is sent
        try:
            return await self._stream_turns(
                request, api, turns, out, headers, stats, max_rounds, relay, started
            )
        except Exception as exc:  # a proxy bug: a started stream still ends with an error event
            if not started:
                raise  # the middleware answers it as JSON
            stats.errors += 1
            log.error("tokenpilot: internal error during a %s stream", api.name, exc_info=exc)
            with contextlib.suppress(ConnectionError):
                await started[0].write(relay.error_event(internal_error_message(exc), "internal_error"))
            return started[0]

    async def _stream_turns(
        self,
        request: web.Request,
        api: Api,
        turns: RecallTurns,
        out: dict[str, Any],
        headers: dict[str, str],
        stats: SessionStats,
        max_rounds: int,
        relay: StreamRelay,
        started: list[web.StreamResponse],
    ) -> web.StreamResponse:
        """`_api_stream`'s turns; the client's stream goes into `started` once prepared."""
        headers = {**headers, "Accept": "text/event-stream"}
        client: web.StreamResponse | None = None
        for rounds in range(max_rounds + 1):
            resp = await self.proxy._send(out, headers, stats, path=api.path)
            if isinstance(resp, web.Response):
                if client is None:
                    return resp
                await client.write(relay.error_event("upstream failed during a recall", "upstream_error"))
                return client
            try:
                if resp.status != 200 or not resp.headers.get("Content-Type", "").startswith(
                    "text/event-stream"
                ):
                    whole = await self.proxy._relay_whole(resp, stats)
                    if client is None:
                        return whole
                    await client.write(
                        relay.error_event(f"upstream answered {whole.status}", "upstream_error")
                    )
                    return client
                if client is None:
                    extra = {k: v for k, v in response_headers(resp).items() if k != "Content-Type"}
                    client = web.StreamResponse(
                        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **extra}
                    )
                    await client.prepare(request)
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
            async for chunk in _upstream_chunks(resp, self.proxy.settings.read_timeout_s):
                for event in splitter.feed(chunk):
                    for out in relay.feed(event):
                        await client.write(out)
        except _StreamBroken as exc:
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
