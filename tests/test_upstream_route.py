"""What the proxy readies once, at start-up, instead of on every request: the upstream's
route from the environment (`Route`), and the tokenizer.

aiohttp's `trust_env=True` reads the proxy variables and ~/.netrc again on every request,
each in a worker thread. The proxy reads them once and passes them with each request;
what a user behind a forward proxy or with a netrc login gets must not change.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from tokenpilot_proxy import Proxy, ProxySettings
from tokenpilot_proxy import upstream as upstream_module
from tokenpilot_proxy.server import RunningProxy
from tokenpilot_proxy.upstream import Route

_PROXY_VARS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)


def _login(auth: object) -> tuple[str, str] | None:
    """(login, password) of aiohttp's auth record (comparing records would build one, which warns)."""
    return None if auth is None else (auth.login, auth.password)  # type: ignore[attr-defined]


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in _PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    return monkeypatch


def test_no_variables_no_route(clean_env):
    route = Route.from_environment("https://api.example.com/v1")
    assert route == Route() and route.options({"Authorization": "Bearer k"}) == {}


def test_the_proxy_of_the_upstreams_scheme_and_its_login(clean_env):
    clean_env.setenv("HTTPS_PROXY", "http://alice:s3cret@proxy.corp:3128")
    clean_env.setenv("HTTP_PROXY", "http://other.corp:8080")
    route = Route.from_environment("https://api.example.com/v1")
    assert route.proxy == URL("http://proxy.corp:3128")
    assert _login(route.proxy_auth) == ("alice", "s3cret")
    assert route.options({})["proxy"] == URL("http://proxy.corp:3128")
    assert Route.from_environment("http://plain.example.com/v1").proxy == URL("http://other.corp:8080")


def test_no_proxy_exempts_the_upstream(clean_env):
    clean_env.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    clean_env.setenv("NO_PROXY", "localhost,.example.com")
    assert Route.from_environment("https://api.example.com/v1").proxy is None
    assert Route.from_environment("https://api.openai.com/v1").proxy == URL("http://proxy.corp:3128")


def test_netrc_logins_for_the_upstream_and_the_proxy(clean_env, tmp_path: Path):
    netrc = tmp_path / "netrc"
    netrc.write_text(
        "machine api.example.com login bob password pw1\nmachine proxy.corp login carol password pw2\n"
    )
    netrc.chmod(0o600)
    clean_env.setenv("NETRC", str(netrc))
    clean_env.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    route = Route.from_environment("https://api.example.com/v1")
    assert _login(route.netrc_auth) == ("bob", "pw1")
    assert _login(route.proxy_auth) == ("carol", "pw2")
    assert _login(route.options({})["auth"]) == ("bob", "pw1")
    # an Authorization header wins (aiohttp refuses both at once)
    assert "auth" not in route.options({"authorization": "Bearer k"})


class _ForwardProxy:
    """A forward proxy on loopback that answers every request itself and keeps each
    request line (absolute-form: the client asked it for another host's URL)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.port = 0
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> _ForwardProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        self.lines.append(head.split("\r\n", 1)[0])
        length = next(
            (int(h.split(":", 1)[1]) for h in head.split("\r\n") if h.lower().startswith("content-length:")),
            0,
        )
        await reader.readexactly(length)
        body = json.dumps(
            {
                "id": "c1",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "via proxy"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            }
        ).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()


async def test_calls_go_through_the_environments_proxy_read_once(clean_env, tmp_path, monkeypatch):
    calls = []
    real = upstream_module.get_env_proxy_for_url

    def counted(url: URL):
        calls.append(str(url))
        return real(url)

    monkeypatch.setattr(upstream_module, "get_env_proxy_for_url", counted)
    async with _ForwardProxy() as fwd:
        clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{fwd.port}")
        # a host that does not resolve: only the forward proxy can answer for it
        settings = ProxySettings(
            upstream="http://upstream.invalid/v1", port=0, state_dir=tmp_path / "state", flush_interval_s=0
        )
        async with RunningProxy(settings, Proxy(settings)) as rp, aiohttp.ClientSession() as http:
            for n in range(3):
                body = {"model": "m", "messages": [{"role": "user", "content": f"hello {n}"}]}
                async with http.post(rp.url + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    assert (await r.json())["choices"][0]["message"]["content"] == "via proxy"
    assert fwd.lines == ["POST http://upstream.invalid/v1/chat/completions HTTP/1.1"] * 3
    assert calls == ["http://upstream.invalid/v1"]  # read once, when the client opened


async def test_the_tokenizer_is_loaded_before_the_first_request(tmp_path, monkeypatch):
    """The first calls after a start (or a worker's restart) must not wait ~0.2 s for it."""
    from tokenpilot_proxy import app as app_module

    counted: list[str] = []
    monkeypatch.setattr(app_module, "count_tokens", lambda text: counted.append(text) or 1)
    settings = ProxySettings(
        upstream="http://127.0.0.1:9/v1", port=0, state_dir=tmp_path / "state", flush_interval_s=0
    )
    async with RunningProxy(settings, Proxy(settings)):
        assert counted == ["tokenpilot"]
