"""Checks over a replayed session's requests, shared by the invariant properties."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from strategies import TOOLS

from tokenpilot import TokenPilot
from tokenpilot._canonical import canonical_json
from tokenpilot.lifecycle.segments import WindowRule

_ART = re.compile(r"art_[0-9a-f]{24}")

# A window small enough to fire in short generated sessions (the default's 60k never would).
SMALL_WINDOW = WindowRule(trigger_tokens=300, keep_calls=2)


def replay_waiting(tp: TokenPilot, msgs: list[dict], points: Sequence[int], sid: str = "s") -> list[Any]:
    """Prepare at each call point; between calls the background estimator finishes (and its
    result is delivered), as it does while the agent waits for its model."""
    out = []
    for k in points:
        out.append(tp.prepare(msgs[:k], TOOLS, session_id=sid))
        tp.session(sid).lifecycle.wait()
    return out


def stable_bytes(p: Any) -> str:
    """What of a prepared call the provider caches: tools and the stable messages."""
    return json.dumps({"tools": p.tools, "messages": p.stable_messages}, ensure_ascii=False)


def check_breaks_and_stubs(tp: TokenPilot, preps: Sequence[Any], msgs: list[dict], sid: str = "s") -> None:
    """I1/I6 over the calls of one session: the stable part only grows, except at a break
    the call counts and calls an eviction; every id a stub names recalls a non-empty list
    of the session's messages (or of their reduced forms, which name their originals)."""
    prev, breaks = None, 0
    for p in preps:
        cur = stable_bytes(p)
        if prev is not None and not cur.startswith(prev[:-2]):
            breaks += 1
            assert p.stats.prefix_break == "eviction"
        elif prev is not None:
            assert p.stats.prefix_break is None
        prev = cur
        for m in p.messages:
            if isinstance(m.get("content"), str) and m["content"].startswith("[tokenpilot: evicted"):
                for aid in _ART.findall(m["content"]):
                    evicted = json.loads(tp.recall(aid, session_id=sid).text)
                    assert isinstance(evicted, list) and evicted
                    for e in evicted:  # the original, or its reduced form pointing at the original
                        assert e in msgs or _ART.search(canonical_json(e))
    assert preps[-1].stats.prefix_breaks == breaks
