"""Eviction as a user gets it: `TokenPilot()` with no options (issue #26).

The lifecycle tests drive `Lifecycle` with an inline estimator; these go through the
default constructor (background estimator, cost gate, segment rules, window), waiting
for the estimator between calls as a real agent's model call would.
"""

from __future__ import annotations

import json
import re

from builders import Session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_checks import replay_waiting as replay_default
from strategies import TOOLS, call_points, session

from tokenpilot import TokenPilot
from tokenpilot._canonical import canonical_json
from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.lifecycle.segments import bundle_record, named_in_words
from tokenpilot.messages.turns import segment_turns
from tokenpilot.store.artifacts import ArtifactStore

_ART = re.compile(r"art_[0-9a-f]{24}")
CITIES = ["Oslo", "Lima", "Pune", "Kyiv", "Nairobi", "Quito", "Hanoi", "Perth", "Dakar", "Riga"]
LATER = [
    ("Extract the Q&A exchanges from transcript.md into qa.md", "qa.md"),
    ("Extract the recommendations from transcript.md into recommendations.md", "recommendations.md"),
    ("List the data sources mentioned in transcript.md in data_sources.md", "data_sources.md"),
    ("List the action items agreed in transcript.md in actions.md", "actions.md"),
]


def transcript() -> str:
    """900 lines, about 100 KB: a panel transcript."""
    speakers = ["Dan Evans", "Nicola Fox", "Karen Fox", "Mike Freie", "Paula Wilson"]
    return "\n".join(
        f"[{i // 60:02d}:{i % 60:02d}] {speakers[i % 5]}: point {i} about heliophysics missions, "
        "sensor calibration and data pipelines for the panel record."
        for i in range(900)
    )


def weather_page(city: str) -> str:
    rows = "".join(
        f"<tr><td>{h:02d}:00</td><td>{city} hourly: {15 + h % 7}C, wind {h % 5} m/s from the "
        f"north-west, humidity {40 + h % 20}%, rain chance {h * 3 % 50}%</td></tr>"
        for h in range(24)
    )
    return f"<html><body><h1>{city}</h1><p>Sunny, 21C.</p><table>{rows}</table></body></html>"


def transcript_scenario() -> Session:
    """T1 reads transcript.md; T2 (unrelated) reads ten weather pages; T3-T6 name
    transcript.md in the request and only write files."""
    s = Session()
    s.user("Summarize each speaker's key points from transcript.md into speaker_summary.md")
    s.call("read", {"path": "transcript.md"}, transcript())
    s.call("write", {"path": "speaker_summary.md", "content": "- Dan Evans: ..."}, "ok")
    s.final("Wrote speaker_summary.md with the key points of five speakers.")
    s.user("Collect today's weather for ten cities into weather.md")
    for city in CITIES:
        s.call("web_fetch", {"url": f"https://weather.example.com/{city.lower()}"}, weather_page(city))
    s.call("write", {"path": "weather.md", "content": "| city | weather |"}, "ok")
    s.final("Wrote weather.md for ten cities.")
    for request, out in LATER:
        s.user(request)
        s.call("write", {"path": out, "content": "..."}, "ok")
        s.final(f"Wrote {out}.")
    return s


def _text(messages: list[dict]) -> str:
    return "\n".join(
        m["content"] if isinstance(m.get("content"), str) else canonical_json(m.get("content"))
        for m in messages
    )


def test_default_path_keeps_the_named_reading_task_and_evicts_the_unrelated_one():
    s = transcript_scenario()
    tp = TokenPilot()
    last = replay_default(tp, s.msgs, [*s.points, len(s.msgs)])[-1]
    text = _text(last.messages)
    assert "point 450 about heliophysics" in text, "T1's transcript must be in view while requests name it"
    assert not [c for c in CITIES if f"{c} hourly" in text], "T2's pages must be evicted"
    assert "evicted task \"Collect today's weather" in text
    assert validate_pairing(last.messages) == []
    stats = tp.lifecycle_stats("s")
    assert stats["segments_revived"] >= 0 and stats["evictions"] >= 1


def test_a_read_evicted_before_its_file_is_named_comes_back_at_the_next_batch():
    """T1 goes while T2 runs (nothing names transcript.md yet); T3's request names it, and
    the first batch planned on a history holding that request shows T1 again, in the same
    pass that evicts T2. A background result is planned when it is delivered, on the
    history of the call that started its batch, and shown at the next call: T3's turn is
    complete from t3 + 3 on, a batch fires within its next B = 3 turns (calls two messages
    apart: by t3 + 7), and the call after that one shows T1."""
    s = transcript_scenario()
    tp = TokenPilot()
    points = [*s.points, len(s.msgs)]
    preps = replay_default(tp, s.msgs, points)
    t3 = next(i for i, m in enumerate(s.msgs) if m.get("content") == LATER[0][0])
    seen = [("point 450 about heliophysics" in _text(p.messages), k) for p, k in zip(preps, points)]
    gone_during_t2 = [k for shown, k in seen if not shown and k <= t3]
    assert gone_during_t2, "the scenario should evict T1 while the unrelated task runs"
    assert tp.lifecycle_stats("s")["segments_revived"] == 1
    after = [shown for shown, k in seen if k >= t3 + 9]
    assert after and all(after)


def test_a_later_read_of_the_same_file_takes_over_as_the_carrier():
    s = Session()
    s.user("Summarize notes/plan.md")
    s.call("read", {"path": "notes/plan.md"}, "v1 " * 400)
    s.final("Summary written.")
    s.user("Re-read notes/plan.md, it changed")
    s.call("read", {"path": "notes/plan.md"}, "v2 " * 400)
    s.final("Done.")
    s.user("Now shorten plan.md's summary")
    s.final("Shortened.")
    records = [bundle_record(s.msgs, t) for t in segment_turns(s.msgs)]
    reads = [i for i, r in enumerate(records) if r.kind == "read"]
    assert len(reads) == 2
    assert named_in_words(records) == {reads[1]}


def test_the_agent_naming_a_file_it_wrote_keeps_nothing_alive():
    s = Session()
    s.user("Fetch the page and write out.md")
    s.call("web_fetch", {"url": "https://example.com/x"}, "x" * 3000)
    s.call("write", {"path": "out.md", "content": "x"}, "ok")
    s.final("Wrote out.md.")
    records = [bundle_record(s.msgs, t) for t in segment_turns(s.msgs)]
    assert named_in_words(records) == set()


def test_words_count_but_tool_arguments_do_not():
    """A later grep over the file names it in its arguments: that is a new read of its
    own, not a use of the earlier one in words."""
    s = Session()
    s.user("Read config.yaml")
    s.call("read", {"path": "config.yaml"}, "a: 1\n" * 300)
    s.final("Read it.")
    s.user("Count lines")
    s.call("exec", {"command": "wc -l config.yaml"}, "300")
    s.final("300 lines.")
    records = [bundle_record(s.msgs, t) for t in segment_turns(s.msgs)]
    assert named_in_words(records) == set()
    s.user("Is config.yaml valid?")
    s.final("Yes.")
    records = [bundle_record(s.msgs, t) for t in segment_turns(s.msgs)]
    assert named_in_words(records) == {0}


# ---------------------------------------------------------------------------
# properties through the default constructor
# ---------------------------------------------------------------------------

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
_FILES = ["a.txt", "b.txt", "/home/u/ws/c.py"]


@st.composite
def naming_session(draw) -> list[dict]:
    """A random session in which later user or assistant words may name a file read earlier."""
    msgs = draw(session())
    for m in msgs[1:]:
        if m["role"] == "user" and draw(st.booleans()):
            m["content"] += " then look again at " + draw(st.sampled_from(_FILES))
        elif m["role"] == "assistant" and not m.get("tool_calls") and draw(st.booleans()):
            m["content"] += " I used " + draw(st.sampled_from(_FILES))
    return msgs


def _bytes(p) -> str:
    return json.dumps({"tools": p.tools, "messages": p.stable_messages}, ensure_ascii=False)


@SETTINGS
@given(naming_session())
def test_i1_default_append_only_between_evictions(msgs):
    tp = TokenPilot()
    prev = None
    for p in replay_default(tp, msgs, call_points(msgs)):
        cur = _bytes(p)
        if prev is not None and not cur.startswith(prev[:-2]):
            assert p.stats.prefix_break in ("eviction", "tools changed")
        prev = cur


@SETTINGS
@given(naming_session())
def test_i3_default_nothing_lost(msgs):
    store = ArtifactStore()
    tp = TokenPilot(store=store)
    for p in replay_default(tp, msgs, call_points(msgs)):
        for m in p.messages:
            for aid in _ART.findall(_text([m])):
                assert tp.recall(aid, session_id="s").found


@SETTINGS
@given(naming_session())
def test_i4_default_valid_requests(msgs):
    for p in replay_default(TokenPilot(), msgs, call_points(msgs)):
        assert validate_pairing(p.messages) == []
        for m in p.messages:
            for c in m.get("tool_calls") or []:
                json.loads(c["function"]["arguments"])


@SETTINGS
@given(naming_session())
def test_i6_default_a_read_named_in_later_words_is_in_view_after_each_batch(msgs):
    """After every estimator result applied, no evicted task holds a read whose file later
    words name (and no later read superseded); the last turn is never evicted."""
    tp = TokenPilot()
    applied = 0
    for k in call_points(msgs):
        tp.prepare(msgs[:k], TOOLS, session_id="s")
        lc = tp.session("s").lifecycle
        frozen = [e.frozen for e in tp.session("s").entries]
        turns = segment_turns(frozen)
        evicted = {tid for seg in lc.segments for tid in seg.turn_ids}
        if turns:
            assert turns[-1].turn_id not in evicted
        if lc.stats["deltas_applied"] > applied:  # whole tasks; segment rules judge use themselves
            named = named_in_words([bundle_record(frozen, t) for t in turns])
            tasks = {tid for seg in lc.segments if not seg.reasons for tid in seg.turn_ids}
            assert not {turns[i].turn_id for i in named} & tasks
        applied = lc.stats["deltas_applied"]
        lc.wait()
