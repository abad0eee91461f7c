"""Run the MCP server: over stdio (what a client's MCP configuration starts), or over
streamable HTTP (`--http`: one server for several clients, or a client on another host)."""

from __future__ import annotations

import argparse
import contextlib
import hmac
import ipaddress
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from tokenpilot.errors import StoreError

from .reader import StoreReader
from .server import build_server


def reader_from_args(args: argparse.Namespace) -> StoreReader:
    return StoreReader(args.store or args.store_dir, args.state_dir, session=args.session)


def run_from_args(args: argparse.Namespace) -> int:
    token = None
    if args.http and args.auth_token_env:
        token = os.environ.get(args.auth_token_env)
        if not token:
            print(f"tokenpilot mcp: ${args.auth_token_env} is empty or not set", file=sys.stderr)
            return 2
    if args.http and token is None and not _loopback(args.host):
        print(
            f"tokenpilot mcp: --host {args.host} is reachable from other machines; "
            "add --auth-token-env NAME so that only holders of the token read the originals",
            file=sys.stderr,
        )
        return 2
    try:
        reader = reader_from_args(args)
    except (StoreError, OSError) as exc:
        print(f"tokenpilot mcp: the store cannot be opened: {exc}", file=sys.stderr)
        return 2
    try:
        if args.http:
            serve_http(reader, args.host, args.port, token)
        else:
            anyio.run(serve_stdio, reader)
    finally:
        reader.close()
        if sys.stdout.closed:  # the stdio transport closes it with the session
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the exit's flush, never closed
    return 0


async def serve_stdio(reader: StoreReader) -> None:
    """Serve on this process's stdin/stdout until the client closes them."""
    server = build_server(reader)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(reader: StoreReader, token: str | None = None) -> Any:
    """The ASGI app of `--http`: the MCP endpoint at /mcp (stateless: any request may go
    to any process), behind a bearer token when one is given."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    manager = StreamableHTTPSessionManager(app=build_server(reader), stateless=True, json_response=True)

    class Endpoint:  # an ASGI app (not a function), so `Route` serves /mcp itself: no redirect
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if token is not None and scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                given = headers.get(b"authorization", b"").decode("latin-1")
                if not hmac.compare_digest(given, f"Bearer {token}"):
                    await PlainTextResponse("a bearer token is required", status_code=401)(
                        scope, receive, send
                    )
                    return
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(
        routes=[Route("/mcp", endpoint=Endpoint(), methods=["GET", "POST", "DELETE"])], lifespan=lifespan
    )


def serve_http(reader: StoreReader, host: str, port: int, token: str | None = None) -> None:
    import uvicorn

    print(f"tokenpilot mcp: serving http://{host}:{port}/mcp", file=sys.stderr)
    uvicorn.run(http_app(reader, token), host=host, port=port, log_level="warning")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
