"""`lifecycle_stats()` hands out a copy: a caller that edits it changes nothing the
session keeps or saves (its gate decisions are sealed for the journal)."""

from __future__ import annotations

import json

from test_eviction_default import replay_default, transcript_scenario

from tokenpilot import TokenPilot
from tokenpilot.store.journal import Sealed


def test_editing_the_stats_changes_nothing_kept_or_saved() -> None:
    s = transcript_scenario()
    tp = TokenPilot()
    replay_default(tp, s.msgs, [*s.points, len(s.msgs)])
    lifecycle = tp.session("s").lifecycle
    saved = json.dumps(lifecycle.to_dict(), sort_keys=True)
    stats = tp.lifecycle_stats("s")
    assert stats["gate_decisions"] and stats["evictions"] >= 1
    assert not any(isinstance(d, Sealed) for d in stats["gate_decisions"])
    stats["gate_decisions"][0]["decision"] = "edited by the caller"
    stats["gate_decisions"].append({"junk": True})
    stats["bundle_reasons"]["junk"] = 99
    stats["evictions"] = -1
    assert json.dumps(lifecycle.to_dict(), sort_keys=True) == saved
    assert tp.lifecycle_stats("s")["evictions"] >= 1
