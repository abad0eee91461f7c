"""`tokenpilot serve --workers N`: N proxy processes on one port, and the parent that keeps them.

One proxy process prepares one request at a time (the GIL): a burst of concurrent
sessions queues behind each other's prepares. N workers each bind the port with
SO_REUSEPORT, and the kernel spreads connections over them. They share what replicas
share: the store (the disk store in its multi-process mode, `DiskStore(shared=True)`,
or `--store redis://...`) and the session locks, so any worker serves any call of any
session with the bytes one process would send.

The parent reserves the port (a bound, never listening SO_REUSEPORT socket, so `--port 0`
resolves once and the port stays theirs while a worker restarts), forks the workers
before it starts any thread or event loop, says "serving" once all are ready, restarts
a worker that dies, and on SIGTERM/SIGINT forwards the signal so each worker finishes
its requests and saves its sessions, then exits when they have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from tokenpilot_proxy.settings import ProxySettings, SetupError, read_secrets
from tokenpilot_proxy.upstream import redact_url

log = logging.getLogger("tokenpilot.openclaw")

MAX_WORKERS = 64
STOP_GRACE_S = 30.0  # a worker's requests finish (10 s) and its state is saved, then SIGKILL
QUICK_DEATH_S = 10.0  # a worker dying sooner after its start counts towards giving up
QUICK_DEATHS = 5  # consecutive quick deaths of one worker: something is wrong, stop
# `server.serve`: serves the settings until stopped, calling `on_ready` with its URL once bound
Serve = Callable[..., Awaitable[None]]


@dataclass
class _Worker:
    index: int
    pid: int
    started: float
    ready: bool = False
    quick_deaths: int = 0


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) with SO_REUSEPORT and never listening: it holds the
    port (and resolves port 0) while only the workers' listening sockets take connections."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise SetupError("--workers needs SO_REUSEPORT, which this platform lacks; run one process")
    family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
    except OSError:
        sock.close()
        raise
    return sock


def run_workers(settings: ProxySettings, serve: Serve) -> int:
    """Serve with `settings.workers` processes until SIGTERM/SIGINT; the exit code.
    Each worker runs `serve` (`server.serve`, handed in: the server starts the workers)."""
    if settings.workers > MAX_WORKERS:
        raise SetupError(f"--workers {settings.workers}: at most {MAX_WORKERS}")
    read_secrets(settings)  # a missing secret is said once, here, not by every worker
    sock = reserve_port(settings.host, settings.port)
    try:
        port = sock.getsockname()[1]
        child = replace(settings, port=port, reuse_port=True)
        return Supervisor(child, sock, serve).run()
    finally:
        sock.close()


class Supervisor:
    """The parent: forks, watches and stops the workers (see the module doc)."""

    def __init__(self, settings: ProxySettings, reserved: socket.socket, serve: Serve) -> None:
        self.settings = settings
        self.serve = serve
        self.reserved = reserved
        self.workers: dict[int, _Worker] = {}  # pid -> worker
        self.stopping: int | None = None  # the signal being forwarded
        self.deadline = 0.0
        self.failed = False
        self.parent_pid = os.getpid()  # the workers follow this process out (_stop_with_parent)
        self._ready_r, self._ready_w = os.pipe()
        os.set_blocking(self._ready_r, False)

    def run(self) -> int:
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for i in range(self.settings.workers):
                self._spawn(i)
            announced = False
            while self.workers:
                self._reap()
                self._read_ready()
                if not announced and self.stopping is None and all(w.ready for w in self.workers.values()):
                    announced = len(self.workers) == self.settings.workers
                    if announced:
                        host, port = self.settings.host, self.settings.port
                        print(
                            f"tokenpilot: serving http://{host}:{port} -> {redact_url(self.settings.upstream)} "
                            f"({self.settings.workers} workers, pids {' '.join(str(p) for p in sorted(self.workers))})",
                            flush=True,
                        )
                if self.stopping is not None and time.monotonic() > self.deadline:
                    for pid in list(self.workers):
                        log.error(
                            "tokenpilot: worker pid %d did not stop in %g s; killing it", pid, STOP_GRACE_S
                        )
                        _signal(pid, signal.SIGKILL)
                    self.deadline = float("inf")
                select.select([self._ready_r], [], [], 0.1)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            os.close(self._ready_r)
            os.close(self._ready_w)
        return 1 if self.failed else 0

    # -- signals ----------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: object) -> None:
        """Forward SIGTERM/SIGINT to every worker: each finishes its requests and saves."""
        if self.stopping is None:
            self.stopping = signum
            self.deadline = time.monotonic() + STOP_GRACE_S
        for pid in list(self.workers):
            _signal(pid, signum)

    def _stop_all(self, why: str) -> None:
        log.error("tokenpilot: %s; stopping every worker", why)
        self.failed = True
        self._on_signal(signal.SIGTERM, None)

    # -- workers ----------------------------------------------------------------------
    def _spawn(self, index: int, quick_deaths: int = 0) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the parent's code
            code = 1
            try:
                code = self._worker_main(index)
            except BaseException:  # noqa: BLE001 - whatever it was, said, and the worker ends
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.workers[pid] = _Worker(index, pid, time.monotonic(), quick_deaths=quick_deaths)
        log.info("tokenpilot: worker %d started (pid %d)", index, pid)

    def _worker_main(self, index: int) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)  # until the worker's event loop takes them
        if not _stop_with_parent(self.parent_pid):
            return 0  # the parent died before this worker could ask to follow it
        os.close(self._ready_r)
        self.reserved.close()
        fmt = f"%(asctime)s %(levelname)s [worker {index}] %(message)s"
        for handler in logging.getLogger().handlers:
            handler.setFormatter(logging.Formatter(fmt))

        def ready(_url: str) -> None:
            os.write(self._ready_w, os.getpid().to_bytes(4, "little"))

        try:
            asyncio.run(self.serve(self.settings, on_ready=ready))
        except (SetupError, OSError, ValueError) as exc:
            log.error("tokenpilot: worker %d cannot serve: %s", index, exc)
            return 1
        return 0

    def _read_ready(self) -> None:
        try:
            data = os.read(self._ready_r, 4096)
        except BlockingIOError:
            return
        for i in range(0, len(data) - len(data) % 4, 4):
            pid = int.from_bytes(data[i : i + 4], "little")
            if pid in self.workers:
                self.workers[pid].ready = True

    def _reap(self) -> None:
        while self.workers:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.workers.clear()
                return
            if pid == 0:
                return
            self._read_ready()  # a worker may have said "ready" just before it died
            w = self.workers.pop(pid, None)
            if w is None:
                continue
            how = _exit_text(status)
            if self.stopping is not None:
                if os.waitstatus_to_exitcode(status) != 0:
                    self.failed = True
                log.info("tokenpilot: worker %d (pid %d) stopped (%s)", w.index, pid, how)
                continue
            quick = time.monotonic() - w.started < QUICK_DEATH_S
            deaths = w.quick_deaths + 1 if quick else 0
            if not w.ready and not any(x.ready for x in self.workers.values()) and w.quick_deaths == 0:
                self._stop_all(f"worker {w.index} (pid {pid}) {how} before it was ready")
            elif deaths >= QUICK_DEATHS:
                self._stop_all(
                    f"worker {w.index} died {deaths} times within {QUICK_DEATH_S:g} s of its start"
                )
            else:
                log.warning("tokenpilot: worker %d (pid %d) %s; starting it again", w.index, pid, how)
                self._spawn(w.index, deaths)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _exit_text(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


_PR_SET_PDEATHSIG = 1


def _stop_with_parent(parent_pid: int) -> bool:
    """Ask the kernel to send this worker SIGTERM when its parent dies (Linux), so a
    supervisor killed with SIGKILL leaves no worker serving the port on its own; the
    worker then saves its sessions and exits as on any SIGTERM. False when the parent
    is already gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    return os.getppid() == parent_pid
