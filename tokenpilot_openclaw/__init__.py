"""TokenPilot for OpenClaw: its plugin, its config edits, and its doctor.

- `plugin/`: the OpenClaw plugin (`recall_artifact` tool, pass-through context engine).
- `tokenpilot openclaw install|doctor`: write and check OpenClaw's config (`install`,
  `doctor`, `openclaw_config`). OpenClaw talks to TokenPilot's proxy (`tokenpilot_proxy`,
  the `proxy` extra, which the `openclaw` extra brings); this package uses it through the
  proxy's public names only.

The proxy lived here until 0.2 (`tokenpilot_openclaw.proxy`, `.hosts`, `.proxy_checks`,
`.host_doctor`, `.testing`); those names still import, with a DeprecationWarning, for one
release.
"""

from __future__ import annotations

from pathlib import Path

from tokenpilot._moved import alias_moved

PLUGIN_ID = "tokenpilot"
PLUGIN_DIR = Path(__file__).resolve().parent / "plugin"

MOVED = {
    "tokenpilot_openclaw.proxy": "tokenpilot_proxy",
    "tokenpilot_openclaw.hosts": "tokenpilot_proxy.hosts",
    "tokenpilot_openclaw.proxy_checks": "tokenpilot_proxy.checks",
    "tokenpilot_openclaw.host_doctor": "tokenpilot_proxy.doctor",
    "tokenpilot_openclaw.testing": "tokenpilot_proxy.demo",
}
alias_moved(MOVED)

__all__ = ["MOVED", "PLUGIN_DIR", "PLUGIN_ID"]
