"""What Codex sends to `/v1/responses` beyond the plain Responses API, and how the proxy meets it.

- Tools in the input: Codex 0.171 sends no top-level `tools`; its tools ride in an
  `additional_tools` input item (`{"type": "additional_tools", "role": "developer",
  "tools": [...]}`, first in `input`). The core is shown those tools (a namespace's
  tools by their qualified names, `functions.exec`, so it sees a shell-like tool and
  registers `recall_artifact` from the first call), and `recall_artifact` is appended to
  that item's tools, never to a top-level `tools` the client did not send: the item then
  stays byte-identical from the first call on, and so does the cached prefix.
- Headers: the client's own (`session-id`, `thread-id`, `originator`, `x-codex-*`,
  `x-openai-internal-codex-responses-lite`, ...) go upstream; only hop-by-hop headers,
  credentials and what the proxy sets itself are dropped.
- WebSocket: Codex with `openai_base_url` tries `ws://…/v1/responses` first. It falls
  back to HTTP at once on 426 Upgrade Required (any other status is retried for
  seconds, openai/codex#43353 shows the 426 path), so the upgrade is refused with 426.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from tokenpilot.ingest.stabilize import MCP_SEPARATOR, MCP_SERVER_NAME, RECALL_TOOL_NAME

ADDITIONAL_TOOLS = "additional_tools"

# Never forwarded: hop-by-hop (RFC 9110 7.6.1), what aiohttp sets for the upstream
# connection, and credentials (the proxy decides the upstream's auth itself).
_DROP = frozenset(
    {
        *("connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"),
        *("proxy-authenticate", "proxy-authorization", "host", "content-length", "content-type"),
        *("accept", "accept-encoding", "authorization", "x-api-key", "api-key", "cookie"),
        *("sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions"),
    }
)


def passthrough_headers(incoming: Mapping[str, str]) -> dict[str, str]:
    """The client's headers worth passing on: all but hop-by-hop, credentials and the
    proxy's own (plus any the client's `Connection` header names as hop-by-hop)."""
    named = {t.strip().lower() for t in incoming.get("connection", "").split(",") if t.strip()}
    return {k.lower(): v for k, v in incoming.items() if k.lower() not in _DROP and k.lower() not in named}


def item_tools(items: Sequence[Any]) -> list[dict[str, Any]] | None:
    """The tools of every `additional_tools` item, in order; None when there is none."""
    found = [i for i in items if isinstance(i, Mapping) and i.get("type") == ADDITIONAL_TOOLS]
    if not found:
        return None
    return [
        t for i in found if isinstance(i.get("tools"), list) for t in i["tools"] if isinstance(t, Mapping)
    ]


def core_view(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Item tools as the core should see them: each named tool, then each namespace's
    tools under qualified names (the core keys tools by name and judges them by it)."""
    out = [dict(t) for t in tools if isinstance(t.get("name"), str)]
    for t in tools:
        if t.get("type") == "namespace" and isinstance(t.get("tools"), list):
            for child in t["tools"]:
                if isinstance(child, Mapping) and isinstance(child.get("name"), str):
                    out.append({**child, "name": f"{t['name']}.{child['name']}"})
    return out


_DEFERRED_BLOCK = "Deferred tool namespaces:"
_NAMESPACE_LINE = re.compile(r"^- ([A-Za-z0-9_.-]+):", re.M)


def deferred_recall(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Our MCP server's `recall_artifact` where Codex defers it: Codex lists the tools of
    an MCP server behind a namespace named only in a developer message (`<tools>` ...
    "Deferred tool namespaces:" ... `- mcp__tokenpilot: ...`), called from `exec` code.
    The core then sees the client's recall tool and adds no copy; the entry is never sent
    (the item path sends only the client's tools and the proxy's own recall tool)."""
    for item in items:
        if not (isinstance(item, Mapping) and item.get("type", "message") == "message"):
            continue
        if item.get("role") != "developer" or not isinstance(item.get("content"), list):
            continue
        for part in item["content"]:
            text = part.get("text") if isinstance(part, Mapping) else None
            if isinstance(text, str) and _DEFERRED_BLOCK in text:
                for ns in _NAMESPACE_LINE.findall(text.split(_DEFERRED_BLOCK, 1)[1]):
                    if ns.endswith(MCP_SEPARATOR + MCP_SERVER_NAME):
                        return [{"type": "function", "name": f"{ns}{MCP_SEPARATOR}{RECALL_TOOL_NAME}"}]
    return []


def add_to_items(items: list[dict[str, Any]], tool: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`items` with `tool` appended to the first `additional_tools` item (a copy), once."""
    out = list(items)
    for n, item in enumerate(out):
        if isinstance(item, Mapping) and item.get("type") == ADDITIONAL_TOOLS:
            tools = list(item.get("tools") or [])
            if not any(isinstance(t, Mapping) and t.get("name") == tool.get("name") for t in tools):
                out[n] = {**item, "tools": [*tools, dict(tool)]}
            break
    return out


async def refuse_websocket(request: web.Request) -> web.Response:
    """`GET /v1/responses`: a WebSocket upgrade gets 426, on which Codex uses HTTP at once;
    any other GET is the wrong method, as before (405)."""
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise web.HTTPMethodNotAllowed(request.method, ["POST"])
    return web.json_response(
        {
            "error": {
                "message": "TokenPilot serves the Responses API over HTTP only; POST /v1/responses",
                "type": "invalid_request_error",
                "code": "websocket_not_supported",
            }
        },
        status=426,
        headers={"Connection": "close"},
    )
