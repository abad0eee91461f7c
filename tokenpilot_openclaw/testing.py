"""A scripted OpenAI-compatible upstream, for tests, the benchmark and trying the proxy.

`FakeUpstream` answers `POST /v1/chat/completions` (streaming and not) and
`GET /v1/models`, records every request, and reports prompt caching the way OpenAI
does: `cached_tokens` is the longest common prefix with an earlier prompt (same
`prompt_cache_key` or one of the last few), tools first, at ~4 chars per token,
counted in 128-token steps from 1024. A `responder` decides each reply; `faults`
inject errors, delays and broken streams.

    python -m tokenpilot_openclaw.testing --port 18080
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class FakeUpstream:
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

    # -- server -------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        return app

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

    async def __aenter__(self) -> FakeUpstream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        fault = self.faults.popleft() if self.faults else None
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response(
                {"error": {"message": "invalid JSON", "type": "invalid_request_error"}}, status=400
            )
        prompt = prompt_text(body)
        cached = self._cache(body, prompt)
        prompt_tokens = max(len(prompt) // CHARS_PER_TOKEN, 1)
        self.requests.append(
            Recorded(request.path, dict(request.headers), raw, body, prompt, prompt_tokens, cached)
        )
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
