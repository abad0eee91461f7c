"""Command-line hooks: `register(subparsers)` mounts `openclaw {install,doctor}` on `tokenpilot`.

Registering imports nothing of the `openclaw` extra; each handler imports its
implementation when the command runs (see `tokenpilot_proxy.cli.lazy`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from tokenpilot.cli import run
from tokenpilot_proxy.cli import lazy
from tokenpilot_proxy.cli import register as register_proxy


def register(subparsers: Any) -> None:
    """Add `openclaw {install,doctor}` to a parent CLI's subparsers."""
    from tokenpilot_openclaw.doctor import add_doctor_arguments
    from tokenpilot_openclaw.install import add_install_arguments

    p = subparsers.add_parser("openclaw", help="enable TokenPilot in OpenClaw's config, and check it")
    sub = p.add_subparsers(dest="openclaw_command", required=True)
    i = sub.add_parser(
        "install", help="write the TokenPilot provider and plugin into ~/.openclaw/openclaw.json"
    )
    add_install_arguments(i)
    i.set_defaults(func=lazy("openclaw install", f"{__package__}.install", "run_install"))
    d = sub.add_parser("doctor", help="check the config, the proxy's health and whether cache hits come back")
    add_doctor_arguments(d)
    d.set_defaults(func=lazy("openclaw doctor", f"{__package__}.doctor", "run_doctor"))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tokenpilot_openclaw`: `openclaw` and, for configs written before the proxy
    had a package of its own (`-m tokenpilot_openclaw serve`), the proxy's commands."""
    parser = argparse.ArgumentParser(prog="python -m tokenpilot_openclaw")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what TokenPilot decides (INFO level)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    register_proxy(sub)
    register(sub)
    return run(parser, argv)
