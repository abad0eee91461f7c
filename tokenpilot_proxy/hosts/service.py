"""How the proxy is running when a host starts: a systemd user service, else a launcher.

A `systemd --user` service is the most robust where there is one (started at login,
restarted on failure, logs in the journal); `systemctl --user` must answer for it
to be used. Elsewhere (containers, macOS, WSL without systemd) the host's own
start-up hook runs the launcher (`launch.py`), which starts `tokenpilot serve`
only when nothing answers on the port. Standard library only.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def systemd_user_available() -> bool:
    """Does `systemctl --user` reach a user manager here (not just exist on PATH)?"""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return False
    try:
        res = subprocess.run(  # noqa: S603
            [systemctl, "--user", "show-environment"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def unit_name(host: str) -> str:
    return f"tokenpilot-{host}.service"


def unit_text(host: str, serve_args: Sequence[str], python: str = sys.executable) -> str:
    """The user unit that runs `tokenpilot serve` for `host`."""
    cmd = shlex.join([python, "-m", "tokenpilot_proxy", "serve", *serve_args])
    return (
        "[Unit]\n"
        f"Description=TokenPilot proxy for {host}\n"
        "After=network.target\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={cmd}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def unit_path(host: str) -> Path:
    return Path.home() / ".config" / "systemd" / "user" / unit_name(host)


def launcher_command(
    url: str, log_file: Path, serve_args: Sequence[str], python: str = sys.executable
) -> str:
    """The shell command a host's start-up hook runs (see `launch.py`)."""
    return shlex.join(
        [
            python,
            "-m",
            "tokenpilot_proxy.hosts.launch",
            url,
            "--log-file",
            str(log_file),
            "--",
            *serve_args,
        ]
    )


def systemctl_user(*args: str) -> tuple[bool, str]:
    systemctl = shutil.which("systemctl") or "systemctl"
    try:
        res = subprocess.run(  # noqa: S603
            [systemctl, "--user", *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return res.returncode == 0, (res.stdout + res.stderr).strip()
