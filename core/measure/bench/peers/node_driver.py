"""A long-lived Node process that answers one JSON line with one JSON line.

The peers whose code is JavaScript (OpenClaw's pruning, LightMem2) run in one such
process per bench run: starting Node and importing a package takes seconds, a call
takes milliseconds. Requests go as ASCII JSON, since Node's readline also ends a line
at U+2028 and U+2029.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any


class NodeDriver:
    """`node [flags] <script> [args]`, its script a resource of this package; its first
    line must be `{"ready": true, ...}` (kept in `hello`)."""

    def __init__(
        self,
        what: str,
        node: str,
        script: str,
        args: Sequence[str] = (),
        *,
        node_flags: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.what = what
        with resources.as_file(resources.files(__package__).joinpath(script)) as path:
            self.proc = subprocess.Popen(
                [node, *node_flags, str(path), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                cwd=cwd,
                env={**os.environ, **(env or {})},
            )
        self.lock = threading.Lock()
        self.hello = self._read()
        if not self.hello.get("ready"):
            self.close()
            raise RuntimeError(f"{what} failed to start: {self.hello.get('error', self.hello)}")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"{self.what} exited ({self.proc.returncode}): {err[-2000:]}")
        return json.loads(line)

    def call(self, request: Mapping[str, Any]) -> dict[str, Any]:
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            reply = self._read()
        if "error" in reply:
            raise RuntimeError(f"{self.what}: {str(reply['error'])[:2000]}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
