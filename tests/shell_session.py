"""A shell agent's session for the floor tests: a whole read of a file, a partial read of
it, then work that keeps naming the file (what the stale rule met on mini-swe-agent)."""

from __future__ import annotations

from builders import Session

from tokenpilot.lifecycle.segments import bundle_record
from tokenpilot.messages.turns import segment_turns

BIG = "\n".join(f"line {i}: value_{i} = compute_thing_{i}(x)" for i in range(120))  # ~1.2k tokens
SRC = "/testbed/pkg/models/base.py"


def records(s: Session) -> list:
    return [bundle_record(s.msgs, t) for t in segment_turns(s.msgs)]


def bash(s: Session, command: str, result: str, text: str | None = None) -> Session:
    return s.call("bash", {"command": command}, result, text)


def working_on_a_file(turns_after: int) -> Session:
    """A whole read of a file, a partial read of it, then work that keeps naming the file."""
    s = Session()
    s.user("Fix the bug in the session backend.")
    bash(s, f"cat {SRC}", BIG)  # turn 0: the whole file
    bash(s, f"sed -n '10,20p' {SRC}", "line 10: x\nline 11: y")  # turn 1: a range of it
    for i in range(turns_after):
        bash(s, f"python check_{i}.py", f"ok {i}", text=f"The decode in base.py handles case {i}.")
    return s
