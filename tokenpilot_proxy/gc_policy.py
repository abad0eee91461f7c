"""The serving process's garbage collector, set once its start-up is done.

Python's cycle collector runs its young generation every 700 net new containers, and a
full collection once enough survivors pile up. A proxy call makes a few thousand
containers that live until the call ends (the session's new entries, its plan, the
state it writes), so the young collection ran several times per call, promoted what the
call still held, and every twenty calls or so a full collection walked every object in
the process: the ~94,000 of its imports and every session held in memory. Measured on
`benchmarks/bench_proxy_growth.py` (one session growing to 593 KB bodies, 100 calls), per
serving process: about 510 young collections, 50 of the middle generation and 5 full ones
of 15-175 ms, 0.46-0.68 s of collection in all; the full ones were most of the p99.

`settle` does what long-running Python servers do:

- `gc.freeze()` after start-up: the imports' objects (and the price table) are never
  garbage, so full collections no longer walk them;
- the young generation's threshold at `YOUNG_THRESHOLD`: most of what a call makes is
  freed by reference counting when the call ends, before a collection would see it.

Reference counting frees everything that is not a cycle as before; only cyclic garbage
waits longer, at most `YOUNG_THRESHOLD` containers of it (a few MB). Only the serving
process is set (`serve`, each `--workers` worker): a library has no business with the
collector of the process that imports it.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("tokenpilot.openclaw")

YOUNG_THRESHOLD = 20_000
"""Net new containers between young collections: about five calls of the measured session
(each makes ~3,600 more than it frees while it runs). A young collection walks every young
container, so its pause grows with this: at 20,000 it paused at most 8-10 ms there, at
50,000 20-33 ms, at 10,000 5-7 ms but with more collections of the middle generation
(27-45 ms). Collection in all was about the same for the three: 0.1-0.2 s per process,
against 0.46-0.68 s with Python's defaults."""


def settle() -> None:
    """Freeze what start-up made and raise the young threshold (see the module doc)."""
    gc.collect()  # start-up's own garbage is not frozen with the rest
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    log.debug(
        "tokenpilot: garbage collector settled: %d start-up objects frozen, young threshold %d",
        gc.get_freeze_count(),
        YOUNG_THRESHOLD,
    )
