"""Command-line hooks: `register(subparsers)` mounts `serve` and `openclaw` on `tokenpilot`.

Handlers import their modules lazily, so `tokenpilot --help` works without aiohttp.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tokenpilot.cli import run


def register(subparsers: Any) -> None:
    """Add `serve` and `openclaw {install,doctor}` to a parent CLI's subparsers."""
    _add_serve(subparsers)
    _add_openclaw(subparsers)


def _add_serve(subparsers: Any) -> None:
    try:
        from .server import build_parser
    except ImportError as exc:  # aiohttp missing: say how to get it when `serve` is used
        reason = str(exc)
        p = subparsers.add_parser(
            "serve", help="run the TokenPilot proxy (needs: pip install 'tokenpilot[openclaw]')"
        )
        # its real options are unknown here: take any, and say what to install
        p.set_defaults(func=lambda _args: _missing(reason), accepts_unknown_args=True)
        return
    build_parser(subparsers)


def _missing(exc: str) -> int:
    print(
        f"tokenpilot serve needs the OpenClaw extra: pip install 'tokenpilot[openclaw]' ({exc})",
        file=sys.stderr,
    )
    return 2


def _add_openclaw(subparsers: Any) -> None:
    from .doctor import add_doctor_arguments, run_doctor
    from .install import add_install_arguments, run_install

    p = subparsers.add_parser("openclaw", help="enable TokenPilot in OpenClaw's config, and check it")
    sub = p.add_subparsers(dest="openclaw_command", required=True)
    i = sub.add_parser(
        "install", help="write the TokenPilot provider and plugin into ~/.openclaw/openclaw.json"
    )
    add_install_arguments(i)
    i.set_defaults(func=run_install)
    d = sub.add_parser("doctor", help="check the config, the proxy's health and whether cache hits come back")
    add_doctor_arguments(d)
    d.set_defaults(func=run_doctor)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (`python -m tokenpilot_openclaw`), same commands as `tokenpilot`."""
    parser = argparse.ArgumentParser(prog="python -m tokenpilot_openclaw")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what TokenPilot decides (INFO level)"
    )
    register(parser.add_subparsers(dest="command", required=True))
    return run(parser, argv)
