"""The one HTTP client to the upstream OpenAI-compatible API.

Errors are sorted into the two the proxy answers differently: no answer in time
(504) and no connection at all (502). Everything the upstream does answer, errors
included, goes back to the client as it came.

Credentials in the URL (`http://user:pass@host/v1`) never reach aiohttp, which refuses
them next to an Authorization header: `split_credentials` takes them out at start-up
and they go as HTTP Basic auth; `redact_url` is the form that may be printed. A URL
password is visible to every local user in the process list, so the proxy can also
take it from an environment variable (`--upstream-password-env`, with the user, if
any, in the URL: `http://user@host/v1`).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from yarl import URL

# Request headers worth passing on: routing and account selection, never hop-by-hop.
FORWARD_REQUEST_HEADERS = (
    "openai-organization",
    "openai-project",
    "session_id",
    "x-session-affinity",
    "x-client-request-id",
)
# Response headers a client may act on (rate limits, retries, request ids).
FORWARD_RESPONSE_PREFIXES = ("x-ratelimit-", "openai-", "anthropic-")
FORWARD_RESPONSE_HEADERS = ("retry-after", "x-request-id", "request-id")


def basic_auth(user: str, password: str) -> str:
    """The `Authorization` value of HTTP Basic auth."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def split_credentials(url: str) -> tuple[str, str | None]:
    """(the URL without user and password, their `Authorization: Basic ...` value or None)."""
    u = URL(url)
    if u.user is None and u.password is None:
        return url, None
    return str(u.with_user(None)), basic_auth(u.user or "", u.password or "")


def url_user(url: str) -> tuple[str, bool]:
    """(the user named in the URL, "" when none; whether the URL also carries a password)."""
    u = URL(url)
    return u.user or "", u.password is not None


def redact_url(url: str) -> str:
    """The URL with its password, if any, shown as `***` (for logs and messages)."""
    try:
        u = URL(url)
    except (TypeError, ValueError):
        return "<unparsable URL>"
    return str(u.with_password("***")) if u.password else url


@dataclass(frozen=True, slots=True)
class Route:
    """How requests reach the upstream, from the environment: what aiohttp's `trust_env`
    would read again on every request (two worker-thread hops each: the proxy variables
    and ~/.netrc), read once when the client opens."""

    proxy: URL | None = None
    """`HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` for the upstream's scheme, unless `NO_PROXY` exempts its host."""
    proxy_auth: aiohttp.BasicAuth | None = field(default=None, repr=False)
    """The proxy's login: from its URL, else from ~/.netrc (`NETRC`) for the proxy's host."""
    netrc_auth: aiohttp.BasicAuth | None = field(default=None, repr=False)
    """~/.netrc's login for the upstream's host: used when no `Authorization` header goes."""

    @classmethod
    def from_environment(cls, base_url: str) -> Route:
        url = URL(base_url)
        proxy: URL | None = None
        proxy_auth: aiohttp.BasicAuth | None = None
        netrc_auth: aiohttp.BasicAuth | None = None
        with suppress(LookupError):
            proxy, proxy_auth = get_env_proxy_for_url(url)
        logins = netrc_from_env()
        if proxy is not None and proxy_auth is None and proxy.host:
            with suppress(LookupError):
                proxy_auth = basicauth_from_netrc(logins, proxy.host)
        if url.host:
            with suppress(LookupError):
                netrc_auth = basicauth_from_netrc(logins, url.host)
        return cls(proxy, proxy_auth, netrc_auth)

    def options(self, headers: Mapping[str, str]) -> dict[str, Any]:
        """The request's keyword arguments for this route."""
        out: dict[str, Any] = {}
        if self.proxy is not None:
            out["proxy"], out["proxy_auth"] = self.proxy, self.proxy_auth
        if self.netrc_auth is not None and not any(k.lower() == "authorization" for k in headers):
            out["auth"] = self.netrc_auth
        return out


class UpstreamError(Exception):
    """The upstream could not be asked or did not answer."""


class UpstreamTimeout(UpstreamError):
    """No (more) bytes from the upstream within the read timeout."""


class UpstreamUnreachable(UpstreamError):
    """Connecting or talking to the upstream failed."""


@dataclass(slots=True)
class Upstream:
    """Base URL (with its `/v1`, no credentials), the API key or Basic auth if any, and timeouts."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    basic_auth: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    _session: aiohttp.ClientSession | None = None
    _route: Route = field(default_factory=Route)

    async def open(self) -> None:
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout_s, sock_read=self.read_timeout_s
        )
        # The environment's proxy and logins are read here, once, and passed with each
        # request: `trust_env=True` would read them again per request, off the event loop.
        self._route = await asyncio.to_thread(Route.from_environment, self.base_url)
        self._session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def headers(self, incoming: Mapping[str, str], *, forward_authorization: bool) -> dict[str, str]:
        out = {"Content-Type": "application/json", "Accept": incoming.get("accept", "application/json")}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        elif self.basic_auth:
            out["Authorization"] = self.basic_auth
        elif forward_authorization and incoming.get("authorization"):
            out["Authorization"] = incoming["authorization"]
        for name in FORWARD_REQUEST_HEADERS:
            if name in incoming:
                out[name] = incoming[name]
        return out

    async def request(
        self, method: str, path: str, *, headers: Mapping[str, str], data: bytes | None = None
    ) -> aiohttp.ClientResponse:
        """Send and wait for the response head; the caller reads (and releases) the body."""
        if self._session is None:
            raise UpstreamUnreachable("the upstream client is closed")
        try:
            return await self._session.request(
                method, self.url(path), data=data, headers=dict(headers), **self._route.options(headers)
            )
        except asyncio.TimeoutError as exc:
            raise UpstreamTimeout(
                f"no response from {self.base_url} within {self.read_timeout_s:g} s"
            ) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(f"cannot reach {self.base_url}: {exc}") from exc


def response_headers(resp: aiohttp.ClientResponse) -> dict[str, str]:
    """The upstream headers a client may need, plus the content type."""
    out = {}
    for name, value in resp.headers.items():
        low = name.lower()
        if low in FORWARD_RESPONSE_HEADERS or low.startswith(FORWARD_RESPONSE_PREFIXES):
            out[name] = value
    out["Content-Type"] = resp.headers.get("Content-Type", "application/json")
    return out
