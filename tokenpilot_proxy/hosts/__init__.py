"""`tokenpilot enable|disable claude-code|codex|gemini-cli|openclaw`: TokenPilot for good, in one command.

Enabling writes the host's own settings to use the proxy, makes sure the proxy runs
when the host starts, and keeps a byte-exact backup of every file it touches;
disabling puts those files back. This module only declares the options (standard
library, so the commands mount on a base install); `enable.py` does the work.
"""

from __future__ import annotations

import argparse

from tokenpilot_proxy.serve_options import add_keep_argument

HOSTS = ("claude-code", "codex", "gemini-cli", "openclaw")
DEFAULT_PORTS = {"codex": 8787, "claude-code": 8788, "gemini-cli": 8789, "openclaw": 8787}
DEFAULT_UPSTREAMS = {
    "codex": "https://api.openai.com/v1",
    "claude-code": "https://api.anthropic.com/v1",
    "gemini-cli": "https://generativelanguage.googleapis.com",  # the client's /v1beta goes on
}


def add_enable_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", choices=HOSTS, help="the agent to route through TokenPilot")
    p.add_argument(
        "--upstream",
        metavar="URL",
        help="the real provider's base URL with /v1 (default: OpenAI for codex, Anthropic for "
        "claude-code, Google's Gemini API host for gemini-cli; required for openclaw)",
    )
    p.add_argument(
        "--port",
        type=int,
        help="the proxy's port (default 8787 for codex and openclaw, 8788 for claude-code, "
        "8789 for gemini-cli)",
    )
    p.add_argument(
        "--model", action="append", metavar="ID", help="openclaw only: model id at the upstream (repeatable)"
    )
    p.add_argument(
        "--config", metavar="PATH", help="the host's settings file (default: the host's own default)"
    )
    p.add_argument(
        "--start",
        choices=("auto", "systemd", "launcher", "none"),
        default="auto",
        help="how the proxy starts with the host: a systemd user service where `systemctl --user` "
        "works, else a launcher the host runs at start-up (auto, the default)",
    )
    add_keep_argument(p)
    p.add_argument(
        "--no-mcp",
        action="store_true",
        help="claude-code, codex and gemini-cli: do not register TokenPilot's MCP server in the client; the "
        "proxy then adds recall_artifact to the requests and answers it itself",
    )


def add_disable_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", choices=HOSTS, help="the agent to restore")
