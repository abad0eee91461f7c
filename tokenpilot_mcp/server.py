"""The MCP server: `recall_artifact` as a tool, and each session's originals as resources.

The tool is the proxy's own (`tokenpilot.RECALL_TOOL`): its name, description and
arguments, and the same answers (`StoreReader.recall`). A bad argument, an unknown id, a
range or pattern refused, a store that is down: each answers with the same text, marked
as a tool error (`isError`); nothing a call sends stops the server.

The listing is for the client's user, so it is resources, not a second tool: a tool's
definition would sit in every request of every session, a resource costs the prompt
nothing until someone opens it (Claude Code: `@tokenpilot:`; Codex: its resource tools).
- `tokenpilot://sessions/<session>`: the originals the session keeps (id, tool, size,
  message);
- `tokenpilot://sessions/<session>/<artifact id>`: one original, whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.shared.exceptions import McpError

from tokenpilot import RECALL_TOOL, __version__
from tokenpilot.errors import ArtifactNotFound

from .reader import Kept, StoreReader

NAME = "tokenpilot"
SCHEME = "tokenpilot"
LISTED_SESSIONS = 20  # the latest sessions offered as resources (any other is read by its URI)


def recall_tool(max_chars: int) -> types.Tool:
    """`recall_artifact` as MCP lists it: the proxy's definition, read-only. For Claude Code
    (`_meta`): listed in every request from the first, not deferred behind its tool search
    (a tool loaded later changes the tool list, and the cached prefix with it), and an
    answer up to `max_chars` (the recall's own cap) reaches the model whole."""
    fn = RECALL_TOOL["function"]
    return types.Tool(
        name=fn["name"],
        description=fn["description"],
        inputSchema=json.loads(json.dumps(fn["parameters"])),
        annotations=types.ToolAnnotations(title="Recall an original", readOnlyHint=True, openWorldHint=False),
        _meta={"anthropic/alwaysLoad": True, "anthropic/maxResultSizeChars": max_chars},
    )


def session_uri(session_id: str, artifact_id: str | None = None) -> str:
    tail = "" if artifact_id is None else f"/{artifact_id}"
    return f"{SCHEME}://sessions/{quote(session_id, safe='')}{tail}"


def parse_uri(uri: str) -> tuple[str, str | None]:
    """(session id, artifact id or None) of a resource URI; ValueError for any other."""
    parts = urlsplit(uri)
    path = parts.path.lstrip("/").split("/")
    if parts.scheme != SCHEME or parts.netloc != "sessions" or not path[0] or len(path) > 2:
        raise ValueError(
            f"not a TokenPilot resource: {uri!r} (expected {SCHEME}://sessions/<session>[/<id>])"
        )
    return unquote(path[0]), (path[1] if len(path) == 2 and path[1] else None)


def listing_text(session_id: str, rows: list[Kept]) -> str:
    """The originals a session keeps, as a Markdown table."""
    if not rows:
        return f"Session {session_id} keeps no originals."
    out = [
        f"Originals TokenPilot keeps for session {session_id} ({len(rows)}); "
        f"read one with recall_artifact or {session_uri(session_id, '<id>')}.",
        "",
        "| artifact | tool | chars | lines | message |",
        "|---|---|---:|---:|---:|",
    ]
    for k in rows:
        place = "" if k.message is None else str(k.message)
        out.append(f"| {k.artifact_id} | {k.tool or '(unknown)'} | {k.chars:,} | {k.lines:,} | {place} |")
    return "\n".join(out) + "\n"


def build_server(reader: StoreReader) -> Server:
    """An MCP server over `reader`; each handler runs the store's reads off the event loop."""
    server: Server = Server(NAME, version=__version__, instructions=INSTRUCTIONS)

    @server.list_tools()
    async def _tools() -> list[types.Tool]:
        return [recall_tool(reader.max_chars)]

    @server.call_tool(validate_input=False)  # the checks and messages are the native tool's
    async def _call(name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        if name != RECALL_TOOL["function"]["name"]:
            return _error(f"[tokenpilot: no tool {name!r}; this server offers recall_artifact]")
        answer = await anyio.to_thread.run_sync(reader.recall, arguments if arguments is not None else {})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=answer.text)], isError=answer.error
        )

    @server.list_resources()
    async def _resources() -> list[types.Resource]:
        sessions = await anyio.to_thread.run_sync(_sessions_or_error, reader)
        return [
            types.Resource(
                uri=session_uri(sid),  # type: ignore[arg-type]
                name=f"session {sid}",
                title=f"TokenPilot originals of session {sid}",
                description=f"last written {_when(at)}",
                mimeType="text/markdown",
            )
            for sid, at in sessions[:LISTED_SESSIONS]
        ]

    @server.list_resource_templates()
    async def _templates() -> list[types.ResourceTemplate]:
        return [
            types.ResourceTemplate(
                uriTemplate=f"{SCHEME}://sessions/{{session}}",
                name="session",
                description="the originals a session keeps: id, tool, size, message",
                mimeType="text/markdown",
            ),
            types.ResourceTemplate(
                uriTemplate=f"{SCHEME}://sessions/{{session}}/{{artifact_id}}",
                name="original",
                description="one original, whole, as the tool printed it",
                mimeType="text/plain",
            ),
        ]

    @server.read_resource()
    async def _read(uri: Any) -> Iterable[ReadResourceContents]:
        return await anyio.to_thread.run_sync(_read_resource, reader, str(uri))

    return server


INSTRUCTIONS = (
    "TokenPilot shortens long tool outputs and evicts finished work from the prompt, and keeps "
    "every original. recall_artifact returns one by the art_ id quoted where it was shortened: "
    "whole, by line range, or the lines matching a pattern."
)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=True)


def _mcp_error(code: int, message: str) -> McpError:
    """A JSON-RPC error for a resource request (resources have no `isError` result)."""
    return McpError(types.ErrorData(code=code, message=message))


def _sessions_or_error(reader: StoreReader) -> list[tuple[str, float]]:
    try:
        return reader.sessions()
    except OSError as exc:
        raise _mcp_error(types.INTERNAL_ERROR, f"the store could not be read: {exc}") from exc


def _read_resource(reader: StoreReader, uri: str) -> list[ReadResourceContents]:
    try:
        session, aid = parse_uri(uri)
    except ValueError as exc:
        raise _mcp_error(types.INVALID_PARAMS, str(exc)) from exc
    try:
        if aid is None:
            return [ReadResourceContents(listing_text(session, reader.kept(session)), "text/markdown")]
        return [ReadResourceContents(reader.artifacts.get(session, aid), "text/plain")]
    except ArtifactNotFound as exc:
        raise _mcp_error(types.INVALID_PARAMS, f"no artifact {aid!r} in session {session!r}") from exc
    except OSError as exc:
        raise _mcp_error(types.INTERNAL_ERROR, f"the store could not be read: {exc}") from exc


def _when(at: float) -> str:
    if at <= 0:
        return "(closed)"
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
