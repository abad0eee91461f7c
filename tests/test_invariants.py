"""Invariants I1–I6 (DESIGN.md §4) as properties over random sessions, across restarts too."""

from __future__ import annotations

import json
import re
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_checks import SMALL_WINDOW, check_breaks_and_stubs
from replay_checks import stable_bytes as _bytes
from strategies import TOOLS, call_points, session

from tokenpilot import TokenPilot
from tokenpilot._canonical import canonical_json
from tokenpilot.ingest.reshown import RESHOWN_NOTE, expand_in_context
from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.lifecycle.schedule import LifecycleConfig
from tokenpilot.store.artifacts import ArtifactStore

SETTINGS = settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
_ART = re.compile(r"art_[0-9a-f]{24}")


def _replay(tp: TokenPilot, msgs: list[dict], sid: str = "s"):
    return [tp.prepare(msgs[:k], TOOLS, session_id=sid) for k in call_points(msgs)]


def _global() -> TokenPilot:
    return TokenPilot(lifecycle=False)


def _evicting(b: int = 1, windowed: bool = False) -> TokenPilot:
    window = SMALL_WINDOW if windowed else LifecycleConfig().window
    return TokenPilot(
        lifecycle=LifecycleConfig(batch_turns=b, schedule="inline", cost_gate=False, window=window)
    )


@SETTINGS
@given(session())
def test_i1_append_only_between_evictions(msgs):
    tp = _global()
    prev = None
    for p in _replay(tp, msgs):
        cur = _bytes(p)
        if prev is not None:
            assert cur.startswith(prev[:-2]), "stable part of call n is not a prefix of call n+1"
            assert p.stats.prefix_break is None
        prev = cur
    assert p.stats.prefix_breaks == 0


@SETTINGS
@given(session())
def test_i1_holds_across_a_date_change(msgs):
    tp = _global()
    points = call_points(msgs)
    prev = None
    for j, k in enumerate(points):
        hist = [dict(m) for m in msgs[:k]]
        hist[0]["content"] = hist[0]["content"].replace(
            "Current date: 2026-12-02", f"Current date: 2026-12-{2 + j % 20:02d}"
        )
        p = tp.prepare(hist, TOOLS, session_id="s")
        cur = _bytes(p)
        if prev is not None:
            assert cur.startswith(prev[:-2])
        prev = cur


@SETTINGS
@given(session(), st.booleans())
def test_i2_deterministic_across_instances(msgs, windowed):
    a = [
        _bytes(p) + canonical_json(p.messages[p.tail_start :]) for p in _replay(_evicting(1, windowed), msgs)
    ]
    b = [
        _bytes(p) + canonical_json(p.messages[p.tail_start :]) for p in _replay(_evicting(1, windowed), msgs)
    ]
    assert a == b
    # no absolute temp path of the store leaks into model-visible text
    assert "tokenpilot-artifacts-" not in a[-1]


@SETTINGS
@given(session())
def test_i3_nothing_lost(msgs):
    store = ArtifactStore()
    tp = TokenPilot(store=store, lifecycle=False)
    p = _replay(tp, msgs)[-1]
    originals = {m["tool_call_id"]: m["content"] for m in msgs if m["role"] == "tool"}
    args = {
        c["id"]: c["function"]["arguments"]
        for m in msgs
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    }
    for k, m in enumerate(p.messages):
        text = m["content"] if isinstance(m.get("content"), str) else canonical_json(m.get("content"))
        content = m.get("content")
        if m["role"] == "tool" and isinstance(content, str) and RESHOWN_NOTE in content:
            content = text = expand_in_context(p.messages, k)  # lines the context shows: rebuilt from it
        if m["role"] == "tool" and content != originals[m["tool_call_id"]]:
            ids = _ART.findall(text)
            assert ids, "a reduced tool output must name its artifact"
            orig = originals[m["tool_call_id"]]
            expected = orig if isinstance(orig, str) else canonical_json(orig)
            assert store.get("s", ids[-1]) == expected
        for c in m.get("tool_calls") or []:
            if c["function"]["arguments"] != args[c["id"]]:
                ids = _ART.findall(c["function"]["arguments"])
                assert store.get("s", ids[0]) == args[c["id"]]
        for aid in _ART.findall(text):
            assert tp.recall(aid, session_id="s").found


@SETTINGS
@given(session(), st.booleans())
def test_i4_valid_requests(msgs, windowed):
    for p in _replay(_evicting(1, windowed), msgs):  # after every purge, too
        assert validate_pairing(p.messages) == []
    for m in p.messages:
        for c in m.get("tool_calls") or []:
            json.loads(c["function"]["arguments"])


@SETTINGS
@given(session())
def test_i5_only_the_environment_is_reduced(msgs):
    p = _replay(_global(), msgs)[-1]
    body = [m for m in p.messages[1 : p.tail_start]]
    assert len(body) == len(msgs) - 1
    for got, want in zip(body, msgs[1:]):
        if want["role"] in ("user", "assistant"):
            assert got.get("content") == want.get("content")
            assert [c["function"]["name"] for c in got.get("tool_calls") or []] == [
                c["function"]["name"] for c in want.get("tool_calls") or []
            ]


@SETTINGS
@given(session(), st.booleans())
def test_i1_i6_prefix_breaks_only_at_evictions_and_evicted_content_recoverable(msgs, windowed):
    """With eviction every turn, the stable part still only grows, except when a plan
    changes; each such break is counted and said to be an eviction; stubs recall exactly,
    and each per-bundle id in a stub recalls that bundle (the window rule's too)."""
    tp = _evicting(1, windowed)
    check_breaks_and_stubs(tp, _replay(tp, msgs), msgs)


@SETTINGS
@given(session(), st.integers(0, 60), st.booleans())
def test_i1_restart_at_any_call_renders_the_same_bytes(msgs, crash_at, windowed):
    """A process that dies after any call and is restored from its last saved state
    renders every later call byte for byte as an uninterrupted one, breaks counted alike."""

    def run(tp: TokenPilot, k: int):
        p = tp.prepare(msgs[:k], TOOLS, session_id="s")
        return (
            _bytes(p) + canonical_json(p.messages[p.tail_start :]),
            p.stats.prefix_break,
            p.stats.prefix_breaks,
        )

    with tempfile.TemporaryDirectory() as d:
        steady = _evicting(1, windowed)
        restarted = TokenPilot(store=ArtifactStore(d), lifecycle=steady.lifecycle_config)
        points = call_points(msgs)
        crash_at %= len(points)
        for i, k in enumerate(points):
            assert run(restarted, k) == run(steady, k), f"call {i} differs after a restart at call {crash_at}"
            if i == crash_at:
                saved = json.dumps(restarted.export_session("s"), ensure_ascii=True)
                restarted = TokenPilot(store=ArtifactStore(d), lifecycle=steady.lifecycle_config)
                restarted.import_session(json.loads(saved))
