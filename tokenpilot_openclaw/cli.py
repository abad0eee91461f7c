"""Command-line hooks: `register(subparsers)` mounts `serve` and `openclaw` on `tokenpilot`.

Registering imports nothing of the `openclaw` extra: the options live in
standard-library modules, and each handler imports its implementation when the
command runs. A missing extra then costs one line naming the install, and exit 2;
every other command (`tokenpilot bench`) works on a base install.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tokenpilot.cli import run

from .proxy.serve_options import add_serve_arguments

EXTRA = "tokenpilot[openclaw]"
# what the extra brings; a ModuleNotFoundError naming one of these means "install the extra"
EXTRA_MODULES = frozenset({"aiohttp", "json5", "prometheus_client"})


def register(subparsers: Any) -> None:
    """Add `serve`, `doctor`, `enable`/`disable` and `openclaw {install,doctor}` to a parent CLI's subparsers."""
    from .doctor import add_doctor_arguments
    from .install import add_install_arguments

    s = subparsers.add_parser(
        "serve",
        help=f"run the OpenAI-compatible TokenPilot proxy (for OpenClaw, Claude Code, Codex; needs {EXTRA})",
        description="OpenAI-compatible proxy that keeps each session's prompt prefix cached and small.",
    )
    add_serve_arguments(s)
    s.set_defaults(func=_lazy("serve", "proxy.server", "run_from_args"))

    p = subparsers.add_parser("openclaw", help="enable TokenPilot in OpenClaw's config, and check it")
    sub = p.add_subparsers(dest="openclaw_command", required=True)
    i = sub.add_parser(
        "install", help="write the TokenPilot provider and plugin into ~/.openclaw/openclaw.json"
    )
    add_install_arguments(i)
    i.set_defaults(func=_lazy("openclaw install", "install", "run_install"))
    d = sub.add_parser("doctor", help="check the config, the proxy's health and whether cache hits come back")
    add_doctor_arguments(d)
    d.set_defaults(func=_lazy("openclaw doctor", "doctor", "run_doctor"))

    from .host_doctor import add_host_doctor_arguments

    hd = subparsers.add_parser(
        "doctor",
        help="check Claude Code, Codex or OpenClaw's config, the proxy, cache hits and why prefixes broke",
    )
    add_host_doctor_arguments(hd)
    hd.set_defaults(func=_lazy("doctor", "host_doctor", "run_host_doctor"))

    from .hosts import add_disable_arguments, add_enable_arguments

    e = subparsers.add_parser(
        "enable", help="route claude-code, codex or openclaw through TokenPilot for good (backed up)"
    )
    add_enable_arguments(e)
    e.set_defaults(func=_lazy("enable", "hosts.enable", "run_enable"))
    u = subparsers.add_parser("disable", help="restore the host's files as they were before `enable`")
    add_disable_arguments(u)
    u.set_defaults(func=_lazy("disable", "hosts.enable", "run_disable"))


def _lazy(command: str, module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A handler that imports `module.name` only when the command runs."""

    def handler(args: argparse.Namespace) -> int:
        try:
            fn = getattr(importlib.import_module(f"{__package__}.{module}"), name)
            return int(fn(args) or 0)
        except ModuleNotFoundError as exc:
            if exc.name not in EXTRA_MODULES:
                raise
            return missing_extra(command, exc)

    return handler


def missing_extra(command: str, exc: ModuleNotFoundError) -> int:
    print(f"tokenpilot {command} needs the OpenClaw extra: pip install '{EXTRA}' ({exc})", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (`python -m tokenpilot_openclaw`), same commands as `tokenpilot`."""
    parser = argparse.ArgumentParser(prog="python -m tokenpilot_openclaw")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what TokenPilot decides (INFO level)"
    )
    register(parser.add_subparsers(dest="command", required=True))
    return run(parser, argv)
