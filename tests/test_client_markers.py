"""The caller's cache markers (`cache_control`) are where it caches, not what it says.

LiteLLM and the agents on it (OpenHands) mark the system prompt and the newest user or
tool message at every call, so each message carries a marker at one call and none at
the next. Read as content, every call would be a history the caller rewrote."""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import TOOLS, call_points, session

from tokenpilot import TokenPilot
from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.lifecycle.schedule import LifecycleConfig
from tokenpilot.messages.markers import MARKER_KEY, Mark, strip_markers, with_marks

CC = {"type": "ephemeral"}


def _parts(m: dict) -> dict:
    """A message as LiteLLM-style clients send it: its text as a list of parts."""
    if isinstance(m.get("content"), str) and m["content"]:
        return {**m, "content": [{"type": "text", "text": m["content"]}]}
    return dict(m)


def _marked(msgs: list[dict], ttl: str | None = None) -> list[dict]:
    """OpenHands' placement: the system prompt and the newest user or tool message."""
    out = [_parts(m) for m in copy.deepcopy(msgs)]
    cc = {**CC, "ttl": ttl} if ttl else CC
    for i in [0] + [max(i for i, m in enumerate(out) if m["role"] in ("user", "tool"))]:
        if isinstance(out[i].get("content"), list):
            out[i]["content"][-1][MARKER_KEY] = cc
    return out


def _pilot() -> TokenPilot:
    """The default facade with its estimator inline: two facades compared call by call must
    not depend on when a background estimate lands."""
    return TokenPilot(lifecycle=LifecycleConfig(schedule="inline"))


def _unmarked(messages: list[dict]) -> list[dict]:
    return strip_markers(copy.deepcopy(messages))[0]


def _grep_session(n: int) -> list[dict]:
    msgs = [
        {"role": "system", "content": "You are OpenHands agent."},
        {"role": "user", "content": "Fix the handler bug."},
    ]
    for i in range(n):
        out = "\n".join(f"src/mod_{i}/file_{j}.py:{j}: def handler_{i}_{j}(x): return x" for j in range(200))
        call = {"id": f"c{i}", "type": "function"}
        call["function"] = {"name": "bash", "arguments": json.dumps({"command": f"grep -rn handler_{i} src"})}
        msgs += [
            {"role": "assistant", "content": "Let me look.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": out},
        ]
    return msgs


def test_a_marker_that_moves_each_call_breaks_nothing_and_is_sent_where_the_caller_put_it():
    msgs = _grep_session(12)
    tp, plain = _pilot(), _pilot()
    ids, prev = set(), None
    for k in call_points(msgs):
        sent = _marked(msgs[:k], ttl="1h")
        p = tp.prepare(sent, TOOLS)
        q = plain.prepare([_parts(m) for m in msgs[:k]], TOOLS)
        ids.add(p.stats.session_id)
        assert p.stats.prefix_break is None and p.stats.prefix_breaks == 0  # no rewrite, no break
        assert _unmarked(p.messages) == q.messages  # the markers change nothing else
        if prev is not None:  # append-only once the markers are off
            assert _unmarked(p.messages)[: len(prev)] == prev
        prev = _unmarked(p.messages)
        marked = [i for i, m in enumerate(p.messages) if MARKER_KEY in json.dumps(m)]
        assert marked == [0, len(p.messages) - 1]  # the system prompt and the newest output
        carried = [x[MARKER_KEY] for x in p.messages[-1]["content"] if MARKER_KEY in x]
        assert carried == [{"type": "ephemeral", "ttl": "1h"}]  # on the part that carried it, ttl kept
        assert validate_pairing(p.messages) == []
    assert len(ids) == 1  # the first call names the session the later ones do
    stored = tp.store.artifact_ids(next(iter(ids)))
    assert len(list(stored)) == len(list(plain.store.artifact_ids(q.stats.session_id)))  # no second archive


def test_the_control_markers_read_as_content_rewrite_the_history_at_every_call(monkeypatch):
    """What the markers did before they were taken off (the same facade with the strip
    made a no-op): a counted break at every call, a second session at the second call."""
    import tokenpilot.pilot as pilot

    monkeypatch.setattr(pilot, "strip_markers", lambda messages: (messages, {}))
    msgs = _grep_session(4)
    tp = _pilot()
    runs = [tp.prepare(_marked(msgs[:k]), TOOLS) for k in call_points(msgs)]
    assert len({p.stats.session_id for p in runs}) == 2
    assert runs[-1].stats.prefix_breaks == len(runs) - 2
    assert {p.stats.prefix_break for p in runs[2:]} == {"history rewritten by the caller"}


def test_marks_go_back_on_the_part_that_carried_them_or_on_the_text():
    assert with_marks({"role": "tool", "content": "abc"}, [Mark(0, CC)])["content"] == [
        {"type": "text", "text": "abc", MARKER_KEY: CC}
    ]
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    out = with_marks({"role": "user", "content": parts}, [Mark(0, CC)])
    assert out["content"][0][MARKER_KEY] == CC and MARKER_KEY not in out["content"][1]
    assert MARKER_KEY not in parts[0]  # never the caller's objects
    out = with_marks({"role": "user", "content": parts[:1]}, [Mark(5, CC)])  # the part is gone: the last one
    assert out["content"][-1][MARKER_KEY] == CC
    assert with_marks({"role": "assistant", "content": None}, [Mark(0, CC)]) == {
        "role": "assistant",
        "content": None,
    }
    assert with_marks({"role": "user", "content": ""}, [Mark(0, CC)]) == {"role": "user", "content": ""}
    assert with_marks({"role": "user", "content": "x"}, [Mark(None, CC)])[MARKER_KEY] == CC


def test_strip_passes_unmarked_messages_as_they_are():
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "b", MARKER_KEY: CC}]},
    ]
    out, marks = strip_markers(msgs)
    assert out[0] is msgs[0] and marks == {1: (Mark(0, CC),)}
    assert out[1] == {"role": "user", "content": [{"type": "text", "text": "b"}]}
    assert MARKER_KEY in msgs[1]["content"][0]  # the input is not touched
    same, none = strip_markers(msgs[:1])
    assert same is not None and none == {}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(session(recalls=True), st.booleans())
def test_markers_change_nothing_but_markers(msgs, at_message_level):
    """Through the default facade (its estimator inline), a session marked as a LiteLLM client marks it renders,
    once the markers are off, exactly as the same session unmarked; no marker is sent
    that the caller did not send on that message, at most one per mark."""
    tp, plain = _pilot(), _pilot()
    for k in call_points(msgs):
        sent = _marked(msgs[:k])
        if at_message_level:  # some clients mark the message itself
            sent = [{**strip_markers([m])[0][0], MARKER_KEY: CC} if m is sent[-1] else m for m in sent]
        p = tp.prepare(sent, TOOLS, session_id="s")
        q = plain.prepare([_parts(m) for m in msgs[:k]], TOOLS, session_id="s")
        assert _unmarked(p.messages) == q.messages
        assert p.stats.prefix_breaks == q.stats.prefix_breaks
        assert json.dumps(p.messages).count(MARKER_KEY) <= json.dumps(sent).count(MARKER_KEY)
        assert validate_pairing(p.messages) == []
