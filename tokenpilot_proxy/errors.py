"""The proxy's own answers: OpenAI-shaped JSON errors, whatever API the request came on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tokenpilot_proxy.pools import PoolBusy
from tokenpilot_proxy.sessions import credential_fingerprint, derived_owner
from tokenpilot_proxy.wire import BadRequest


def json_error(
    status: int, message: str, *, type_: str, code: str | None = None, param: str | None = None
) -> web.Response:
    """An OpenAI-shaped error body, so agent SDKs surface the message as is."""
    err: dict[str, Any] = {"message": message, "type": type_, "code": code}
    if param is not None:
        err["param"] = param
    return web.json_response({"error": err}, status=status)


def internal_error_message(exc: BaseException) -> str:
    return f"internal error in the TokenPilot proxy ({type(exc).__name__}); its log has the details"


def internal_error(exc: BaseException) -> web.Response:
    """The answer to a bug of the proxy (never a client's fault: those are 400s): JSON naming
    the error's type, so an agent SDK shows it, and never aiohttp's text/plain page."""
    return json_error(500, internal_error_message(exc), type_="server_error", code="internal_error")


STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found",
    405: "invalid_request_error",
    408: "client_timeout",
    413: "request_too_large",
}


def busy_error(exc: PoolBusy) -> web.Response:
    """503 with Retry-After: a recall that found every worker busy and the queue full."""
    resp = json_error(503, str(exc), type_="server_error", code="proxy_busy")
    resp.headers["Retry-After"] = str(exc.retry_after_s)
    return resp


def bad_request(exc: BadRequest) -> web.Response:
    """400 for a body the proxy cannot read or translate (the field it names)."""
    return json_error(400, str(exc), type_="invalid_request_error", code=exc.code, param=exc.param)


def foreign_derived(sid: str, headers: Mapping[str, str]) -> web.Response | None:
    """A 403 when `sid` is a derived session of other credentials (its artifacts are theirs)."""
    owned, owner = derived_owner(sid)
    if not owned or owner == credential_fingerprint(headers):
        return None
    return json_error(
        403,
        f"session {sid} was derived from a conversation sent with other credentials: its "
        "artifacts go only to a caller with the same Authorization / x-api-key header",
        type_="permission_error",
        code="session_forbidden",
        param="session",
    )
