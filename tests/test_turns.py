"""Turn segmentation and content-derived turn ids."""

from __future__ import annotations

import copy
import json

from tokenpilot.messages.turns import TurnSegmenter, segment_turns


def call(cid: str, name: str, args: dict) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def session() -> list[dict]:
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Read a.txt and b.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c1", "read", {"path": "a.txt"}), call("c2", "read", {"path": "b.txt"})],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {"role": "assistant", "content": None, "tool_calls": [call("c3", "exec", {"cmd": "wc a.txt"})]},
        {"role": "tool", "tool_call_id": "c3", "content": "1 a.txt"},
        {"role": "assistant", "content": "a has one line"},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "You're welcome."},
    ]


def rewrite_ids(messages: list[dict], prefix: str) -> list[dict]:
    out = copy.deepcopy(messages)
    for m in out:
        for c in m.get("tool_calls") or []:
            c["id"] = prefix + c["id"]
        if m.get("role") == "tool":
            m["tool_call_id"] = prefix + m["tool_call_id"]
    return out


def test_segments_preamble_openers_and_bundles():
    turns = segment_turns(session())
    assert [(t.start, t.end, t.opens_with_user) for t in turns] == [
        (2, 6, True),
        (6, 8, False),
        (8, 9, False),
        (9, 11, True),
    ]
    assert all(t.complete for t in turns)
    assert all(t.turn_id.startswith("t_") and len(t.turn_id) == 14 for t in turns)
    assert len({t.turn_id for t in turns}) == 4


def test_trailing_user_is_not_a_turn_and_missing_results_make_it_incomplete():
    msgs = session()[:4]
    turns = segment_turns(msgs)
    assert len(turns) == 1 and not turns[0].complete
    msgs = session() + [{"role": "user", "content": "next"}]
    assert len(segment_turns(msgs)) == 4
    assert segment_turns([{"role": "system", "content": "x"}]) == []
    assert segment_turns([]) == []


def test_ids_stable_under_tool_call_id_rewriting():
    a = segment_turns(session())
    b = segment_turns(rewrite_ids(session(), "toolu_replayed_"))
    assert [t.turn_id for t in a] == [t.turn_id for t in b]


def test_ids_ignore_argument_whitespace_but_not_argument_values():
    msgs = session()
    spaced = copy.deepcopy(msgs)
    fn = spaced[6]["tool_calls"][0]["function"]
    fn["arguments"] = json.dumps(json.loads(fn["arguments"]), indent=2)
    assert [t.turn_id for t in segment_turns(msgs)] == [t.turn_id for t in segment_turns(spaced)]
    changed = copy.deepcopy(msgs)
    changed[6]["tool_calls"][0]["function"]["arguments"] = json.dumps({"cmd": "wc b.txt"})
    assert segment_turns(msgs)[1].turn_id != segment_turns(changed)[1].turn_id


def test_ids_independent_of_position():
    msgs = session()
    base = [t.turn_id for t in segment_turns(msgs)]
    longer_preamble = [{"role": "system", "content": "another preamble"}] + msgs
    assert [t.turn_id for t in segment_turns(longer_preamble)] == base
    # The same turns after a different, unrelated earlier turn keep their ids.
    other = [
        msgs[0],
        {"role": "user", "content": "unrelated"},
        {"role": "assistant", "content": "ok"},
    ] + msgs[2:]
    assert [t.turn_id for t in segment_turns(other)][1:] == base


def test_identical_turns_get_distinct_stable_ids():
    msgs = [{"role": "system", "content": "s"}]
    for _ in range(3):
        msgs += [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
    ids = [t.turn_id for t in segment_turns(msgs)]
    assert len(set(ids)) == 3
    # Appending never changes earlier ids.
    more = msgs + [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
    assert [t.turn_id for t in segment_turns(more)][:3] == ids


def test_tool_results_do_not_change_the_id():
    msgs = session()
    before = segment_turns(msgs[:4])[0].turn_id
    assert segment_turns(msgs)[0].turn_id == before


def test_list_content_and_mid_session_system_messages():
    msgs = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}],
        },
        {"role": "assistant", "content": "seen"},
        {"role": "system", "content": "reminder"},
        {"role": "assistant", "content": "noted"},
    ]
    turns = segment_turns(msgs)
    assert [(t.start, t.end, t.opens_with_user) for t in turns] == [(0, 2, True), (2, 4, False)]


def test_incremental_segmenter_matches_full_segmentation_on_every_prefix():
    msgs = session() + rewrite_ids(session()[2:], "x")  # repeated content too
    seg = TurnSegmenter()
    for n in range(len(msgs) + 1):
        assert seg.update(msgs[:n]) == segment_turns(msgs[:n]), n


def test_incremental_segmenter_restarts_when_history_is_rewritten():
    msgs = session()
    seg = TurnSegmenter()
    seg.update(msgs)
    rewritten = copy.deepcopy(msgs)
    rewritten[8]["content"] = "a has two lines"
    assert seg.update(rewritten) == segment_turns(rewritten)
    assert seg.update(msgs[:5]) == segment_turns(msgs[:5])
