"""Command-line hooks: `register(subparsers)` mounts `serve`, `doctor`, `enable` and `disable`.

Registering imports nothing of the `proxy` extra: the options live in standard-library
modules, and each handler imports its implementation when the command runs. A missing
extra then costs one line naming the install, and exit 2; every other command
(`tokenpilot bench`) works on a base install.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tokenpilot.cli import run
from tokenpilot_proxy.serve_options import add_serve_arguments

EXTRA = "tokenpilot[proxy]"
# what the extras bring; a ModuleNotFoundError naming one of these means "install the extra"
EXTRA_MODULES = {"aiohttp": EXTRA, "prometheus_client": EXTRA, "json5": "tokenpilot[openclaw]"}


def register(subparsers: Any) -> None:
    """Add `serve`, `doctor` and `enable`/`disable` to a parent CLI's subparsers."""
    s = subparsers.add_parser(
        "serve",
        help=f"run the TokenPilot proxy (Claude Code, Codex, Gemini CLI, OpenClaw, any OpenAI client; needs {EXTRA})",
        description="A proxy that keeps each session's prompt prefix cached and small.",
    )
    add_serve_arguments(s)
    s.set_defaults(func=lazy("serve", f"{__package__}.server", "run_from_args"))

    from tokenpilot_proxy.doctor import add_host_doctor_arguments

    hd = subparsers.add_parser(
        "doctor",
        help="check Claude Code, Codex, Gemini CLI or OpenClaw's config, the proxy, cache hits and why prefixes broke",
    )
    add_host_doctor_arguments(hd)
    hd.set_defaults(func=lazy("doctor", f"{__package__}.doctor", "run_host_doctor"))

    from tokenpilot_proxy.hosts import add_disable_arguments, add_enable_arguments

    e = subparsers.add_parser(
        "enable", help="route claude-code, codex or openclaw through TokenPilot for good (backed up)"
    )
    add_enable_arguments(e)
    e.set_defaults(func=lazy("enable", f"{__package__}.hosts.enable", "run_enable"))
    u = subparsers.add_parser("disable", help="restore the host's files as they were before `enable`")
    add_disable_arguments(u)
    u.set_defaults(func=lazy("disable", f"{__package__}.hosts.enable", "run_disable"))


def lazy(command: str, module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A handler that imports `module.name` only when the command runs."""

    def handler(args: argparse.Namespace) -> int:
        try:
            fn = getattr(importlib.import_module(module), name)
            return int(fn(args) or 0)
        except ModuleNotFoundError as exc:
            if exc.name not in EXTRA_MODULES:
                raise
            return missing_extra(command, exc)

    return handler


def missing_extra(command: str, exc: ModuleNotFoundError) -> int:
    extra = EXTRA_MODULES.get(exc.name or "", EXTRA)
    print(f"tokenpilot {command} needs an extra: pip install '{extra}' ({exc})", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None, prog: str = "python -m tokenpilot_proxy") -> int:
    """Stand-alone entry (`python -m tokenpilot_proxy`), the same commands as `tokenpilot`."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what TokenPilot decides (INFO level)"
    )
    register(parser.add_subparsers(dest="command", required=True))
    return run(parser, argv)
