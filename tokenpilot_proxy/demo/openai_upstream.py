"""`FakeUpstream`: a scripted OpenAI-compatible upstream (`/v1/chat/completions`, `/v1/responses`,
`/v1/models`) that reports prompt caching as OpenAI does: `cached_tokens` is the longest
common prefix with an earlier prompt (same `prompt_cache_key` or one of the last few), tools
first, at ~4 chars per token, in 128-token steps from 1024. A `responder` decides each reply;
`faults` inject errors, delays and broken streams.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tokenpilot_proxy.demo.base import (
    CHARS_PER_TOKEN,
    Fault,
    LocalServer,
    Recorded,
    Reply,
    Responder,
    common_prefix_len,
    prompt_text,
)


@dataclass
class FakeUpstream(LocalServer):
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
            call = {
                "id": f"fc_fake{n}_{i}",
                "call_id": c.id or f"call_fake_{n}_{i}",
                "name": c.name,
                "status": "completed",
            }
            if c.custom:
                output.append({"type": "custom_tool_call", **call, "input": c.arguments_json()})
            else:
                output.append({"type": "function_call", **call, "arguments": c.arguments_json()})
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
        elif item["type"] == "custom_tool_call":
            events.append({"type": "response.output_item.added", "output_index": k,
                           "item": {**item, "status": "in_progress", "input": ""}})  # fmt: skip
            base = {"item_id": item["id"], "output_index": k}
            events.append({"type": "response.custom_tool_call_input.done", **base, "input": item["input"]})
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
