"""Who and where a workload session runs (`Env`), in a module of its own.

The prompt, the skills, the workspace files and the session builder all read these
values; keeping the dataclass apart lets each of them import it without importing
the others.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Env:
    """Who and where a session runs: the values OpenClaw bakes into its prompt and runtime line."""

    user: str
    name: str
    home: str
    workspace: str
    host: str
    tz: str
    tz_abbr: str
    tz_offset_min: int
    model: str
    session_id: str
    node: str
    os: str
