"""`python -m tokenpilot_proxy.hosts.launch URL -- SERVE-ARGS`: start the proxy when it is down.

What a host's start-up hook runs (Claude Code's `SessionStart`). It asks `URL/health`;
when nothing answers it starts `tokenpilot serve SERVE-ARGS` in its own session (it
outlives the hook), and waits until it answers or `--wait` seconds pass. A lock file
keeps two hosts starting at once from starting two proxies. It always exits 0: a proxy
that cannot start must not stop the host (whose requests then fail with the reason).
Standard library only, offline.
"""

from __future__ import annotations

import argparse
import fcntl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path


def healthy(url: str, timeout_s: float = 1.0) -> bool:
    """Does a TokenPilot proxy answer `GET URL/health`?"""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout_s) as resp:  # noqa: S310
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def pid_file(log_file: Path) -> Path:
    """Where the launcher notes the process id of the proxy it started."""
    return log_file.with_suffix(".pid")


def ensure(url: str, serve_args: Sequence[str], log_file: Path, wait_s: float = 20.0) -> bool:
    """The proxy at `url` is up (started now if it was not); False when it did not come up."""
    if healthy(url):
        return True
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time; the next finds it healthy
        if healthy(url):
            return True
        with open(log_file, "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", "tokenpilot_proxy", "serve", *serve_args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # not killed with the hook's process group
                close_fds=True,
            )
        pid_file(log_file).write_text(f"{proc.pid}\n")  # who to stop, for a person or a test
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if healthy(url, timeout_s=0.5):
                return True
            time.sleep(0.2)
    return False


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="tokenpilot-launch",
        description=__doc__,
        usage="%(prog)s URL --log-file PATH [--wait S] -- SERVE-OPTIONS",
    )
    p.add_argument("url", help="the proxy's base URL, without /v1")
    p.add_argument("--log-file", type=Path, required=True)
    p.add_argument("--wait", type=float, default=20.0)
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: the `tokenpilot serve` options
    args = p.parse_args(argv[:cut])
    serve_args = argv[cut + 1 :]
    if not ensure(args.url, serve_args, args.log_file, args.wait):
        print(f"tokenpilot: the proxy at {args.url} did not start; see {args.log_file}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
