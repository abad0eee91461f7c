"""`FakeAnthropic`: a scripted Anthropic Messages upstream (`/v1/messages`, streaming and not,
and `/v1/messages/count_tokens`) that behaves as Anthropic does where TokenPilot depends on
it: more than 4 `cache_control` markers or a broken tool_use/tool_result pairing is a 400,
and cache reads are the longest earlier-written prefix found at a breakpoint or up to 20
blocks before one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tokenpilot_proxy.demo.base import CHARS_PER_TOKEN, LocalServer, Recorded, Reply, Responder

# ---------------------------------------------------------------------------
# A fake Anthropic Messages upstream
# ---------------------------------------------------------------------------
ANTHROPIC_LOOKBACK_BLOCKS = 20
ANTHROPIC_MAX_BREAKPOINTS = 4


def anthropic_blocks(body: Mapping[str, Any]) -> tuple[list[str], list[int]]:
    """The cacheable prompt as serialised blocks (tools, system, messages; markers left out),
    and the indexes of the blocks that carry a cache_control marker."""
    blocks: list[str] = []
    marks: list[int] = []

    def add(where: str, block: Any) -> None:
        if isinstance(block, dict) and "cache_control" in block:
            marks.append(len(blocks))
            block = {k: v for k, v in block.items() if k != "cache_control"}
        blocks.append(where + json.dumps(block, ensure_ascii=False, separators=(",", ":")))

    for t in body.get("tools") or []:
        add("tool:", t)
    system = body.get("system")
    for b in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
        add("system:", b)
    for i, m in enumerate(body.get("messages") or []):
        content = m.get("content")
        for b in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
            add(f"{i}:{m.get('role')}:", b)
    return blocks, marks


def _anthropic_error(message: str, status: int = 400) -> web.Response:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return web.json_response(body, status=status)


@dataclass
class FakeAnthropic(LocalServer):
    """In-process Anthropic Messages server; `await start()` returns its `/v1` base URL."""

    responder: Responder | None = None
    min_cache_tokens: int = 1024
    chunk_chars: int = 16
    requests: list[Recorded] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _written: set[str] = field(default_factory=set)
    _seq: int = 0

    def messages_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/v1/messages"]

    def count_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/count_tokens")]

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count)
        return app

    def _refusal(self, body: Any) -> str | None:
        """Why Anthropic would refuse the body (None: it would not)."""
        from tokenpilot_proxy.anthropic_render import breakpoints, pairing_errors

        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return "messages: field required"
        n = breakpoints(body)
        if n > ANTHROPIC_MAX_BREAKPOINTS:
            return f"A maximum of {ANTHROPIC_MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {n}."
        errors = pairing_errors(body["messages"])
        return f"tool pairing: {errors[0]}" if errors else None

    def _cache(self, body: Mapping[str, Any]) -> tuple[int, int, int]:
        """(uncached input, cache read, cache write) tokens, Anthropic's way."""
        blocks, marks = anthropic_blocks(body)
        digests, h, ends, total = [], hashlib.sha256(), [], 0
        for b in blocks:
            h.update(b.encode("utf-8", "surrogatepass") + b"\0")
            digests.append(h.hexdigest())
            total += len(b)
            ends.append(total)
        read_at = -1
        for m in marks:
            for j in range(m, max(m - ANTHROPIC_LOOKBACK_BLOCKS, -1), -1):
                if digests[j] in self._written:
                    read_at = max(read_at, j)
                    break
        read = ends[read_at] // CHARS_PER_TOKEN if read_at >= 0 else 0
        last = max(marks, default=-1)
        write = 0
        if last >= 0 and ends[last] // CHARS_PER_TOKEN >= self.min_cache_tokens:
            for m in marks:
                if ends[m] // CHARS_PER_TOKEN >= self.min_cache_tokens:
                    self._written.add(digests[m])
            write = max(ends[last] // CHARS_PER_TOKEN - read, 0)
        if read < self.min_cache_tokens:
            read = 0
        total_tokens = max(total // CHARS_PER_TOKEN, 1)
        return max(total_tokens - read - write, 0), read, write

    async def _count(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw)
        blocks, _ = anthropic_blocks(body)
        tokens = max(sum(len(b) for b in blocks) // CHARS_PER_TOKEN, 1)
        self.requests.append(Recorded(request.path, dict(request.headers), raw, body, "", tokens, 0))
        if "stream" in body or "max_tokens" in body:
            return _anthropic_error("count_tokens: extra inputs are not permitted")
        if (why := self._refusal(body)) is not None:
            return _anthropic_error(why)
        return web.json_response({"input_tokens": tokens})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return _anthropic_error("invalid JSON")
        if (why := self._refusal(body)) is not None:
            self.requests.append(Recorded(request.path, dict(request.headers), raw, body, "", 0, 0))
            return _anthropic_error(why)
        uncached, read, write = self._cache(body)
        self.requests.append(
            Recorded(request.path, dict(request.headers), raw, body, "", uncached + read + write, read)
        )
        reply = self.responder(body) if self.responder else Reply()
        self._seq += 1
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        for i, c in enumerate(reply.tool_calls):
            args = c.arguments if isinstance(c.arguments, Mapping) else json.loads(c.arguments or "{}")
            content.append({"type": "tool_use", "id": c.id or f"toolu_fake{self._seq}_{i}", "name": c.name,
                            "input": dict(args)})  # fmt: skip
        out_tokens = max(len(reply.text) // CHARS_PER_TOKEN, 1)
        usage = {"input_tokens": uncached, "cache_creation_input_tokens": write,
                 "cache_read_input_tokens": read, "output_tokens": out_tokens}  # fmt: skip
        message = {"id": f"msg_fake{self._seq}", "type": "message", "role": "assistant",
                   "model": body.get("model", "claude-fake"), "content": content,
                   "stop_reason": "tool_use" if reply.tool_calls else "end_turn", "stop_sequence": None,
                   "usage": usage}  # fmt: skip
        if body.get("stream") is not True:
            return web.json_response(message)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for e in _anthropic_events(message, self.chunk_chars):
            await resp.write(f"event: {e['type']}\ndata: ".encode() + json.dumps(e).encode() + b"\n\n")
        await resp.write_eof()
        return resp


def _anthropic_events(message: Mapping[str, Any], chunk_chars: int) -> list[dict[str, Any]]:
    step = max(chunk_chars, 1)
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for i, b in enumerate(message["content"]):
        if b["type"] == "text":
            events.append(
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}
            )
            events += [{"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"][j : j + step]}}
                       for j in range(0, len(b["text"]), step)]  # fmt: skip
        else:
            events.append({"type": "content_block_start", "index": i, "content_block": {**b, "input": {}}})
            args = json.dumps(b["input"])
            events += [{"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": args[j : j + step]}}
                       for j in range(0, len(args), step)]  # fmt: skip
        events.append({"type": "content_block_stop", "index": i})
    events.append({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                   "usage": {"output_tokens": usage["output_tokens"]}})  # fmt: skip
    events.append({"type": "message_stop"})
    return events
