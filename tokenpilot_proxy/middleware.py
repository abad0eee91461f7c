"""What every request goes through before its handler: the proxy's bearer token, JSON
errors, `/metrics` latency, the connection marked busy, and memory trimmed after huge bodies."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from tokenpilot_proxy.dashboard import browser_authorized
from tokenpilot_proxy.errors import STATUS_TYPES, internal_error, json_error
from tokenpilot_proxy.gemini import VERSIONS, google_shaped
from tokenpilot_proxy.memtrim import BodyStalled
from tokenpilot_proxy.request_path import RequestPath
from tokenpilot_proxy.serve_options import MB

log = logging.getLogger("tokenpilot.openclaw")
GEMINI_PREFIXES = tuple(f"/{v}/models/" for v in VERSIONS)


class Guard:
    """`middleware`: the aiohttp middleware (see the module docstring)."""

    def __init__(self, path: RequestPath) -> None:
        self.path = path
        self.busy: set[object] = set()  # connections (aiohttp protocols) with a request in progress
        self.trims: set[asyncio.Task[None]] = set()  # malloc_trim after a huge body, pending

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Own bearer token (all but /health); every aiohttp error as a JSON body; the
        connection marked busy (see `connections.ConnectionGate`) while its request runs."""
        conn = request.protocol
        self.busy.add(conn)
        try:
            answer = await self._guarded(request, handler)
        finally:
            self.busy.discard(conn)
        if request.path.startswith(GEMINI_PREFIXES):  # Gemini's clients read Google's error shape
            return google_shaped(answer)
        return answer

    async def _guarded(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """The bearer token (all but /health; the dashboard's cookie for a browser), and
        each answer's latency in `/metrics`."""
        if self.path.auth_token and request.path != "/health":
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(
                given.encode(), f"Bearer {self.path.auth_token}".encode()
            ) and not browser_authorized(request, self.path.auth_token):
                return json_error(
                    401,
                    "missing or wrong bearer token for the TokenPilot proxy",
                    type_="authentication_error",
                    code="invalid_proxy_token",
                )
        with self.path.metrics.timed(request) as timing:
            timing.status = (answer := await self._answer(request, handler)).status
        return answer

    async def _answer(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        huge = self.path.trimmer.huge(request.content_length)
        if huge:
            self.path.trimmer.begin()
        try:
            limit = self.path.settings.max_body_bytes
            if request.content_length is not None and request.content_length > limit:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
            return await handler(request)
        except BodyStalled:  # a handler's read_body: the client stopped sending its body
            return await self._client_timed_out(request)
        except web.HTTPException as exc:
            if exc.status == 413:
                limit = self.path.settings.max_body_bytes
                return json_error(
                    413,
                    f"request body larger than the proxy's limit of {limit:,} bytes ({limit / MB:g} MB)",
                    type_="request_too_large",
                    code="request_too_large",
                )
            if exc.status < 400:
                raise
            message = f"{request.method} {request.path}: {exc.reason}"
            return json_error(exc.status, message, type_=STATUS_TYPES.get(exc.status, "error"))
        except Exception as exc:  # a bug of the proxy: said as JSON, logged once with its traceback
            log.error(
                "tokenpilot: internal error answering %s %s", request.method, request.path, exc_info=exc
            )
            return internal_error(exc)
        finally:
            if huge:  # once the response is out and the request (its body) released
                task = asyncio.get_running_loop().create_task(self._trim_after())
                self.trims.add(task)
                task.add_done_callback(self.trims.discard)

    async def _trim_after(self) -> None:
        await asyncio.sleep(0.05)  # let aiohttp drop the request, whose body it caches
        await asyncio.to_thread(self.path.trimmer.end)

    async def _client_timed_out(self, request: web.Request) -> web.StreamResponse:
        """408 to a client that stopped sending its body, and the connection closed
        (not drained: it may never send the rest)."""
        log.info("tokenpilot: %s %s: the client sent no body for %g s; closed",
                 request.method, request.path, self.path.settings.client_timeout_s)  # fmt: skip
        resp = json_error(
            408,
            f"the request body stalled: nothing received for {self.path.settings.client_timeout_s:g} s",
            type_="client_timeout",
            code="client_timeout",
        )
        resp.force_close()
        await resp.prepare(request)
        await resp.write_eof()
        if request.transport is not None:
            request.transport.close()  # after the answer is written: the transport flushes first
        return resp
