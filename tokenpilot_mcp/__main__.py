"""`python -m tokenpilot_mcp [options]`: the MCP server alone, the command a client's MCP
configuration runs (an absolute interpreter works whether or not `tokenpilot` is on PATH)."""

from __future__ import annotations

import sys

from tokenpilot_mcp.cli import main

if __name__ == "__main__":
    sys.exit(main())
