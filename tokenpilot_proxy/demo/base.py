"""What the built-in upstreams share: the scripted replies, the record of each request, and
starting one on 127.0.0.1 (also from synchronous code, in a loop thread).
"""

from __future__ import annotations

import asyncio
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any] | str
    id: str = ""
    custom: bool = False  # Responses: a custom tool's call (free-form `input`, e.g. Codex's `exec`)

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


_S = TypeVar("_S", bound="LocalServer")


class LocalServer(ABC):
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
