"""The content-addressed artifact store and recall."""

from __future__ import annotations

import multiprocessing as mp

from tokenpilot.errors import ArtifactNotFound
from tokenpilot.store.artifacts import ArtifactStore

TEXT = "".join(f"line {i}: value {i * 7}\n" for i in range(1, 101))


def test_content_addressed_and_session_scoped(tmp_path):
    store = ArtifactStore(tmp_path)
    a = store.put("s1", TEXT)
    assert a == store.put("s1", TEXT)  # same content, same id
    assert a.startswith("art_") and len(a) == 28
    assert store.get("s1", a) == TEXT
    assert not store.recall("s2", a).found  # another session cannot read it
    try:
        store.get("s2", a)
    except ArtifactNotFound as exc:
        assert a in str(exc)
    else:
        raise AssertionError("expected ArtifactNotFound")


def test_recall_whole_range_and_pattern(tmp_path):
    store = ArtifactStore(tmp_path)
    a = store.put("s", TEXT)
    assert store.recall("s", a).text == TEXT
    r = store.recall("s", a, start_line=3, end_line=5)
    assert r.text == "line 3: value 21\nline 4: value 28\nline 5: value 35\n"
    assert "lines 3-5 of 100" in r.note
    p = store.recall("s", a, pattern=r"value 7[1-9]\b")
    assert p.text == "11: line 11: value 77\n"
    assert "1 of 100 lines" in p.note
    bad = store.recall("s", a, pattern="(")
    assert bad.found and "invalid pattern" in bad.note
    # out of range is clamped, not an error
    assert store.recall("s", a, start_line=99, end_line=500).text.count("\n") == 2
    assert store.recall("s", a, start_line=500).text == ""


def test_unknown_id_is_a_message_not_an_exception(tmp_path):
    store = ArtifactStore(tmp_path)
    for bad in ("art_ffffffffffffffffffffffff", "nonsense", "", "../etc/passwd"):
        r = store.recall("s", bad)
        assert not r.found and "no artifact" in r.for_model()


def test_lone_surrogates_and_binary_round_trip(tmp_path):
    store = ArtifactStore(tmp_path)
    weird = "ok \udcff\udc80 \x00\x01 end"
    a = store.put("s", weird)
    assert store.get("s", a) == weird
    blob = bytes(range(256)) * 10
    b = store.put("s", blob)
    assert store.get_bytes("s", b) == blob


def test_survives_restart(tmp_path):
    a = ArtifactStore(tmp_path).put("s", TEXT)
    assert ArtifactStore(tmp_path).get("s", a) == TEXT


def _writer(path: str, n: int, out) -> None:
    store = ArtifactStore(path)
    ids = [store.put("shared", f"payload {i % 5}\n" * 1000) for i in range(n)]
    out.put(ids)


def test_concurrent_writers_agree(tmp_path):
    q = mp.get_context("spawn").Queue()
    procs = [mp.get_context("spawn").Process(target=_writer, args=(str(tmp_path), 20, q)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results[0] == results[1] == results[2]
    store = ArtifactStore(tmp_path)
    assert sorted(set(store.artifact_ids("shared"))) == sorted(set(results[0]))


def test_prune_never_drops_live_sessions(tmp_path):
    store = ArtifactStore(tmp_path, size_limit_bytes=1, lease_s=3600)
    store.open_session("live")
    live = store.put("live", "x" * 10_000)
    dead = store.put("dead", "y" * 10_000)
    store.close_session("dead")
    removed = store.prune()
    assert removed == 1
    assert store.get("live", live)
    assert not store.recall("dead", dead).found
    # even over the limit, live artifacts stay
    assert store.prune() == 0 and store.get("live", live)


def test_recall_says_when_a_range_is_past_the_end_and_heads_a_whole_recall():
    store = ArtifactStore()
    text = "".join(f"line {i}\n" for i in range(1, 308))
    aid = store.put("s", text)
    past = store.recall("s", aid, start_line=777, end_line=777)
    assert past.text == "" and "past the end" in past.note and "307 lines" in past.note
    backwards = store.recall("s", aid, start_line=10, end_line=5)
    assert backwards.text == "" and "before start_line" in backwards.note
    whole = store.recall("s", aid)
    assert (
        whole.text == text and whole.for_model() == f"{whole.note}\n{text}" and "all 307 lines" in whole.note
    )


def test_a_pattern_on_one_long_line_returns_snippets_not_the_page():
    store = ArtifactStore()
    page = (
        "<html>" + "<p>filler text</p>" * 20_000 + "<p>ERROR 42 here</p>" + "<p>more</p>" * 5000 + "</html>"
    )
    aid = store.put("s", page)
    r = store.recall("s", aid, pattern="ERROR \\d+")
    assert "ERROR 42 here" in r.text and len(r.text) < 1000 and "1 of 1 lines" in r.note
    many = store.recall("s", aid, pattern="filler")
    assert len(many.text) < 20_000 and "narrow the pattern" in many.text


def test_an_evicted_segment_is_searched_and_ranged_line_by_line_and_recalled_whole_as_stored():
    """A segment's archive is the JSON of its messages on one line: ranges and patterns
    read it as lines (each message's head, its text, its calls), the whole recall is the
    stored JSON byte for byte."""
    import json

    from tokenpilot._canonical import canonical_json

    listing = "\n".join(f"src/pkg/mod_{i}.py:{i}: def handler_{i}(request): ..." for i in range(40))
    messages = [
        {"role": "assistant", "content": "Looking for the handlers.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "grep -rn handler src"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": listing},
    ]  # fmt: skip
    store = ArtifactStore()
    stored = canonical_json(messages)
    aid = store.put("s", stored)
    hit = store.recall("s", aid, pattern=r"handler_17\b")
    assert (
        hit.text == "21: src/pkg/mod_17.py:17: def handler_17(request): ...\n" and "1 of 43 lines" in hit.note
    )
    head = store.recall("s", aid, start_line=1, end_line=3)
    assert head.text.splitlines() == [
        "[assistant] Looking for the handlers.",
        '[call c1] bash {"command": "grep -rn handler src"}',
        "[tool c1]",
    ]
    whole = store.recall("s", aid)
    assert whole.text == stored and json.loads(whole.text) == messages and "all 43 lines" in whole.note


def test_a_segment_with_malformed_messages_is_still_searched_not_raised_on():
    """A message passed through malformed (lenient mode) keeps any shape in its archive:
    a range or pattern over it reads what it can and never raises."""
    import json

    store = ArtifactStore()
    odd = [
        {"role": "user", "content": False},
        {"role": "assistant", "content": None, "tool_calls": 5},
        {"role": "tool", "tool_call_id": 7, "content": [True, {"type": "text", "text": "needle"}]},
    ]
    aid = store.put("s", json.dumps(odd))
    hit = store.recall("s", aid, pattern="needle")
    assert hit.found and "needle" in hit.text
    assert store.recall("s", aid, start_line=1, end_line=2).text.splitlines() == [
        "[user] False",
        "[assistant]",
    ]
