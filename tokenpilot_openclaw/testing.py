"""A scripted OpenAI-compatible upstream, for tests, the benchmark and trying the proxy.

`FakeUpstream` answers `POST /v1/chat/completions` and `POST /v1/responses`
(streaming and not) and `GET /v1/models`, records every request, and reports prompt caching the way OpenAI
does: `cached_tokens` is the longest common prefix with an earlier prompt (same
`prompt_cache_key` or one of the last few), tools first, at ~4 chars per token,
counted in 128-token steps from 1024. A `responder` decides each reply; `faults`
inject errors, delays and broken streams.

`FakeAnthropic` answers `POST /v1/messages` (streaming and not) and
`/v1/messages/count_tokens` the way Anthropic does where TokenPilot depends on it: more
than 4 `cache_control` markers or a broken tool_use/tool_result pairing is a 400, and
cache reads are the longest earlier-written prefix found at a breakpoint or up to 20
blocks before one.

    python -m tokenpilot_openclaw.testing --port 18080
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any] | str
    id: str = ""

    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True, slots=True)
class Reply:
    """What the fake model says: text, or tool calls (then `text` is usually empty)."""

    text: str = "ok"
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected misbehaviour, used by the next request.

    `status`: answer with it and `body`. `delay_s`: wait before the response head.
    `cut_after`: drop the connection after that many stream events. `eof_after`: end
    the stream cleanly after that many events, unfinished. `stall_after` / `stall_s`:
    go silent mid-stream.
    """

    status: int | None = None
    body: bytes = b'{"error": {"message": "injected upstream failure", "type": "server_error", "code": null}}'
    delay_s: float = 0.0
    cut_after: int | None = None
    eof_after: int | None = None
    stall_after: int | None = None
    stall_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request as the upstream saw it, and the usage it reported."""

    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    prompt: str
    prompt_tokens: int
    cached_tokens: int


Responder = Callable[[dict[str, Any]], Reply]


def prompt_text(body: Mapping[str, Any]) -> str:
    """The cacheable prompt in provider order: tools, then messages, as sent (key order kept)."""
    parts = [json.dumps(body.get("tools") or [], ensure_ascii=False, separators=(",", ":"))]
    parts += [json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in body.get("messages") or []]
    return "\n".join(parts)


def common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix (binary search over C-speed slice compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


_S = TypeVar("_S", bound="_LocalServer")


class _LocalServer(ABC):
    """Start/stop of a fake upstream on 127.0.0.1 (`app()` gives its routes); its
    subclasses are dataclasses with `url` and `_runner` fields."""

    url: str
    _runner: web.AppRunner | None

    @abstractmethod
    def app(self) -> web.Application: ...

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        h, p = self._runner.addresses[0][:2]
        self.url = f"http://{h}:{p}/v1"
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self: _S) -> _S:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@dataclass
class FakeUpstream(_LocalServer):
    """In-process OpenAI-compatible server; `await start()` returns its `/v1` base URL."""

    responder: Responder | None = None
    models: tuple[str, ...] = ("fake-model",)
    cache_min_tokens: int = 1024
    cache_step_tokens: int = 128
    chunk_chars: int = 16
    chunk_delay_s: float = 0.0
    recent: int = 16
    requests: list[Recorded] = field(default_factory=list)
    faults: deque[Fault] = field(default_factory=deque)
    url: str = ""
    _runner: web.AppRunner | None = None
    _by_key: dict[str, str] = field(default_factory=dict)
    _recent: deque[str] = field(default_factory=deque)
    _seq: int = 0

    # -- control ------------------------------------------------------------------
    def fail_next(self, fault: Fault) -> None:
        self.faults.append(fault)

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def responses_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/responses")]

    # -- server -------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._models)
        return app

    # -- handlers -------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        self.requests.append(Recorded(request.path, dict(request.headers), b"", None, "", 0, 0))
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    def _cache(self, body: Mapping[str, Any], prompt: str) -> int:
        key = body.get("prompt_cache_key")
        candidates = list(self._recent)
        if isinstance(key, str) and key in self._by_key:
            candidates.append(self._by_key[key])
        lcp = max((common_prefix_len(prompt, c) for c in candidates), default=0)
        if isinstance(key, str):
            self._by_key[key] = prompt
        self._recent.append(prompt)
        while len(self._recent) > self.recent:
            self._recent.popleft()
        tokens = lcp // CHARS_PER_TOKEN
        if tokens < self.cache_min_tokens:
            return 0
        return tokens // self.cache_step_tokens * self.cache_step_tokens

    async def _receive(
        self, request: web.Request, prompt_of: Callable[[Any], str]
    ) -> tuple[Recorded, Fault | None] | web.Response:
        """Read and record one request (its prompt as `prompt_of` flattens it, and what of
        it is cached); the next planned fault; a 400 for a body that is not JSON."""
        raw = await request.read()
        fault = self.faults.popleft() if self.faults else None
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response(
                {"error": {"message": "invalid JSON", "type": "invalid_request_error"}}, status=400
            )
        prompt = prompt_of(body)
        cached = self._cache(body, prompt)
        rec = Recorded(
            request.path,
            dict(request.headers),
            raw,
            body,
            prompt,
            max(len(prompt) // CHARS_PER_TOKEN, 1),
            cached,
        )
        self.requests.append(rec)
        return rec, fault

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        got = await self._receive(request, prompt_text)
        if isinstance(got, web.Response):
            return got
        rec, fault = got
        body, prompt_tokens, cached = rec.body, rec.prompt_tokens, rec.cached_tokens
        if fault is not None and fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        if fault is not None and fault.status is not None:
            return web.Response(status=fault.status, body=fault.body, content_type="application/json")
        reply = self.responder(body) if self.responder else Reply()
        self._seq += 1
        completion_id = f"chatcmpl-fake{self._seq}"
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": max(len(reply.text) // CHARS_PER_TOKEN, 1),
            "total_tokens": prompt_tokens + max(len(reply.text) // CHARS_PER_TOKEN, 1),
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        model = body.get("model", self.models[0])
        calls = [
            {
                "id": c.id or f"call_fake_{self._seq}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json()},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
        finish = "tool_calls" if calls else "stop"
        if body.get("stream") is not True:
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if calls:
                message["tool_calls"] = calls
            return web.json_response(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            )
        opts = body.get("stream_options") or {}
        events = _stream_events(completion_id, model, reply.text, calls, finish, self.chunk_chars)
        if opts.get("include_usage"):
            events.append(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        return await self._send_stream(request, events, fault)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """The Responses API: `instructions` and `input` items in, `output` items out."""
        got = await self._receive(request, responses_prompt_text)
        if isinstance(got, web.Response):
            return got
        rec, fault = got
        body, prompt_tokens, cached = rec.body, rec.prompt_tokens, rec.cached_tokens
        if fault is not None and fault.status is not None:
            return web.Response(status=fault.status, body=fault.body, content_type="application/json")
        reply = self.responder(body) if self.responder else Reply()
        self._seq += 1
        n = self._seq
        output: list[dict[str, Any]] = []
        if reply.text:
            output.append({"type": "message", "id": f"msg_fake{n}", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})  # fmt: skip
        for i, c in enumerate(reply.tool_calls):
            output.append({"type": "function_call", "id": f"fc_fake{n}_{i}", "call_id": c.id or f"call_fake_{n}_{i}",
                           "name": c.name, "arguments": c.arguments_json(), "status": "completed"})  # fmt: skip
        out_tokens = max(len(reply.text) // CHARS_PER_TOKEN, 1)
        response = {
            "id": f"resp_fake{n}", "object": "response", "created_at": 0, "status": "completed",
            "model": body.get("model", self.models[0]), "output": output, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached},
                      "output_tokens": out_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": prompt_tokens + out_tokens},
        }  # fmt: skip
        if body.get("stream") is not True:
            return web.json_response(response)
        events = _responses_events(response, self.chunk_chars)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for e in events:
            await resp.write(f"event: {e['type']}\ndata: ".encode() + json.dumps(e).encode() + b"\n\n")
        await resp.write_eof()
        return resp

    async def _send_stream(
        self, request: web.Request, events: list[dict[str, Any]], fault: Fault | None
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        payloads = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
        try:
            for n, payload in enumerate(payloads):
                if fault is not None:
                    if fault.cut_after is not None and n == fault.cut_after:
                        assert request.transport is not None
                        request.transport.close()  # no terminating chunk: the client sees a broken body
                        return resp
                    if fault.eof_after is not None and n == fault.eof_after:
                        await resp.write_eof()
                        return resp
                    if fault.stall_after is not None and n == fault.stall_after:
                        await asyncio.sleep(fault.stall_s)
                await resp.write(payload)
                if self.chunk_delay_s:
                    await asyncio.sleep(self.chunk_delay_s)
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client went away (a killed proxy): nothing to tell it
        return resp


def _stream_events(
    completion_id: str, model: str, text: str, calls: list[dict[str, Any]], finish: str, chunk_chars: int
) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    step = max(chunk_chars, 1)
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": text[i : i + step]}) for i in range(0, len(text), step)]
    for i, call in enumerate(calls):
        head = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        args = call["function"]["arguments"]
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": args[j : j + step]}}]})
            for j in range(0, len(args), step)
        ]
    events.append(chunk({}, finish))
    return events


def responses_prompt_text(body: Mapping[str, Any]) -> str:
    """A Responses request's cacheable prompt: tools, instructions, then input items, as sent."""
    inp = body.get("input")
    items = [{"role": "user", "content": inp}] if isinstance(inp, str) else list(inp or [])
    parts = [json.dumps(body.get("tools") or [], ensure_ascii=False, separators=(",", ":"))]
    parts.append(json.dumps(body.get("instructions") or "", ensure_ascii=False))
    parts += [json.dumps(x, ensure_ascii=False, separators=(",", ":")) for x in items]
    return "\n".join(parts)


def _responses_events(response: Mapping[str, Any], chunk_chars: int) -> list[dict[str, Any]]:
    """The Responses stream of a finished `response`, item by item (sequence numbers in order)."""
    step = max(chunk_chars, 1)
    head = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": head},
        {"type": "response.in_progress", "response": head},
    ]
    for k, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append({"type": "response.output_item.added", "output_index": k,
                           "item": {**item, "status": "in_progress", "content": []}})  # fmt: skip
            part = {"type": "output_text", "text": "", "annotations": []}
            base = {"item_id": item["id"], "output_index": k, "content_index": 0}
            events.append({"type": "response.content_part.added", **base, "part": part})
            events += [{"type": "response.output_text.delta", **base, "delta": text[i : i + step]}
                       for i in range(0, len(text), step)]  # fmt: skip
            events.append({"type": "response.output_text.done", **base, "text": text})
            events.append({"type": "response.content_part.done", **base, "part": {**part, "text": text}})
        else:
            args = item["arguments"]
            events.append({"type": "response.output_item.added", "output_index": k,
                           "item": {**item, "status": "in_progress", "arguments": ""}})  # fmt: skip
            base = {"item_id": item["id"], "output_index": k}
            events += [{"type": "response.function_call_arguments.delta", **base, "delta": args[i : i + step]}
                       for i in range(0, len(args), step)]  # fmt: skip
            events.append({"type": "response.function_call_arguments.done", **base, "arguments": args})
        events.append({"type": "response.output_item.done", "output_index": k, "item": item})
    events.append({"type": "response.completed", "response": response})
    return [{**e, "sequence_number": i} for i, e in enumerate(events)]


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
class FakeAnthropic(_LocalServer):
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
        from .proxy.anthropic_render import breakpoints, pairing_errors

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


# ---------------------------------------------------------------------------
# Running servers from synchronous code (e2e tests, scripts)
# ---------------------------------------------------------------------------
class LoopThread:
    """An event loop in a daemon thread; `run(coro)` executes a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tokenpilot-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[Any], timeout: float | None = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tokenpilot_openclaw.testing", description="Scripted fake OpenAI-compatible upstream."
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18080)
    p.add_argument(
        "--chunk-delay", type=float, default=0.0, help="seconds between stream events (simulated generation)"
    )
    p.add_argument("--text", default="ok", help="what the fake model answers")
    args = p.parse_args(argv)

    async def run() -> None:
        upstream = FakeUpstream(responder=lambda _body: Reply(args.text), chunk_delay_s=args.chunk_delay)
        url = await upstream.start(args.host, args.port)
        print(url, flush=True)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await stop.wait()
        await upstream.close()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
