"""`python -m tokenpilot_proxy serve|doctor|enable|disable ...`: the same commands as `tokenpilot`.

A host's service (OpenClaw's `localService`, a systemd unit, Claude Code's hook) needs an
absolute command; the interpreter plus `-m` works in any virtual environment, whether or
not the `tokenpilot` script is on PATH.
"""

from __future__ import annotations

import sys

from tokenpilot_proxy.cli import main

if __name__ == "__main__":
    sys.exit(main())
