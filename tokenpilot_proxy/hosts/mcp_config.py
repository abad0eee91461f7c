"""TokenPilot's MCP server (`tokenpilot mcp`) in a client's own MCP configuration.

- Claude Code keeps user-scope MCP servers in `~/.claude.json` (`$CLAUDE_CONFIG_DIR/.claude.json`),
  key `mcpServers`; Claude Code rewrites that file itself (counters, projects), so disable
  takes out only our key, whatever else changed (`undo.unapply_claude_mcp`).
- Codex: a `[mcp_servers.tokenpilot]` table in its `config.toml` (`codex_toml`).

The server is started as this interpreter's `-m tokenpilot_mcp`, so it runs in the same
environment as the proxy and reads the store the proxy writes by default. Once the client
lists `recall_artifact` itself, the proxy adds no copy of its own (`is_recall_tool`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from tokenpilot.ingest.stabilize import MCP_SERVER_NAME

SERVER_NAME = MCP_SERVER_NAME
MODULE = "tokenpilot_mcp"


def mcp_available() -> bool:
    """Whether this environment can run the server (the `mcp` extra is installed)."""
    return importlib.util.find_spec("mcp") is not None and importlib.util.find_spec(MODULE) is not None


def server_command() -> tuple[str, list[str]]:
    """(command, args) that start the server over stdio."""
    return sys.executable, ["-m", MODULE]


def claude_json_path() -> Path:
    """Claude Code's global config: `$CLAUDE_CONFIG_DIR/.claude.json`, else `~/.claude.json`."""
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    if base:
        return Path(base).expanduser() / ".claude.json"
    return Path.home() / ".claude.json"


def claude_entry() -> dict[str, Any]:
    command, args = server_command()
    # alwaysLoad: in the tool list from the first request, never deferred behind tool search
    return {"type": "stdio", "command": command, "args": args, "env": {}, "alwaysLoad": True}


def json_object(text: str | None, path: Path, key: str) -> dict[str, Any]:
    """A client's JSON settings (empty: {}), with an object under `key`; ValueError, saying
    what to fix, for anything else (nothing is written then)."""
    try:
        data: Any = json.loads(text) if text and text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); fix it first") from exc
    if not isinstance(data, dict) or not isinstance(data.get(key, {}), dict):
        raise ValueError(f"{path}: expected a JSON object with an object `{key}`")
    return data


def claude_mcp_text(text: str | None, path: Path) -> str:
    """`text` (Claude Code's global config) with our server under `mcpServers`."""
    data = json_object(text, path, "mcpServers")
    data.setdefault("mcpServers", {})[SERVER_NAME] = claude_entry()
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def is_claude_json(path: Path) -> bool:
    return path.name == ".claude.json"
