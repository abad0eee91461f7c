"""`tokenpilot mcp`: its options (standard library only, so the command mounts on a base
install) and a handler that imports the server when the command runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tokenpilot.cli import run

EXTRA = "tokenpilot[mcp]"


def add_mcp_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store-dir",
        metavar="DIR",
        help="the proxy's artifact store (default: tokenpilot serve's, ~/.cache/tokenpilot/artifacts)",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="the proxy's session state, for the listing (default ~/.cache/tokenpilot/sessions)",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help="redis://host:port/db: the store proxy replicas share (replaces --store-dir and "
        "--state-dir; needs tokenpilot[redis])",
    )
    p.add_argument(
        "--session",
        metavar="ID",
        help="read only this session (default: whichever session holds the id asked for)",
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    p.add_argument("--host", default="127.0.0.1", help="with --http: the address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8790, help="with --http: the port (default 8790)")
    p.add_argument(
        "--auth-token-env",
        metavar="NAME",
        help="with --http: require `Authorization: Bearer <$NAME>` (required off loopback)",
    )


def register(subparsers: Any) -> None:
    """Add `mcp` to a parent CLI's subparsers."""
    p = subparsers.add_parser(
        "mcp",
        help=f"serve recall_artifact over MCP for Claude Code, Codex or any MCP client (needs {EXTRA})",
        description="An MCP server over the proxy's store: the recall_artifact tool and each "
        "session's originals as resources.",
    )
    add_mcp_arguments(p)
    p.set_defaults(func=_handler)


def _handler(args: argparse.Namespace) -> int:
    try:
        from tokenpilot_mcp.serve import run_from_args
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in ("mcp", "anyio", "starlette", "uvicorn"):
            raise
        print(f"tokenpilot mcp needs an extra: pip install '{EXTRA}' ({exc})", file=sys.stderr)
        return 2
    return run_from_args(args)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tokenpilot_mcp`: the same options as `tokenpilot mcp`."""
    parser = argparse.ArgumentParser(prog="python -m tokenpilot_mcp", description="TokenPilot's MCP server")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO (on stderr)")
    add_mcp_arguments(parser)
    parser.set_defaults(func=_handler)
    return run(parser, argv)
