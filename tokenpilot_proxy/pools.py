"""The proxy's worker threads: one pool for the chat path, one bounded pool for recalls.

Everything the proxy does off the event loop used to share asyncio's default executor
(a handful of threads). A pattern recall may search for its whole time budget, so two
dozen of them occupied every thread and another session's chat call waited seconds for
a thread to parse and prepare it (issue #23). Now:

- `prepare`: parsing, preparing and saving of requests (chat, messages, responses,
  tool results). Each session's work is serialised by its session lock, so a call
  waits for its own session only.
- `recall`: recalls and searches, few threads (they are CPU-bound; more would only take
  the CPU from the chat path) and a bounded queue: a recall that finds it full is
  refused (`PoolBusy`, answered 503 with Retry-After) rather than queued for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from tokenpilot_proxy.serve_options import DEFAULT_RECALL_QUEUE, DEFAULT_RECALL_WORKERS

T = TypeVar("T")

DEFAULT_PREPARE_WORKERS = 16  # prepares wait on their session's lock at most; CPU is shared anyway


class PoolBusy(RuntimeError):
    """Every worker is busy and the queue is full; `retry_after_s` is a fair wait."""

    def __init__(self, what: str, retry_after_s: int) -> None:
        super().__init__(f"the proxy is busy with other {what}s; retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


RECALL_NICE = 10  # how much lower than the chat path's threads the CPU schedules recalls


def _lower_priority() -> None:
    """Run this worker thread at a lower CPU priority (Linux, where the nice value is per
    thread): when recalls and the chat path compete for the cores, the chat path wins.
    RE2 releases the GIL while it searches, so the GIL is rarely held by a recall."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + RECALL_NICE)


@dataclass
class BoundedPool:
    """A thread pool that holds at most `workers + queue` jobs, running or waiting.

    A job counts until its thread is done with it, even when its caller stopped waiting
    (a cancelled request), so the bound is on threads' work, not on waiting callers.
    """

    name: str
    workers: int
    queue: int
    expected_job_s: float = 0.5  # what one job usually takes: sizes Retry-After
    _pool: ThreadPoolExecutor = field(init=False)
    _pending: int = field(init=False, default=0)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.workers < 1 or self.queue < 0:
            raise ValueError(f"{self.name} pool: workers must be >= 1 and the queue >= 0")
        self._pool = ThreadPoolExecutor(
            self.workers, thread_name_prefix=f"tokenpilot-{self.name}", initializer=_lower_priority
        )

    @property
    def pending(self) -> int:
        """Jobs running or waiting now."""
        return self._pending

    def retry_after_s(self) -> int:
        """About how long until a slot frees up (at least 1 s)."""
        return max(1, math.ceil(self._pending / self.workers * self.expected_job_s))

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn()` on a worker thread; `PoolBusy` at once when the pool is full."""
        with self._lock:
            if self._pending >= self.workers + self.queue:
                raise PoolBusy(self.name, self.retry_after_s())
            self._pending += 1
        try:
            fut = self._pool.submit(fn)
        except BaseException:
            self._done(None)
            raise
        fut.add_done_callback(self._done)
        return await asyncio.wrap_future(fut)

    def _done(self, _fut: Future[object] | None) -> None:
        with self._lock:
            self._pending -= 1

    def close(self) -> None:
        """Stop taking jobs; queued ones are dropped, running ones finish on their own."""
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class Pools:
    """The proxy's two pools (see the module docstring)."""

    prepare_workers: int = DEFAULT_PREPARE_WORKERS
    recall_workers: int = DEFAULT_RECALL_WORKERS
    recall_queue: int = DEFAULT_RECALL_QUEUE
    _prepare: ThreadPoolExecutor = field(init=False)
    recall: BoundedPool = field(init=False)

    def __post_init__(self) -> None:
        if self.prepare_workers < 1:
            raise ValueError("the prepare pool needs at least one worker")
        self._prepare = ThreadPoolExecutor(self.prepare_workers, thread_name_prefix="tokenpilot-prepare")
        self.recall = BoundedPool("recall", self.recall_workers, self.recall_queue)

    async def prepare(self, fn: Callable[[], T]) -> T:
        """`fn()` on the chat path's pool (never queued behind recalls)."""
        return await asyncio.get_running_loop().run_in_executor(self._prepare, fn)

    def close(self) -> None:
        self._prepare.shutdown(wait=False, cancel_futures=True)
        self.recall.close()
