"""Session assembly: which task scripts a session runs, in what order, and with what gaps.

The builder (`builder.py`) records the messages and calls; the task scripts (`tasks.py`)
drive it; this module plans and runs them. Kept apart so the scripts can name the builder
without importing the plan that imports them.
"""

from __future__ import annotations

import random

from tokenpilot.measure.traces.model import Session

from .builder import EPOCH_START, FMT, SOURCE, SessionBuilder
from .tasks import SCRIPTS, task_transcript

__all__ = ["EPOCH_START", "FMT", "SOURCE", "SessionBuilder", "build_session", "plan"]


def plan(rng: random.Random, tasks: int) -> list[str]:
    """Task kinds for a session: a 2-3 task transcript chain among the other kinds, shuffled.

    Sessions of fewer than three tasks get no chain, so that they still mix kinds.
    """
    chain = min(tasks - 1, rng.choice((2, 3))) if tasks >= 3 else 0
    others = sorted(SCRIPTS)
    rng.shuffle(others)
    rest = [others[i % len(others)] for i in range(tasks - chain)]
    at = rng.randint(0, len(rest))
    return rest[:at] + [f"transcript:{i}" for i in range(chain)] + rest[at:]


def build_session(seed: int, index: int, tasks: int) -> Session:
    b = SessionBuilder(seed, index)
    kinds = plan(b.rng, tasks)
    long_gap = b.rng.randrange(1, tasks) if tasks > 1 else -1
    for i, kind in enumerate(kinds):
        if i:
            if i == long_gap:
                b.t += b.rng.uniform(11 * 60, 40 * 60)
            else:
                b.t += b.rng.uniform(60, 360) if b.rng.random() < 0.67 else b.rng.uniform(360, 590)
        b.begin_task(len(kinds) - i)
        if kind.startswith("transcript"):
            stage = int(kind.split(":")[1])
            task_transcript(b, stage, last=i + 1 == len(kinds) or not kinds[i + 1].startswith("transcript"))
            b.kinds.append("transcript")
        else:
            SCRIPTS[kind](b)
            b.kinds.append(kind)
    return b.finish(index, seed)
