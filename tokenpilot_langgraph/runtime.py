"""In-process bookkeeping per TokenPilot instance (never checkpointed, rebuilt on demand).

- which checkpointed TokenPilot state each session mirrors (so a fresh process, a
  forked thread or another worker imports the checkpoint instead of trusting memory);
- when the agent node has rendered in a superstep (the estimator node waits for it, so
  the estimator result always applies at the *next* render, whatever the thread timing);
- per-thread stats;
- estimator threads started by the hook/middleware paths.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from tokenpilot import TokenPilot
from tokenpilot_langgraph.stats import ThreadStats


class PilotRuntime:
    """Thread-safe per-pilot state shared by every node, hook and middleware using it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.synced: dict[str, Any] = {}  # session -> checkpoint version mirrored in memory
        self.rendered: dict[tuple[str, str], tuple[int, int]] = {}  # (session, ns) -> (step, seq)
        self.seq: dict[str, int] = {}  # session -> seq of its latest render
        self.stats: dict[str, ThreadStats] = {}
        self.workers: dict[str, threading.Thread] = {}

    # -- checkpoint mirroring ------------------------------------------------
    def mark_synced(self, session_id: str, version: Any) -> None:
        with self.cond:
            cur = self.synced.get(session_id)
            if cur is None or version > cur:
                self.synced[session_id] = version

    # -- render clock (agent node -> estimator node) -----------------------------
    def mark_rendered(self, session_id: str, ns: str, step: int, seq: int) -> None:
        with self.cond:
            self.rendered[(session_id, ns)] = (step, seq)
            if seq >= 0:
                self.seq[session_id] = seq
            self.cond.notify_all()

    def wait_rendered(self, session_id: str, ns: str, step: int, timeout: float) -> int | None:
        """Block until the agent node rendered in superstep `step`; its seq, or None on timeout."""
        with self.cond:
            # equality, not >=: after a fork to an older checkpoint, steps start over
            ok = self.cond.wait_for(lambda: self.rendered.get((session_id, ns), (-1, 0))[0] == step, timeout)
            return self.rendered[(session_id, ns)][1] if ok else None

    # -- stats -------------------------------------------------------------
    def thread_stats(self, session_id: str) -> ThreadStats:
        with self.cond:
            st = self.stats.get(session_id)
            if st is None:
                st = self.stats[session_id] = ThreadStats(session_id)
            return st

    # -- background estimator runs (hook / middleware) ----------------------------
    def start_worker(self, session_id: str, fn: Callable[[], Any]) -> None:
        t = threading.Thread(target=fn, name=f"tokenpilot-estimator-{session_id}", daemon=True)
        with self.cond:
            self.workers[session_id] = t
        t.start()

    def join_worker(self, session_id: str) -> None:
        with self.cond:
            t = self.workers.pop(session_id, None)
        if t is not None:
            t.join()


_RUNTIMES: weakref.WeakKeyDictionary[TokenPilot, PilotRuntime] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def runtime_for(pilot: TokenPilot) -> PilotRuntime:
    with _LOCK:
        rt = _RUNTIMES.get(pilot)
        if rt is None:
            rt = _RUNTIMES[pilot] = PilotRuntime()
        return rt


def thread_stats(pilot: TokenPilot, thread_id: str) -> ThreadStats:
    """The stats of one thread (session) served by `pilot` in this process."""
    return runtime_for(pilot).thread_stats(thread_id)


def all_thread_stats(pilot: TokenPilot) -> dict[str, ThreadStats]:
    rt = runtime_for(pilot)
    with rt.cond:
        return dict(rt.stats)
