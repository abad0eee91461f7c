"""`python -m tokenpilot_openclaw serve|openclaw ...`: the same commands as `tokenpilot`.

OpenClaw's `localService` needs an absolute command; the interpreter plus `-m` works
in any virtual environment, whether or not the `tokenpilot` script is on PATH.
"""

from __future__ import annotations

import sys

from tokenpilot_openclaw.cli import main

if __name__ == "__main__":
    sys.exit(main())
