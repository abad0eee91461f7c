"""Codex's `config.toml`, edited as text so the user's other keys and comments stay.

Python reads TOML (`tomllib`) but cannot write it without losing comments, so two
careful line edits make the change: the top-level `model_provider` line, and the
one `[model_providers.tokenpilot]` table. The result is parsed again and must equal
the user's config plus exactly those keys; anything else (a key spelled inline, a
multi-line string that looks like a header) is refused, never written.
"""

from __future__ import annotations

import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PROVIDER_ID = "tokenpilot"
_HEADER = re.compile(r"^\s*\[")
_PROVIDER_KEY = re.compile(r"^\s*model_provider\s*=")
MCP_ID = "tokenpilot"


def _table(parent: str, name: str) -> re.Pattern[str]:
    return re.compile(rf'^\s*\[\s*{parent}\s*\.\s*("?){name}\1\s*\]\s*(#.*)?$')


_OUR_TABLE = _table("model_providers", PROVIDER_ID)
_OUR_MCP_TABLE = _table("mcp_servers", MCP_ID)


class TomlEditError(ValueError):
    """The file cannot be edited safely as text."""


def provider_table(base_url: str, env_key: str) -> dict[str, str]:
    return {"name": "TokenPilot", "base_url": base_url, "env_key": env_key, "wire_api": "responses"}


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def enable_text(
    text: str, base_url: str, env_key: str = "OPENAI_API_KEY", *, mcp: tuple[str, list[str]] | None = None
) -> str:
    """`text` with `model_provider = "tokenpilot"` and our provider table, and with `mcp`
    ((command, args)) our MCP server's `[mcp_servers.tokenpilot]` table; idempotent."""
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlEditError(f"not valid TOML, left as it is: {exc}") from exc
    table = provider_table(base_url, env_key)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    first_header = next((i for i, line in enumerate(lines) if _HEADER.match(line)), len(lines))
    key_line = f"model_provider = {_quote(PROVIDER_ID)}\n"
    at = next((i for i in range(first_header) if _PROVIDER_KEY.match(lines[i])), None)
    if at is not None:
        lines[at] = key_line
    else:  # a top-level key must come before the first table
        gap = ["\n"] if first_header < len(lines) else []
        lines[first_header:first_header] = [key_line, *gap]
    body = [f"[model_providers.{PROVIDER_ID}]\n"] + [f"{k} = {_quote(v)}\n" for k, v in table.items()]
    _set_table(lines, _OUR_TABLE, body)
    server = None
    if mcp is not None:
        # required: Codex waits for the server before its first request, so the first
        # request already lists the tool (else the proxy adds its own copy, for good)
        server = {"command": mcp[0], "args": list(mcp[1]), "required": True}
        args = ", ".join(_quote(a) for a in server["args"])
        body = [f"[mcp_servers.{MCP_ID}]\n", f"command = {_quote(server['command'])}\n", f"args = [{args}]\n"]
        _set_table(lines, _OUR_MCP_TABLE, [*body, "required = true\n"])
    out = "".join(lines)
    _check(before, out, table, server)
    return out


def _set_table(lines: list[str], header: re.Pattern[str], body: list[str]) -> None:
    """Our table's lines in place of the one there (up to the next header), else at the end."""
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        if lines and lines[-1].strip():
            lines.append("\n")
        lines += body
    else:
        end = next((i for i in range(start + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
        lines[start:end] = body + (["\n"] if end < len(lines) else [])


def _check(before: dict[str, Any], out: str, table: dict[str, str], server: dict[str, Any] | None) -> None:
    """The edited text parses to the user's config plus our two keys, nothing else."""
    try:
        after = tomllib.loads(out)
    except tomllib.TOMLDecodeError as exc:
        raise TomlEditError(f"the edit would not parse ({exc}); the file is left as it is") from exc
    expected = dict(before)
    expected["model_provider"] = PROVIDER_ID
    providers = dict(expected.get("model_providers") or {})
    providers[PROVIDER_ID] = table
    expected["model_providers"] = providers
    if server is not None:
        expected["mcp_servers"] = {**dict(expected.get("mcp_servers") or {}), MCP_ID: server}
    if after != expected:
        raise TomlEditError(
            "the file defines model_provider, model_providers.tokenpilot or mcp_servers.tokenpilot in a form this edit "
            "does not handle (inline table, dotted key or multi-line string): set them by hand"
        )
