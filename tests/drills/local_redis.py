"""A private `redis-server` for tests and benchmarks that stall or kill it.

A test that freezes Redis (SIGSTOP: connections accepted, nothing answered) must own the
server, never a shared one. `LocalRedis` starts `redis-server` on a free loopback port,
in memory only, and always resumes and stops it on `close()`.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalRedis:
    """`redis-server` on 127.0.0.1; `url` once `start()` returned."""

    binary: str | None = field(default_factory=lambda: shutil.which("redis-server"))
    port: int = 0
    url: str = ""
    proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 10.0) -> LocalRedis:
        """Start and wait until it answers; `RuntimeError` when there is no binary or it never does.
        Started already and running: nothing to do (a second server on the same port would
        fail to bind, and the first would outlive `close`)."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        if self.binary is None:
            raise RuntimeError("redis-server is not on PATH")
        self.port = self.port or _free_port()
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        """A raw PING (no client library needed)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stall(self) -> None:
        """SIGSTOP: the kernel still accepts connections, the server answers nothing."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Resume (a stopped process ignores SIGTERM until then) and stop the server."""
        if self.proc is None:
            return
        self.resume()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> LocalRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
