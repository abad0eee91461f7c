"""`tokenpilot mcp`: `recall_artifact` as an MCP server, for clients that list their tools
themselves (Claude Code, Codex), and each session's originals as resources to browse.

It reads the store the proxy writes (`reader.StoreReader`); `server.build_server` makes
the MCP server (the official `mcp` SDK), `serve` runs it over stdio or streamable HTTP.
Needs the `mcp` extra: pip install 'tokenpilot[mcp]' (the `proxy` extra brings it too).
"""

from __future__ import annotations

from tokenpilot_mcp.reader import Kept, StoreReader

__all__ = ["Kept", "StoreReader"]
