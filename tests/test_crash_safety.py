"""A real `tokenpilot serve` killed with SIGKILL mid-burst loses nothing (see crashdrill.py)."""

from __future__ import annotations

import os
from pathlib import Path

from drills.crashdrill import crash_drill

REPO = Path(__file__).resolve().parent.parent


async def test_sigkill_mid_burst_loses_no_artifact_and_no_prefix(tmp_path):
    r = await crash_drill(
        tmp_path, sessions=6, streams=36, kill_after=14, env={"PYTHONPATH": str(REPO), **os.environ}
    )
    assert r.upstream_before_kill >= 14 and r.errors > 0, r  # it died with requests in flight
    assert r.sessions_checked == 6 and r.artifacts_checked >= 14, r
    assert (r.prefix_changes, r.artifacts_lost) == (0, 0), r.problems
    assert r.answered >= 6 * 7, r  # every conversation went on to its end after the restart
