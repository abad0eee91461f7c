"""The one path every model call takes through the proxy, whatever its API.

An API module (`chat`, `anthropic`, `responses`) reads its body with `read` and
`parse`, translates it to the core's chat messages, and hands them to `begin`: the
session is found (named, or derived from the conversation's start and the caller), locked
with its newest state, prepared by TokenPilot and written back before the upstream sees
anything (`prepare`), and counted. The API module then renders the upstream body in its
own format, `send`s it and answers with `relay_whole` or, streamed, `open_stream` and
`upstream_chunks`. A TokenPilot failure never stops the agent: the call goes on unmanaged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from tokenpilot import Prepared, TokenPilot
from tokenpilot.errors import MessageError
from tokenpilot_proxy import timeline, wire
from tokenpilot_proxy.apis import RECALL_TOOL_NAME
from tokenpilot_proxy.errors import bad_request, json_error
from tokenpilot_proxy.memtrim import Trimmer, read_body
from tokenpilot_proxy.metrics import ProxyMetrics
from tokenpilot_proxy.pools import PoolBusy, Pools
from tokenpilot_proxy.prepared_log import PreparedLog
from tokenpilot_proxy.sessions import SessionStats, credential_fingerprint, derived_session_id
from tokenpilot_proxy.settings import ProxySettings
from tokenpilot_proxy.state import SessionKeeper
from tokenpilot_proxy.upstream import Upstream, UpstreamTimeout, UpstreamUnreachable, response_headers

log = logging.getLogger("tokenpilot.openclaw")


class StreamBroken(Exception):
    """The upstream stream stopped early; `code` tells the client why."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


async def upstream_chunks(resp: aiohttp.ClientResponse, read_timeout_s: float) -> AsyncIterator[bytes]:
    """The upstream body as it arrives; read failures become `StreamBroken` (client write errors do not)."""
    try:
        async for chunk in resp.content.iter_any():
            yield chunk
    except asyncio.TimeoutError as exc:
        raise StreamBroken(
            f"upstream sent nothing for {read_timeout_s:g} s; stream ended by the TokenPilot proxy",
            "upstream_timeout",
        ) from exc
    except (aiohttp.ClientError, ConnectionError) as exc:
        raise StreamBroken(f"upstream stream interrupted: {exc}", "upstream_stream_interrupted") from exc


def is_event_stream(resp: aiohttp.ClientResponse) -> bool:
    """A 200 answered as server-sent events (anything else is relayed whole)."""
    return resp.status == 200 and resp.headers.get("Content-Type", "").startswith("text/event-stream")


@dataclass(slots=True)
class Call:
    """One model call, its session known: what `begin` hands back to the API module."""

    session_id: str
    stats: SessionStats
    prepared: Prepared | None  # None: forwarded as it came (unmanaged, or prepare failed)


class RequestPath:
    """The shared steps of a model call (module docstring); one per proxy."""

    def __init__(
        self,
        settings: ProxySettings,
        keeper: SessionKeeper,
        upstream: Upstream,
        pools: Pools,
        metrics: ProxyMetrics,
        trimmer: Trimmer,
    ) -> None:
        self.settings = settings
        self.keeper = keeper
        self.upstream = upstream
        self.pools = pools
        self.metrics = metrics
        self.trimmer = trimmer
        self.log = PreparedLog(keeper.last_stable)
        self.auth_token: str | None = None  # the proxy's own bearer token (`--auth-token-env`)

    # -- the request ------------------------------------------------------------------
    async def read(self, request: web.Request) -> bytes:
        """The body, within the size limit; a client that stalls is cut off (`BodyStalled`)."""
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
        return await read_body(request, limit, self.settings.client_timeout_s)

    async def parse(self, raw: bytes, parse: Callable[[bytes], Any]) -> Any:
        """`parse(raw)` on the prepare pool (a big body takes a while), or its 400."""
        try:
            return await self.pools.prepare(functools.partial(parse, raw))
        except wire.BadRequest as exc:
            return bad_request(exc)

    # -- the session ------------------------------------------------------------------
    async def begin(
        self,
        history: list[Any],
        tools: Any,
        sid: str | None,
        headers: Mapping[str, str],
        model: Any,
        *,
        managed: bool = True,
    ) -> Call | web.Response:
        """Prepare (when `managed`) and count the call; a 400 for messages the core refuses."""
        prepared: Prepared | None = None
        if managed:
            try:
                prepared = await self.pools.prepare(
                    functools.partial(self.prepare, history, tools, sid, headers, model)
                )
            except MessageError as exc:
                return json_error(400, str(exc), type_="invalid_request_error", param="messages")
            except Exception:  # a TokenPilot bug must not stop the agent: forward the request as it came
                log.exception(
                    "tokenpilot: prepare failed for session %s; forwarding the request unchanged", sid
                )
        if prepared is None:  # counted here; a prepared call was counted (and saved) by `prepare`
            sid = sid or "unidentified"
            self.keeper.count_call(sid)
        else:
            sid = prepared.session_id
        stats = self.keeper.stats[sid]
        timeline.note_model(stats, model)
        self.keeper.dirty.add(sid)
        return Call(sid, stats, prepared)

    def prepare(
        self, history: list[Any], tools: Any, sid: str | None, headers: Mapping[str, str], model: Any = None
    ) -> Prepared:
        """TokenPilot's rendering, its state written through before the upstream sees it:
        whatever a provider has cached of this session, a restart (even after kill -9)
        renders again. One worker-thread hop for all of it, so saves never queue behind
        other requests' prepares. A failed save stays dirty for the next flush."""
        keeper = self.keeper
        if sid is None:
            sid = self._derive(history, headers)
        with keeper.current(sid):  # across replicas: load newer state, prepare, write back
            with self.metrics.preparing():
                prepared = keeper.pilot.prepare(history, tools, session_id=sid)
            keeper.note_resident(sid)
            self.log.note(prepared.session_id, prepared, keeper.count_call(prepared.session_id), model)
            keeper.save(prepared.session_id, refreshed=True)
        if keeper.residency.max_sessions and len(keeper.residency) > keeper.residency.max_sessions:
            keeper.evict_idle(spare=sid)  # beyond the cap: the least recently used leave
        return prepared

    def prepare_copy(
        self, history: list[Any], tools: Any, sid: str | None, headers: Mapping[str, str]
    ) -> Prepared:
        """`prepare` on a throw-away TokenPilot holding a copy of the session (same store),
        copied under the session lock with the newest state another replica wrote: a
        count of tokens commits nothing."""
        keeper = self.keeper
        sid = sid or self._derive(history, headers)
        with keeper.current(sid):  # evicted from memory: read back first
            exported = keeper.pilot.export_session(sid) if sid in keeper.pilot.session_ids else None
        scratch = TokenPilot(keeper.pilot.config, store=keeper.pilot.store, lifecycle=False)
        if exported is not None:
            scratch.import_session(exported)
        return scratch.prepare(history, tools, session_id=sid)

    def _derive(self, history: list[Any], headers: Mapping[str, str]) -> str:
        """The id of a request without key or session header: its conversation's start and caller."""
        return derived_session_id(
            self.keeper.pilot.derive_session_id(history), credential_fingerprint(headers)
        )

    async def recall(self, arguments: str, sid: str) -> str:
        """The model's `recall_artifact` call, answered by the proxy with the newest state of
        the session (a recall changes state: the recall gate counts it, and other replicas
        must see it). Runs on the recall pool; when that is full the model is told to try
        again later."""
        keeper = self.keeper
        keeper.note_recall(sid)
        try:
            return await self.pools.recall.run(
                lambda: keeper.in_session(sid, lambda: keeper.pilot.execute_recall(arguments, session_id=sid))
            )
        except PoolBusy as exc:
            return f"[tokenpilot: {exc}; call {RECALL_TOOL_NAME} again later]"

    # -- the upstream -----------------------------------------------------------------
    def upstream_headers(self, request: web.Request) -> dict[str, str]:
        """The upstream's auth (or the client's, when the proxy has no token of its own)."""
        return self.upstream.headers(request.headers, forward_authorization=self.auth_token is None)

    async def send(
        self,
        out: dict[str, Any],
        headers: dict[str, str],
        stats: SessionStats,
        path: str = "/chat/completions",
    ) -> aiohttp.ClientResponse | web.Response:
        """POST the managed request upstream; a timeout or refusal becomes a 504/502 answer."""
        try:
            return await self.upstream.request("POST", path, headers=headers, data=wire.encode(out))
        except UpstreamTimeout as exc:
            stats.errors += 1
            return json_error(504, str(exc), type_="upstream_timeout", code="upstream_timeout")
        except UpstreamUnreachable as exc:
            stats.errors += 1
            return json_error(502, str(exc), type_="upstream_error", code="upstream_unreachable")

    async def relay_whole(self, resp: aiohttp.ClientResponse, stats: SessionStats) -> web.Response:
        """A whole upstream answer (errors included) returned as it came; usage recorded."""
        try:
            payload = await resp.read()
        except asyncio.TimeoutError:
            stats.errors += 1
            msg = f"upstream sent nothing for {self.settings.read_timeout_s:g} s"
            return json_error(504, msg, type_="upstream_timeout", code="upstream_timeout")
        except aiohttp.ClientError as exc:
            stats.errors += 1
            return json_error(
                502, f"upstream response broken: {exc}", type_="upstream_error", code="upstream_broken"
            )
        if resp.status != 200:
            stats.errors += 1
            return web.Response(status=resp.status, body=payload, headers=response_headers(resp))
        try:
            obj = wire.loads_bounded(payload, wire.MAX_UPSTREAM_JSON_DEPTH)
        except wire.TooDeep:
            stats.errors += 1
            msg = (
                f"upstream answered 200 with JSON nested deeper than the proxy reads "
                f"({wire.MAX_UPSTREAM_JSON_DEPTH} levels; {len(payload)} bytes)"
            )
            return json_error(502, msg, type_="upstream_error", code="upstream_bad_response")
        except ValueError:  # UnicodeDecodeError included
            stats.errors += 1
            msg = f"upstream answered 200 with a body that is not JSON ({len(payload)} bytes)"
            return json_error(502, msg, type_="upstream_error", code="upstream_bad_response")
        usage = obj.get("usage", obj.get("usageMetadata")) if isinstance(obj, dict) else None
        if isinstance(usage, dict):  # usageMetadata: Gemini's
            stats.record_usage(usage)
        return web.Response(status=resp.status, body=payload, headers=response_headers(resp))

    async def open_stream(self, request: web.Request, resp: aiohttp.ClientResponse) -> web.StreamResponse:
        """The client's event stream, its head sent (with the upstream's headers but its type)."""
        extra = {k: v for k, v in response_headers(resp).items() if k != "Content-Type"}
        client = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **extra}
        )
        await client.prepare(request)
        return client
