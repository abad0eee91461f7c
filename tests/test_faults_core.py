"""Faults the core must survive: hostile patterns and arguments, malformed or huge inputs,
lone surrogates, a full disk, and many processes on one store."""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import re
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpilot import Config, TokenPilot
from tokenpilot.errors import ConfigError, MessageError, StoreError
from tokenpilot.ingest.unstored import cut_to_limit, unstored_form
from tokenpilot.messages.model import check_message
from tokenpilot.store import search as recall_search
from tokenpilot.store.artifacts import ArtifactStore
from tokenpilot.store.search import search_lines
from tokenpilot.tokens import count_tokens

LOG = "".join(f"line {i}: value {i * 7}\n" for i in range(1, 101))


# ---------------------------------------------------------------------------
# 1. recall patterns run in linear time, with Python-re-like results
# ---------------------------------------------------------------------------
def _recall(text: str, pattern: str, **kw):
    store = ArtifactStore()
    return store.recall("s", store.put("s", text), pattern=pattern, **kw)


def test_a_catastrophic_pattern_matches_like_re_would_without_backtracking():
    text = "a" * 40 + "b\n" + "a" * 40 + "\nzzz\n"
    r = _recall(text, r"(a+)+$")
    assert r.text == "2: " + "a" * 40 + "\n"
    assert "1 of 3 lines" in r.note and "plain text" not in r.note


@pytest.mark.parametrize(
    "pattern",
    [
        r"value 7[1-9]\b",
        r"^line 1\d:",
        r"\d$",
        r"(?i)LINE 5:",
        r"\bvalue 14\b",
        r"[13579]: value",
        r"\s\d{3}$",
    ],
)
def test_common_patterns_give_what_re_gave_on_each_line(pattern):
    expected = "".join(
        f"{i + 1}: {line}" for i, line in enumerate(LOG.splitlines(True)) if re.search(pattern, line)
    )
    assert expected and _recall(LOG, pattern).text == expected


def test_anchors_are_per_line_and_python_z_works():
    assert _recall(LOG, r"77\Z").text == "11: line 11: value 77\n"
    assert _recall(LOG, r"\Aline 100:").text == "100: line 100: value 700\n"
    assert _recall("ab\r\ncd\rab\u2028ef", r"^ab").text == "1: ab\r\n3: ab\u2028"


def test_no_match_spans_a_line_break():
    assert _recall("foo\nbar\n", r"foo\s+bar").text == ""
    assert _recall("foo\nbar\n", r"o[^x]b").text == ""


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(ab)\1", "does not support (invalid escape sequence: \\1"),
        (r"x(?=ab)", "does not support (invalid perl operator: (?="),
        (r"(?<=x)ab", "does not support (invalid perl operator: (?<="),
        (r"ab*+", "does not support (bad repetition operator: *+"),
        ("[ab", "invalid pattern (missing ]: [ab)"),
        ("(ab", "invalid pattern (missing ): (ab)"),
        (r"((\pL{100}){10}){10}", "invalid pattern (invalid repetition size: {10})"),
    ],
)
def test_unsupported_or_invalid_patterns_are_searched_as_plain_text(pattern, why):
    text = f"first\nhas {pattern} in it\nlast {pattern.upper()}\n"
    r = _recall(text, pattern)
    assert r.text == f"2: has {pattern} in it\n"  # case-sensitive: line 3 differs in case
    assert why in r.note
    assert "searched for it as plain text instead: 1 of 3 lines of art_" in r.note
    assert r.note.endswith(f"contain {pattern!r}]")


def test_a_pattern_over_the_memory_budget_is_searched_as_plain_text():
    huge = r"\pL{999}\pL{999}"
    r = _recall(f"x\n{huge}\n", huge)
    assert r.text == f"2: {huge}\n"
    assert r.note.startswith("[tokenpilot: the pattern is too large to match within 32 MiB; searched")
    small = _recall("x\n" + "é" * 999 + "\n", r"\pL{999}")
    assert small.text == "2: " + "é" * 999 + "\n" and "plain text" not in small.note


def test_the_pattern_length_limit_still_holds():
    r = _recall(LOG, "|".join(f"w{i:04d}" for i in range(300)))
    assert r.text == "" and r.note == "[tokenpilot: pattern too long (1,799 chars; the limit is 1,000)]"


def test_long_lines_give_snippets_in_the_same_format_for_regex_and_plain_text():
    line = "x" * 3000 + "ERROR 42(" + "y" * 3000
    text = "short\n" + line + "\n"
    rx = _recall(text, r"ERROR \d+\(")
    lit = _recall(text, "ERROR 42(")  # invalid regex: plain text
    expected = f"2[chars 2800-3209 of {len(line) + 1}]: " + "x" * 200 + "ERROR 42(" + "y" * 200 + "\n"
    assert rx.text == expected and lit.text == expected
    assert "plain text" in lit.note and "plain text" not in rx.note


def test_snippet_offsets_count_characters_not_utf8_bytes():
    line = "é" * 2500 + "needle" + "ü" * 10
    r = _recall(line, "need+le")
    assert r.text == f"1[chars 2300-2516 of {len(line)}]: " + "é" * 200 + "needle" + "ü" * 10 + "\n"


def test_lone_surrogates_in_text_and_pattern():
    text = "ok\nbad \ud800 here\nend\n"
    assert _recall(text, r"bad . here").text == "2: bad \ud800 here\n"  # matched as U+FFFD
    r = _recall(text, "\ud800 here")
    assert r.text == "2: bad \ud800 here\n" and "lone surrogate" in r.note


def test_windows_and_cuts_inside_long_lines_find_the_same_lines(monkeypatch):
    lines = ("a" * 50 + "needle" + "b" * 50 + "\n" + "short needle\n" + "c" * 90 + "\n") * 20
    pattern = r"ne+dle"
    whole = search_lines(lines.splitlines(True), pattern)
    monkeypatch.setattr(recall_search, "WINDOW_BYTES", 16)
    monkeypatch.setattr(recall_search, "MAX_WINDOW_BYTES", 40)
    monkeypatch.setattr(recall_search, "OVERLAP_BYTES", 10)
    monkeypatch.setattr(recall_search, "LONG_LINE", 20)
    cut = search_lines(lines.splitlines(True), pattern)
    assert whole.matched == cut.matched == 40 and cut.stopped_at is None


def test_the_time_budget_stops_at_a_window_and_says_where(monkeypatch):
    monkeypatch.setattr(recall_search, "WINDOW_BYTES", 1000)
    monkeypatch.setattr(recall_search, "MAX_WINDOW_BYTES", 2000)
    lines = LOG.splitlines(True) * 30
    r = search_lines(lines, "value", budget_s=0.0)  # stops after the first window
    assert r.stopped_at is not None and 0 < r.stopped_at < len(lines)
    assert r.matched == r.stopped_at  # every line searched matched; none after
    assert search_lines(lines, "value").stopped_at is None


# ---------------------------------------------------------------------------
# 2. execute_recall answers hostile arguments with a tool result, never an exception
# ---------------------------------------------------------------------------
def _pilot_with_artifact() -> tuple[TokenPilot, str]:
    tp = TokenPilot(lifecycle=False)
    aid = tp.store.put("s", LOG)
    tp.session("s")
    return tp, aid


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "the JSON is nested too deeply"),
        ('{"artifact_id": ' + "[" * 100_000 + "]" * 100_000 + "}", "the JSON is nested too deeply"),
        ("{not json", "not JSON (Expecting property name enclosed in double quotes"),
        ("1" * 5000, "not JSON (Exceeds the limit"),
        ("[1, 2]", "arguments must be a JSON object, got an array"),
        ("null", "arguments must be a JSON object, got null"),
        ("{}", "'artifact_id' is missing"),
        ('{"artifact_id": 12}', "'artifact_id' must be a string, got a number"),
        ('{"artifact_id": ["art_1"]}', "'artifact_id' must be a string, got an array"),
        ('{"artifact_id": null}', "'artifact_id' must be a string, got null"),
        ('{"artifact_id": "x", "start_line": true}', "'start_line' must be an integer, got a boolean"),
        ('{"artifact_id": "x", "end_line": 2.5}', "'end_line' must be an integer, got a number"),
        ('{"artifact_id": "x", "pattern": {"a": 1}}', "'pattern' must be a string, got an object"),
        (b"\xff\xfe", "arguments are not UTF-8"),
        (42, "arguments must be a JSON object, got a number"),
    ],
)
def test_execute_recall_turns_hostile_arguments_into_a_clear_tool_result(arguments, problem):
    tp, _ = _pilot_with_artifact()
    out = tp.execute_recall(arguments, session_id="s")
    assert out.startswith(f"[tokenpilot: invalid recall_artifact arguments: {problem}")
    assert out.endswith('Expected {"artifact_id": "art_…"}]')


def test_execute_recall_still_runs_good_arguments_given_as_text_bytes_or_objects():
    tp, aid = _pilot_with_artifact()
    for args in (
        json.dumps({"artifact_id": aid, "pattern": "value 77$"}),
        {"artifact_id": aid, "pattern": "value 77$"},
    ):
        assert tp.execute_recall(args, session_id="s").endswith("\n11: line 11: value 77\n")
    assert tp.execute_recall(json.dumps({"artifact_id": aid}).encode(), session_id="s").endswith(LOG)
    huge = tp.execute_recall(json.dumps({"artifact_id": aid, "start_line": 10**30}), session_id="s")
    assert "past the end" in huge


def test_execute_recall_reports_an_unreadable_store_instead_of_raising(monkeypatch):
    tp, aid = _pilot_with_artifact()

    def broken(*_a, **_k):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(tp.store, "get_bytes", broken)
    out = tp.execute_recall({"artifact_id": aid}, session_id="s")
    assert (
        out
        == "[tokenpilot: the artifact store could not be read ([Errno 5] Input/output error); try again later]"
    )


# ---------------------------------------------------------------------------
# 3. prepare: malformed messages pass through in lenient mode; shape limits
# ---------------------------------------------------------------------------
def test_an_unknown_role_with_junk_tool_calls_passes_through_as_malformed():
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "wizard", "tool_calls": "junk"},
        {"role": "assistant", "tool_calls": [1, {"id": 3}]},
        {"role": "system", "content": 5},
    ]
    tp = TokenPilot(lifecycle=False)
    for _ in range(2):  # the second call matches the passed-through entries again
        p = tp.prepare(msgs, session_id="s")
        assert p.messages == msgs and p.stats.malformed == (3 if _ == 0 else 0)
    assert p.stats.prefix_break is None
    with pytest.raises(MessageError, match=r"^message 1: 'tool_calls' must be a list$"):
        TokenPilot(Config(strict=True), lifecycle=False).prepare(msgs)


def test_a_malformed_leading_system_message_is_history_not_the_system_prompt():
    msgs = [{"role": "system", "content": {"not": "text"}}, {"role": "user", "content": "hi"}]
    p = TokenPilot(lifecycle=False).prepare(msgs)
    assert p.messages == msgs and p.stats.malformed == 1
    assert p.stats.warnings == ("message 0: 'content' must be a string, a list of parts or null, got dict",)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("strict", [False, True])
def test_a_message_nested_100k_deep_is_refused_naming_the_limit(strict):
    tp = TokenPilot(Config(strict=strict), lifecycle=False)
    ok = [{"role": "user", "content": "hi"}]
    tp.prepare(ok, session_id="s")
    deep = {
        "role": "tool",
        "tool_call_id": "c",
        "content": [{"type": "text", "text": "x", "x": _nested(100_000)}],
    }
    with pytest.raises(MessageError) as err:
        tp.prepare([*ok, {"role": "assistant", "content": "a"}, deep], session_id="s")
    assert (
        str(err.value) == "message 2: nested deeper than 64 levels of objects and arrays (limit max_depth=64)"
    )
    assert len(tp.session("s").entries) == 1  # refused before anything was ingested
    with pytest.raises(MessageError, match=r"^message 0: nested deeper than 64 levels"):
        tp.derive_session_id([deep])
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"p": _nested(100)}}}]
    with pytest.raises(MessageError, match=r"^messages: tools\[0\] is nested deeper than 64 levels"):
        tp.prepare(ok, tools, session_id="s")


def test_the_depth_limit_counts_levels_exactly():
    msg = {"role": "user", "content": "x", "meta": _nested(63)}  # the message is level 1
    assert TokenPilot(lifecycle=False).prepare([msg]).messages == [msg]
    with pytest.raises(MessageError, match="limit max_depth=64"):
        TokenPilot(lifecycle=False).prepare([{**msg, "meta": _nested(64)}])
    with pytest.raises(MessageError, match=r"nested deeper than 5 levels .*\(limit max_depth=5\)"):
        TokenPilot(Config(max_depth=5), lifecycle=False).prepare([{**msg, "meta": _nested(5)}])


def test_a_cyclic_message_is_refused_as_too_deep():
    msg: dict = {"role": "user", "content": "x"}
    msg["self"] = msg
    with pytest.raises(MessageError, match="nested deeper than 64 levels"):
        TokenPilot(lifecycle=False).prepare([msg])


def test_too_many_messages_are_refused_naming_the_limit():
    tp = TokenPilot(Config(max_messages=10), lifecycle=False)
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(11)]
    with pytest.raises(MessageError) as err:
        tp.prepare(msgs)
    assert str(err.value) == "messages: 11 messages are more than 10 (limit max_messages=10)"
    assert tp.prepare(msgs[:10]).stats.messages_in == 10


@pytest.mark.parametrize(
    ("field", "value", "text"),
    [
        ("max_depth", 3, "max_depth must be an integer of at least 4, got 3"),
        ("max_depth", True, "max_depth must be an integer of at least 4, got True"),
        ("max_messages", 0, "max_messages must be an integer of at least 1, got 0"),
        ("max_messages", 1.5, "max_messages must be an integer of at least 1, got 1.5"),
    ],
)
def test_limits_are_validated(field, value, text):
    with pytest.raises(ConfigError, match=f"^{re.escape(text)}$"):
        Config(**{field: value})
    assert Config().max_depth == 64 and Config().max_messages == 100_000


def test_fifty_thousand_ordinary_messages_prepare():
    msgs: list[dict] = [{"role": "system", "content": "You are an agent."}]
    for i in range(25_000):
        msgs.append({"role": "user", "content": f"question {i}"})
        msgs.append({"role": "assistant", "content": f"answer {i}"})
    tp = TokenPilot(lifecycle=False)
    first = tp.prepare(msgs[:50_001])
    again = tp.prepare(msgs[:50_001])
    assert first.stats.messages_in == 50_001 and again.messages == first.messages
    assert again.stats.ingested == 0 and again.stats.prefix_break is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_ROLES = (
    st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "wizard", ""]) | _JSON
)
_CALL = st.fixed_dictionaries(
    {"id": st.text(max_size=4), "type": st.just("function")},
    optional={
        "function": st.fixed_dictionaries({"name": st.text(max_size=6), "arguments": st.text(max_size=12)})
    },
)
_MESSAGE = _JSON | st.fixed_dictionaries(
    {"role": _ROLES},
    optional={
        "content": st.text(max_size=30) | _JSON,
        "tool_calls": st.lists(_CALL | _JSON, max_size=2) | _JSON,
        "tool_call_id": st.text(max_size=4) | _JSON,
        "name": _JSON,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_MESSAGE, max_size=6), st.lists(_MESSAGE, max_size=3), st.booleans())
def test_prepare_never_raises_on_json_shaped_junk(first, more, strict):
    tp = TokenPilot(Config(strict=strict), lifecycle=False)
    for msgs in (first, first + more):
        try:
            p = tp.prepare(msgs, session_id="s")
        except MessageError:
            assert strict, "lenient mode must pass malformed messages through"
            return
        bad = [m for i, m in enumerate(msgs) if not _well_formed(m, i)]
        assert not (strict and bad)
        assert all(m in p.messages for m in bad)  # passed through untouched, not dropped
        json.dumps(p.openai_request(model="m"))


def _well_formed(msg, index) -> bool:
    try:
        check_message(msg, index)
    except MessageError:
        return False
    return True


# ---------------------------------------------------------------------------
# 4. lone surrogates: kept as given, stored exactly, keyed safely
# ---------------------------------------------------------------------------
def _call(cid: str, name: str, args: dict) -> dict:
    fn = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": cid, "type": "function", "function": fn}],
    }


def test_a_session_with_lone_surrogates_prepares_stores_recalls_and_survives_export(tmp_path):
    sid = "agent\udfff:main"
    output = "".join(f"row {i} \ud800 payload {'z' * 60}\n" for i in range(1500))
    msgs = [
        {"role": "system", "content": "You are an agent \udfff."},
        {"role": "user", "content": "list \ud800 things"},
        _call("c1", "bash", {"cmd": "ls"}),
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]
    tp = TokenPilot(store=ArtifactStore(tmp_path), lifecycle=False)
    p = tp.prepare(msgs, session_id=sid)
    assert p.stats.reduced == 1 and len(p.stats.artifacts) == 1
    assert p.messages[1] == msgs[1]  # the agent's own text forwarded as given
    (aid,) = p.stats.artifacts
    assert aid in p.messages[-1]["content"]
    back = tp.execute_recall({"artifact_id": aid}, session_id=sid)
    assert back.endswith("\n" + output) and ArtifactStore(tmp_path).get(sid, aid) == output
    assert tp.recall(aid, pattern="row 7 . payload", session_id=sid).text.startswith(
        "8: row 7 \ud800 payload"
    )
    assert tp.derive_session_id(msgs) == tp.derive_session_id(json.loads(json.dumps(msgs)))

    exported = json.dumps(tp.export_session(sid), ensure_ascii=True)
    assert "\\udfff" in exported and "\\ud800" in exported
    restored = TokenPilot(store=ArtifactStore(tmp_path), lifecycle=False)
    restored.import_session(json.loads(exported))
    later = [*msgs, {"role": "assistant", "content": "done \ud800"}, {"role": "user", "content": "and?"}]
    expected = tp.prepare(later, session_id=sid)
    got = restored.prepare(later, session_id=sid)
    assert got.messages == expected.messages and got.stats.prefix_break is None
    assert restored.execute_recall({"artifact_id": aid}, session_id=sid) == back


def test_surrogate_session_ids_never_collide_with_plain_ones(tmp_path):
    store = ArtifactStore(tmp_path)
    weird, plain = "s\ud800", "~:" + ("s\ud800".encode("utf-8", "surrogatepass").hex())
    a = store.put(weird, "one")
    store.put(plain, "two")
    assert store.get(weird, a) == "one" and not store.recall(plain, a).found
    assert list(store.artifact_ids(weird)) == [a]
    store.close_session(weird)
    assert store.prune(now=10**12) == 0  # under the size limit: nothing to do
    small = ArtifactStore(tmp_path, size_limit_bytes=1, lease_s=1)
    small.open_session(plain)
    assert small.prune() == 1 and not small.recall(weird, a).found  # the closed one, decoded from its key
    assert list(small.artifact_ids(plain))


def test_a_session_named_like_a_prefix_of_another_does_not_see_or_prune_its_artifacts(tmp_path):
    store = ArtifactStore(tmp_path, size_limit_bytes=1, lease_s=3600)
    store.open_session("agent:main:sub")
    live = store.put("agent:main:sub", "x" * 1000)
    store.put("agent:main", "y" * 1000)
    assert len(list(store.artifact_ids("agent:main"))) == 1
    store.close_session("agent:main")
    assert store.prune() == 1 and store.get("agent:main:sub", live) == "x" * 1000


def test_tokens_of_a_lone_surrogate_are_those_of_the_replacement_character():
    assert count_tokens("a \ud800 b") == count_tokens("a \ufffd b")
    assert count_tokens("\udfff" * 70_000) == count_tokens("\ufffd" * 70_000)  # the sampled path too


# ---------------------------------------------------------------------------
# 5. a full disk: the hard limit holds, nothing unreduced is frozen, nothing is lost
# ---------------------------------------------------------------------------
class FullDisk(ArtifactStore):
    """A store whose writes fail with ENOSPC until `full` is set to False."""

    full = True

    def put(self, session_id, data):
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().put(session_id, data)


def _build_session() -> list[dict]:
    big = "".join(f"{i:07d} compiler output line with some details here\n" for i in range(8_940))[:446_890]
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "build it"},
        _call("c1", "bash", {"cmd": "make"}),
        {"role": "tool", "tool_call_id": "c1", "content": big},
        _call("c2", "bash", {"cmd": "make test"}),
        {"role": "tool", "tool_call_id": "c2", "content": "".join(f"test {i} ok\n" for i in range(4000))},
        {"role": "assistant", "content": "Built; tests pass."},
        {"role": "user", "content": "thanks"},
    ]


NO_SPACE = "artifact store write failed ([Errno 28] No space left on device)"


def test_a_full_disk_cuts_to_the_hard_limit_without_a_recall_handle():
    msgs = _build_session()
    tp = TokenPilot(store=FullDisk(), lifecycle=False)
    p = tp.prepare(msgs[:4], session_id="s")
    out = p.messages[-1]["content"]
    assert len(msgs[3]["content"]) == 446_890 and len(out) == 200_000 == tp.config.hard_limit_chars
    assert "art_" not in out and p.stats.artifacts == () and p.stats.reduced == 0
    assert (
        "\n[tokenpilot: 247,072 of 446,890 chars cut here to stay under the 200,000-char limit; the original "
        "could not be stored (No space left on device), so the cut part cannot be recalled]\n"
    ) in out
    assert out.startswith(msgs[3]["content"][:100_000]) and out.endswith(msgs[3]["content"][-70_000:])
    assert p.messages[:3] == msgs[:3]  # nothing else touched
    assert p.stats.unstored == 1
    assert p.stats.warnings == (
        f"{NO_SPACE}: 1 message(s) sent without reduction, tool outputs over 200,000 chars cut with no "
        "recall handle; retried at the next call",
    )


def test_after_the_disk_frees_up_the_unstored_message_is_reduced_and_stored():
    msgs = _build_session()
    store = FullDisk()
    tp = TokenPilot(store=store, lifecycle=False)
    first = tp.prepare(msgs[:6], session_id="s")
    assert first.stats.unstored == 2  # both outputs needed the store
    still = tp.prepare(msgs[:7], session_id="s")  # still full: same rendering, no break
    assert still.messages[: len(first.messages)] == first.messages
    assert still.stats.prefix_break is None and still.stats.unstored == 2
    assert still.stats.warnings and still.stats.warnings[0].startswith(NO_SPACE)

    store.full = False
    back = tp.prepare(msgs, session_id="s")
    assert back.stats.prefix_break == "store_recovered" and back.stats.prefix_breaks == 1
    assert back.stats.unstored == 0 and back.stats.warnings == () and back.stats.reduced == 2
    clean = TokenPilot(store=ArtifactStore(), lifecycle=False).prepare(msgs, session_id="s")
    assert back.messages == clean.messages  # as if the disk had never been full
    for aid in back.stats.artifacts:
        assert aid in "".join(str(m.get("content")) for m in back.messages)
    originals = {tp.recall(aid, session_id="s").text for aid in back.stats.artifacts}
    assert originals == {msgs[3]["content"], msgs[5]["content"]}  # byte-exact
    again = tp.prepare(msgs, session_id="s")
    assert again.stats.prefix_break is None and again.stats.ingested == 0


def test_an_unstored_message_survives_export_and_is_retried_after_import():
    msgs = _build_session()[:4]
    tp = TokenPilot(store=FullDisk(), lifecycle=False)
    tp.prepare(msgs, session_id="s")
    data = json.loads(json.dumps(tp.export_session("s")))
    working = ArtifactStore()
    restored = TokenPilot(store=working, lifecycle=False)
    restored.import_session(data)
    p = restored.prepare(msgs, session_id="s")
    # The restored session knows what the last call sent (unreduced), so the change is reported.
    assert p.stats.unstored == 0 and p.stats.reduced == 1 and p.stats.prefix_break == "store_recovered"
    (aid,) = p.stats.artifacts
    assert working.get("s", aid) == msgs[3]["content"]


def test_a_database_failure_is_an_oserror_with_its_cause(monkeypatch):
    store = ArtifactStore()

    def full(*_a, **_k):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store._cache, "add", full)
    with pytest.raises(StoreError) as err:
        store.put("s", "x")
    assert isinstance(err.value, OSError) and err.value.strerror == "database or disk is full"
    assert (
        str(err.value) == "artifact store write failed: database or disk is full (sqlite3.OperationalError)"
    )
    tp = TokenPilot(store=store, lifecycle=False)
    p = tp.prepare(_build_session()[:4], session_id="s")
    assert "could not be stored (database or disk is full)" in p.messages[-1]["content"]
    assert p.stats.warnings[0].startswith(
        "artifact store write failed (artifact store write failed: database"
    )


def test_a_store_that_cannot_open_a_lease_does_not_refuse_the_session(monkeypatch):
    store = FullDisk()
    monkeypatch.setattr(store, "open_session", lambda sid: FullDisk.put(store, sid, ""))
    p = TokenPilot(store=store, lifecycle=False).prepare([{"role": "user", "content": "hi"}])
    assert p.messages == [{"role": "user", "content": "hi"}]


def test_the_cut_keeps_every_part_within_the_limit_and_leaves_short_text_alone():
    reason = "No space left on device"
    assert cut_to_limit("short", 10, reason) == "short"
    for n in (1001, 5000, 123_457):
        cut = cut_to_limit("x" * n, 1000, reason)
        omitted = int(re.search(r"\[tokenpilot: ([\d,]+) of", cut).group(1).replace(",", ""))
        assert 990 <= len(cut) <= 1000 and cut.count("x") == n - omitted
    parts = [
        {"type": "text", "text": "a" * 800},
        {"type": "image_url", "image_url": {"url": "u"}},
        {"type": "text", "text": "b" * 800},
    ]
    msg = unstored_form({"role": "tool", "tool_call_id": "c", "content": parts}, 1000, reason)
    texts = [p["text"] for p in msg["content"] if p["type"] == "text"]
    assert texts[0] == "a" * 800 and len(texts[1]) == 200 and msg["content"][1] == parts[1]
    user = {"role": "user", "content": "u" * 5000}
    assert unstored_form(user, 1000, reason) == user  # only tool output is ever cut


# ---------------------------------------------------------------------------
# 6. eight processes writing one store
# ---------------------------------------------------------------------------
def _payload(worker: int, i: int) -> str:
    """Shared content (every worker writes it), unique content, and values big enough
    that diskcache keeps them as files rather than in SQLite."""
    if i % 3 == 0:
        return f"shared payload {i}\n" * 200
    size = 40_000 if i % 3 == 1 else 300
    return (f"worker {worker} item {i} \ud800 é " * (size // 20 + 1))[:size]


def _store_worker(path: str, worker: int, n: int, start, out) -> None:
    start.wait(timeout=120)  # all processes hit the fresh directory at once
    store = ArtifactStore(path, size_limit_bytes=1 if worker == 0 else 4 * 2**30)
    store.open_session(f"w{worker}")
    written, seen = {}, 0
    for i in range(n):
        text = _payload(worker, i)
        session = "shared" if i % 3 == 0 else f"w{worker}"
        aid = store.put(session, text)
        assert store.get(session, aid) == text
        written[f"{session}|{aid}"] = i
        if worker == 0:  # over its limit at once: prunes while the others write, live sessions only
            store.prune()
        for other in store.artifact_ids("shared"):  # read what the others wrote meanwhile
            seen += bool(store.get_bytes("shared", other))
    out.put((worker, written, seen))


def test_eight_processes_write_and_read_one_store(tmp_path):
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    n = 30
    procs = [ctx.Process(target=_store_worker, args=(str(tmp_path), w, n, start, out)) for w in range(8)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * 8
    fresh = ArtifactStore(tmp_path)
    for worker, written, seen in results:
        assert len(written) == n and seen > 0
        for key, i in written.items():
            session, aid = key.split("|")
            assert fresh.get(session, aid) == _payload(worker, i)
    assert len(set(fresh.artifact_ids("shared"))) == n // 3  # one copy per content, whoever wrote it
    for w in range(8):
        assert len(set(fresh.artifact_ids(f"w{w}"))) == n - n // 3
