"""Requests aiohttp refuses before the app sees them, answered as JSON with one log line.

aiohttp's low-level `RequestHandler` answers what it cannot parse (a header over 8,190
bytes, a broken request line, a bad chunk size) itself, before any middleware: a
`text/plain` 400 and an ERROR traceback per request, so one client sending junk fills
the log. `JsonErrorRunner` is an `AppRunner` whose connections answer those with the
proxy's OpenAI-shaped JSON error and log a single WARNING line. The same hook receives
an exception that escaped the middleware (a stream that failed after its head was
sent); that one is a proxy bug and keeps its traceback, once.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from tokenpilot_proxy.errors import internal_error, json_error

log = logging.getLogger("tokenpilot.openclaw")

MAX_REASON_CHARS = 200  # aiohttp's message quotes the offending line, up to 8 KB of it


def _reason(status: int, exc: BaseException | None, message: str | None) -> str:
    text = message or (str(exc) if exc is not None else "") or HTTPStatus(status).phrase
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


class JsonErrorHandler(RequestHandler):
    """aiohttp's connection handler, with its error answer in JSON (module docstring)."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500 and status != 504:
            log.error(
                "tokenpilot: internal error answering %s %s", request.method, request.path, exc_info=exc
            )
        else:
            log.warning(
                "tokenpilot: refused a malformed HTTP request from %s (%d): %s",
                request.remote,
                status,
                _reason(status, exc, message),
            )
        if request.writer.output_size > 0:  # a response is under way: only closing is left
            raise ConnectionError("response already started; closing the connection")
        if status >= 500 and status != 504:
            resp = internal_error(exc or RuntimeError("unknown"))
        elif status == 504:
            resp = json_error(504, "the request took too long to answer", type_="timeout", code="timeout")
        else:
            resp = json_error(
                status,
                f"malformed HTTP request: {_reason(status, exc, message)}",
                type_="invalid_request_error",
                code="bad_http_request",
            )
        resp.force_close()
        return resp


class _JsonErrorServer(web.Server):
    """The app's `Server`, making `JsonErrorHandler` connections."""

    def __call__(self) -> RequestHandler:
        kwargs: dict[str, Any] = self._kwargs
        return JsonErrorHandler(self, loop=self._loop, **kwargs)


class JsonErrorRunner(web.AppRunner):
    """`web.AppRunner` whose connections answer malformed HTTP as JSON (module docstring)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _JsonErrorServer  # the same server; only its connections' class differs
        return server
