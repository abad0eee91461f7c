"""The way one `TokenPilot.prepare` call walks through the core's rooms (issue #40).

Runs the built-in workload's first session through the default facade (its estimator
inline, for a walk that is the same at every run), and traces the
last call (a steady-state call: history matched, one new tool output ingested, a plan
read). The walk is the call tree of that `prepare` with each function expanded the first
time it is called (later calls of a function already walked add nothing: the walk is the
code's, not the data's), read in order as the rooms the running frame is in. Only the
core's runtime frames count (the measurement wing, the standard library and other
packages are transparent).

- stays: the walk's rooms with consecutive repeats collapsed;
- rooms entered: the distinct rooms;
- returns: stays in a room already left once (stays − rooms entered);
- climbs: moves back to a caller's room when a function returns.

A room is a module (`--by module`) or a room of the house (`--by room`: the subpackage
below `tokenpilot`, or the top-level module). The same script runs on any commit, so a
layout's walk can be compared with an earlier one's:

    python benchmarks/prepare_walk.py --by module
    python benchmarks/prepare_walk.py --by room --show
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import tokenpilot
from tokenpilot import TokenPilot
from tokenpilot.lifecycle import LifecycleConfig
from tokenpilot.measure.workload import generate

CORE = Path(tokenpilot.__file__).resolve().parent


def room_of(frame: FrameType, by: str) -> str | None:
    path = Path(frame.f_code.co_filename).resolve()
    try:
        rel = path.relative_to(CORE)
    except ValueError:
        return None
    if rel.parts[0] == "measure":
        return None
    parts = rel.with_suffix("").parts
    if by == "room":
        return parts[0]
    return ".".join(p for p in parts if p != "__init__") or "__init__"


class Walk:
    """Builds the first-visit walk from profile events."""

    def __init__(self, by: str) -> None:
        self.by = by
        self.seen: set[Any] = set()
        self.muted = 0  # depth inside a function already walked
        self.stack: list[str | None] = []
        self.rooms: list[str] = []
        self.climbs = 0

    def visit(self, room: str, climb: bool = False) -> None:
        if self.rooms and self.rooms[-1] == room:
            return
        self.rooms.append(room)
        self.climbs += climb

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        room = room_of(frame, self.by)
        if event == "call":
            code = frame.f_code
            if self.muted or (room is not None and code in self.seen):
                self.muted += 1
                return
            if room is not None:
                self.seen.add(code)
                self.visit(room)
            self.stack.append(room)
            return
        if self.muted:
            self.muted -= 1
            return
        if self.stack:
            self.stack.pop()
        caller = next((r for r in reversed(self.stack) if r is not None), None)
        if caller is not None and room is not None and caller != room:
            self.visit(caller, climb=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--by", choices=("module", "room"), default="room")
    ap.add_argument("--show", action="store_true", help="print the walk itself")
    ap.add_argument(
        "--call", type=int, default=-1, help="which call of the session to trace (default: the last)"
    )
    args = ap.parse_args(argv)

    session = generate(seed=0, sessions=1, tasks_per_session=3)[0]
    # the default facade, its estimator run inline (as the bench's replays do) so that every
    # run walks the same way; in the background its thread would race the traced call
    # and a store of its own, empty: what an earlier run stored must not change this one's way
    store = tempfile.mkdtemp(prefix="tokenpilot-walk-")
    tp = TokenPilot(store=store, lifecycle=LifecycleConfig(schedule="inline"))
    calls = session.calls[: args.call % len(session.calls) + 1]
    for call in calls[:-1]:
        tp.prepare(session.messages[: call.end], session.tools, session_id=session.id)
    last = session.messages[: calls[-1].end]
    walk = Walk(args.by)
    gc.collect()
    gc.disable()  # a finaliser run by the collector mid-call would walk too, at random
    sys.setprofile(walk)
    try:
        tp.prepare(last, session.tools, session_id=session.id)
    finally:
        sys.setprofile(None)
        gc.enable()
    stays = len(walk.rooms)
    entered = len(set(walk.rooms))
    print(
        f"by {args.by}: {entered} rooms entered in {stays} stays, {stays - entered} returns, {walk.climbs} climbs"
    )
    if args.show:
        print(" -> ".join(walk.rooms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
