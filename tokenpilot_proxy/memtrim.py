"""Give memory back to the system after huge request bodies, and hold them no longer
than their request.

A 30 MB body becomes bytes, a str and a tree of many small objects while it is parsed
and prepared. Python frees them when the request ends, but glibc's malloc keeps freed
heap pages (per-thread arenas, fragmented tops) for reuse: without a trim, a proxy that
once served a few huge bodies at the same time keeps a gigabyte resident for good.
`malloc_trim(0)` returns those pages. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import threading
from collections.abc import AsyncIterator, Callable

from aiohttp import web

log = logging.getLogger("tokenpilot.openclaw")

HUGE_BODY_BYTES = 4 * 2**20  # a request at least this large is followed by a trim
HUGE_AT_ONCE = 1  # huge bodies parsed and prepared at the same time (the rest wait their turn)


class BodyStalled(Exception):
    """The client sent no byte of its request body for the idle time (a half-sent body)."""


async def read_body(request: web.Request, limit: int, idle_s: float | None = None) -> bytes:
    """The request body, not cached on the request.

    aiohttp's `request.read()` keeps the bytes on the request object, and a keep-alive
    connection holds its last request until the next one arrives: six agents that each
    sent a 30 MB body kept 180 MB alive after their answers. `HTTPRequestEntityTooLarge`
    past `limit` bytes (a chunked body has no Content-Length to check first);
    `BodyStalled` when nothing arrives for `idle_s` seconds (aiohttp has no body read
    timeout of its own), so a stalled sender never holds a handler for ever.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = await asyncio.wait_for(request.content.readany(), idle_s)
        except asyncio.TimeoutError:
            raise BodyStalled(f"no body bytes for {idle_s:g} s") from None
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
        chunks.append(chunk)


def _load_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_TRIM = _load_trim()


def malloc_trim() -> bool:
    """Return free heap pages to the system; False where glibc's `malloc_trim` is missing."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


class Trimmer:
    """Trims once the last of the huge requests in flight is done.

    Trimming while another huge body is being parsed would only hand back pages it is
    about to take again, so a burst of them is followed by one trim, not one each.
    """

    def __init__(self, threshold: int = HUGE_BODY_BYTES, at_once: int = HUGE_AT_ONCE) -> None:
        self.threshold = threshold
        self._lock = threading.Lock()
        self._in_flight = 0
        self.trims = 0
        self._slots = asyncio.Semaphore(at_once)

    @contextlib.asynccontextmanager
    async def slot(self, size: int | None) -> AsyncIterator[None]:
        """For parsing and preparing a body: a huge one waits for one of
        `at_once` slots. Six 30 MB bodies parsed at once interleave their temporaries
        with what outlives them, and glibc can then give back little of the peak;
        the upstream call itself is made outside the slot."""
        if not self.huge(size):
            yield
            return
        async with self._slots:
            yield

    def huge(self, size: int | None) -> bool:
        return size is not None and size >= self.threshold

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def end(self) -> bool:
        """One huge request done; trims (blocking: call it off the event loop) when it
        was the last. Whether a trim ran."""
        with self._lock:
            self._in_flight -= 1
            last = self._in_flight == 0
        if not last:
            return False
        trimmed = malloc_trim()
        if trimmed:
            with self._lock:
                self.trims += 1
        return trimmed
