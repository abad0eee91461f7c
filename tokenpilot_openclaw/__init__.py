"""TokenPilot's proxy, and what OpenClaw (and the other hosts) need to use it.

- `proxy/`: `tokenpilot serve`, the proxy OpenClaw, Claude Code and Codex use as their
  model provider: one module per API (`chat`, `anthropic`, `responses`) on one shared
  request path (`proxy.request_path`); `from tokenpilot_openclaw.proxy import Proxy`.
- `plugin/`: the OpenClaw plugin (`recall_artifact` tool, pass-through context engine).
- `tokenpilot openclaw install|doctor`: write and check OpenClaw's config (`install`, `doctor`,
  `openclaw_config`); `tokenpilot doctor` and `enable|disable` for every host (`host_doctor`,
  `hosts/`), with the checks of a running proxy in `proxy_checks`.
- `testing.FakeUpstream`: a scripted OpenAI-compatible upstream for tests and benchmarks.

Only `tokenpilot serve` needs aiohttp (the `openclaw` extra); importing this package does not.
"""

from __future__ import annotations

from pathlib import Path

PLUGIN_ID = "tokenpilot"
PLUGIN_DIR = Path(__file__).resolve().parent / "plugin"

__all__ = ["PLUGIN_DIR", "PLUGIN_ID"]
