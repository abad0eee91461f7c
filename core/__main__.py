"""`python -m tokenpilot`: the same command line as `tokenpilot`."""

import sys

from .cli import main

sys.exit(main())
