"""Client connections: the file limit, a cap on open connections, and accept errors said once.

Issue #23: 1,100 silent connections at the default limit of 1,024 files left `/health`
and chat unanswered while asyncio logged thousands of `accept()` tracebacks a second.
Three defences, each on its own:

- `raise_fd_limit`: the soft file limit goes up to the hard one at start-up;
- `ConnectionGate`: at most `cap` client connections. A new one over the cap first
  closes the oldest *idle* connection (one with no request in progress: silent, half a
  header, or kept alive between requests); only when every connection is busy with a
  request is the newcomer refused, with a 503 JSON answer and `Retry-After`;
- `AcceptErrorLog`: the event loop's "out of system resource" errors are logged once
  per outage, then counted, not printed with a traceback each.

The client read timeout lives in the proxy's middleware and aiohttp's keep-alive timer.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import resource
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

log = logging.getLogger("tokenpilot.openclaw")

BACKLOG = 128  # the listen queue, and how many connections asyncio accepts in one go
# Files the cap leaves for the rest: asyncio accepts up to BACKLOG connections per loop turn
# and a closed one frees its file a turn or two later, so a flood has about three bursts
# open beyond the cap; then the store, the logs and Redis.
FD_RESERVE = 3 * BACKLOG + 64
MAX_DEFAULT_CONNECTIONS = 1024
REFUSAL_LINGER_S = 2.0  # how long a refused connection is read (so the 503 is not lost to a reset)
MAX_REFUSING = 64  # refusals being answered at once; beyond that, a newcomer is just closed
RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard one; (before, after). Logged."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:  # a platform that refuses (macOS caps at OPEN_MAX)
            log.warning("tokenpilot: could not raise the open-file limit from %d: %s", soft, exc)
            return soft, soft
        log.info("tokenpilot: open-file limit raised from %d to %d", soft, target)
        return soft, target
    log.info("tokenpilot: open-file limit %s", "unlimited" if soft == resource.RLIM_INFINITY else soft)
    return soft, soft


def default_max_connections(fd_limit: int | None = None) -> int:
    """The connection cap when none is given: half of what the file limit leaves after
    `FD_RESERVE` (each client's request may hold an upstream connection too), at most 1,024."""
    if fd_limit is None:
        fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if fd_limit == resource.RLIM_INFINITY:
        return MAX_DEFAULT_CONNECTIONS
    return max(8, min(MAX_DEFAULT_CONNECTIONS, (fd_limit - FD_RESERVE) // 2))


def refusal_bytes(retry_after_s: int = 1) -> bytes:
    """The whole HTTP answer to a connection over the cap: 503, JSON, then close."""
    body = json.dumps(
        {
            "error": {
                "message": "the TokenPilot proxy has too many open connections; retry shortly",
                "type": "server_error",
                "code": "too_many_connections",
            }
        }
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Retry-After: {retry_after_s}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class _Refusal(asyncio.Protocol):
    """Answers one connection with `refusal_bytes`, after reading its request head (or a
    short wait), then reads and drops what else comes for `REFUSAL_LINGER_S` and closes:
    closing with unread data would reset the connection and lose the answer."""

    def __init__(self, gate: ConnectionGate) -> None:
        self.gate = gate
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.answered = False
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.gate.refusing += 1
        self.timer = asyncio.get_running_loop().call_later(REFUSAL_LINGER_S / 2, self._answer)

    def data_received(self, data: bytes) -> None:
        if not self.answered:
            self.head = (self.head + data)[-4:]
            if b"\r\n\r\n" in self.head:
                self._answer()

    def _answer(self) -> None:
        if self.transport is None or self.answered:
            return
        self.answered = True
        self.transport.write(refusal_bytes())
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_later(REFUSAL_LINGER_S, self.transport.close)

    def eof_received(self) -> bool:
        self._answer()
        return True  # keep the transport: it closes after the answer is out

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None
        self.gate.refusing -= 1


@dataclass
class ConnectionGate:
    """The listening socket's protocol factory: aiohttp's, behind the connection cap.

    `busy` holds the aiohttp protocols of connections with a request in progress (kept
    by the proxy's middleware); every other open connection is idle and may be closed
    to make room.
    """

    server: web.Server
    cap: int
    busy: Collection[object]
    refusing: int = 0
    evicted: int = 0
    refused: int = 0
    _said: float = field(default=0.0)  # when the cap was last logged

    def __post_init__(self) -> None:
        if self.cap < 1:
            raise ValueError("the connection cap must be at least 1")

    def __call__(self) -> asyncio.BaseProtocol:
        conns = self.server.connections
        if len(conns) >= self.cap:
            live = [h for h in conns if h.transport is not None]
            if len(live) >= self.cap:
                idle = next((h for h in live if h not in self.busy), None)
                if idle is None:
                    self.refused += 1
                    self._say()
                    return _Refusal(self) if self.refusing < MAX_REFUSING else _Dropped()
                idle.force_close()  # the oldest idle one: a silent client or a kept-alive one
                self.evicted += 1
                self._say()
        return self.server()

    def _say(self) -> None:
        """Log the cap at most once a minute, with what it did since."""
        now = time.monotonic()
        if now - self._said >= 60.0:
            self._said = now
            log.warning(
                "tokenpilot: %d client connections open (the cap, --max-connections): "
                "%d idle one(s) closed, %d refused with 503 so far",
                self.cap,
                self.evicted,
                self.refused,
            )


class _Dropped(asyncio.Protocol):
    """Too many refusals at once: close at once (the client sees a reset and retries)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class GatedSite(web.BaseSite):
    """A TCP site whose connections go through a `ConnectionGate`."""

    __slots__ = ("_host", "_port", "_make_gate", "_reuse_port")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        make_gate: Callable[[web.Server], ConnectionGate],
        *,
        reuse_port: bool | None = None,
    ) -> None:
        super().__init__(runner)
        self._host, self._port, self._make_gate = host, port, make_gate
        self._reuse_port = reuse_port  # `serve --workers`: each worker binds the one port

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._make_gate(server), self._host, self._port, backlog=BACKLOG, reuse_port=self._reuse_port
        )


@dataclass
class AcceptErrorLog:
    """An event-loop exception handler: "out of system resource" errors (EMFILE and kin)
    are logged once per outage without a traceback, then counted; anything else goes to
    the handler that was there before."""

    previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None = None
    quiet_s: float = 60.0  # an outage ends after this long without such an error
    suppressed: int = 0
    _last: float = field(default=-1e9)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
            now = time.monotonic()
            if now - self._last > self.quiet_s:
                extra = f" ({self.suppressed} more since the last report)" if self.suppressed else ""
                log.error(
                    "tokenpilot: cannot accept connections: %s: %s%s; raise the file limit "
                    "(ulimit -n) or lower --max-connections",
                    context.get("message", "accept failed"),
                    exc.strerror or exc,
                    extra,
                )
                self.suppressed = 0
            else:
                self.suppressed += 1
            self._last = now
            return
        if self.previous is not None:
            self.previous(loop, context)
        else:
            loop.default_exception_handler(context)
