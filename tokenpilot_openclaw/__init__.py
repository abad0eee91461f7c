"""TokenPilot for OpenClaw: an OpenAI-compatible proxy, a plugin, and config helpers.

- `tokenpilot serve`: the proxy OpenClaw uses as its model provider (`server`, `proxy`).
- `plugin/`: the OpenClaw plugin (`recall_artifact` tool, pass-through context engine).
- `tokenpilot openclaw install|doctor`: write and check OpenClaw's config (`install`, `doctor`).
- `testing.FakeUpstream`: a scripted OpenAI-compatible upstream for tests and benchmarks.

Only `tokenpilot serve` needs aiohttp (the `openclaw` extra); importing this package does not.
"""

from __future__ import annotations

from pathlib import Path

PLUGIN_ID = "tokenpilot"
PLUGIN_DIR = Path(__file__).resolve().parent / "plugin"

__all__ = ["PLUGIN_DIR", "PLUGIN_ID"]
