"""The facade: incremental prepare, layout, settings, bad input, persistence."""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib

import pytest
from PIL import Image

from tokenpilot import Config, MessageError, TokenPilot, VolatilePattern
from tokenpilot.errors import ConfigError
from tokenpilot.store.artifacts import ArtifactStore

SYSTEM = "You are an agent.\nCurrent date: 2026-12-02\nWorking directory: /home/alice/ws\n"
LOG = "\n".join(f"\x1b[32mINFO\x1b[0m step {i}: compiled module_{i}.py ok" for i in range(3000))
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("bash", "read", "web_fetch")
]


# The test system prompt is short: placeholders only when asked to share any length.
SHARED = Config(min_shared_tokens=0)


def call(cid: str, name: str, **args) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        ],
    }


def result(cid: str, content) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def history(output=LOG, name="bash", **args) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "build it"},
        call("c1", name, **(args or {"command": "make"})),
        result("c1", output),
    ]


def tool_msgs(p):
    return [m for m in p.messages if m["role"] == "tool"]


# -- layout --------------------------------------------------------------------
def test_layout_system_values_history_tail():
    p = TokenPilot(SHARED).prepare(history(), TOOLS, session_id="s")
    sys_msg = p.messages[0]["content"]
    stable_text = sys_msg.split("<tokenpilot-values>")[0]
    assert "{{TP_DATE_1}}" in stable_text and "2026-12-02" not in stable_text
    assert "{{TP_PATH_1}} = /home/alice/ws" in sys_msg  # session value, merged after the stable text
    assert "{{TP_DATE_1}} = 2026-12-02" in sys_msg  # the date at the session start: cached too
    assert p.tail_start == len(p.messages)  # nothing changed yet: no per-call tail
    assert [t["function"]["name"] for t in p.tools] == ["bash", "read", "recall_artifact", "web_fetch"]
    body = p.openai_request(model="m")
    assert body["prompt_cache_key"] == "s" and body["tools"] == p.tools
    assert p.anthropic_request(max_tokens=10)["system"][0]["type"] == "text"


def test_session_values_as_separate_message_and_system_tail():
    tp = TokenPilot(SHARED.replace(session_values="message", tail_role="system"))
    p = tp.prepare(history(), session_id="s")
    assert p.messages[1]["role"] == "system" and "/home/alice/ws" in p.messages[1]["content"]
    assert "/home/alice/ws" not in p.messages[0]["content"]
    later = history()
    later[0] = {"role": "system", "content": SYSTEM.replace("2026-12-02", "2026-12-03")}
    q = tp.prepare(later, session_id="s")
    assert q.messages[-1]["role"] == "system" and "2026-12-03" in q.messages[-1]["content"]


def test_placeholders_only_when_enough_of_the_prompt_follows():
    # SYSTEM is short: a values block would cost more than any session could share.
    p = TokenPilot().prepare(history(), TOOLS, session_id="s")
    assert p.messages[0]["content"] == SYSTEM
    long_tail = SYSTEM + "Policy: be careful and thorough.\n" * 300
    msgs = [{"role": "system", "content": long_tail}, *history()[1:]]
    q = TokenPilot().prepare(msgs, TOOLS, session_id="s")
    assert "{{TP_DATE_1}}" in q.messages[0]["content"].split("<tokenpilot-values>")[0]
    # decided once: a later date change in a verbatim session is an appended note, no break
    tp = TokenPilot()
    tp.prepare(history(), TOOLS, session_id="v")
    later = history() + [{"role": "user", "content": "and now?"}]
    later[0] = {"role": "system", "content": SYSTEM.replace("2026-12-02", "2026-12-03")}
    r = tp.prepare(later, TOOLS, session_id="v")
    assert r.stats.prefix_break is None and r.messages[0]["content"] == SYSTEM
    assert any("2026-12-03" in str(m["content"]) for m in r.messages[1:])
    exported = TokenPilot()
    exported.import_session(tp.export_session("v"))
    assert exported.prepare(later, TOOLS, session_id="v").messages == r.messages


def test_recall_tool_joins_when_there_is_something_to_recall():
    booking = [
        {"type": "function", "function": {"name": "get_reservation", "parameters": {"type": "object"}}}
    ]
    tp = TokenPilot(Config(recall_tool_from="auto"))
    small = [{"role": "user", "content": "hi"}, call("c1", "get_reservation", id=1), result("c1", "{}")]
    p = tp.prepare(small, booking, session_id="t")
    assert [t["function"]["name"] for t in p.tools] == ["get_reservation"]
    big = small + [call("c2", "get_reservation", id=2), result("c2", LOG)]
    q = tp.prepare(big, booking, session_id="t")
    assert "recall_artifact" in [t["function"]["name"] for t in q.tools]
    assert q.stats.prefix_break == "tools changed"
    # an agent with a shell or a reader gets it from the first call (no later break)
    p = TokenPilot().prepare(small, TOOLS, session_id="u")
    assert "recall_artifact" in [t["function"]["name"] for t in p.tools]
    p = TokenPilot(Config(recall_tool_from="first_call")).prepare(small, booking, session_id="w")
    assert "recall_artifact" in [t["function"]["name"] for t in p.tools]
    with pytest.raises(ConfigError):
        Config(recall_tool_from="later")


def test_a_first_artifact_that_would_cost_more_than_it_saves_is_not_made():
    """Adding recall_artifact mid-session re-sends the cached prefix uncached (the tools
    come first): an output whose reduction saves less than that passes as it came, so an
    agent whose outputs are rarely big (tau-bench) never pays more than without TokenPilot."""
    booking = [
        {"type": "function", "function": {"name": "get_reservation", "parameters": {"type": "object"}}}
    ]
    policy = "\n".join(f"Rule {i}: refunds for fare class {i % 7} need approval {i}." for i in range(600))
    start = [{"role": "system", "content": policy}, {"role": "user", "content": "hi"}]
    start += [call("c1", "get_reservation", id=1), result("c1", "{}")]
    medium = json.dumps([{"flight": f"HAT{i:03d}", "seat": i, "status": "ok"} for i in range(160)], indent=2)
    tp = TokenPilot()
    tp.prepare(start, booking, session_id="t")
    later = [*start, call("c2", "get_reservation", id=2), result("c2", medium)]
    q = tp.prepare(later, booking, session_id="t")
    assert q.stats.prefix_break is None and q.messages[-1]["content"] == medium
    assert [t["function"]["name"] for t in q.tools] == ["get_reservation"]
    # the same output on the first call costs no re-prefill: it is reduced there
    first = TokenPilot().prepare(later, booking, session_id="u")
    assert len(tool_msgs(first)[-1]["content"]) < len(medium)
    assert "recall_artifact" in [t["function"]["name"] for t in first.tools]
    # an output that saves more than the re-prefill is reduced, and the tool joins
    huge = [*later, call("c3", "get_reservation", id=3), result("c3", LOG)]
    r = tp.prepare(huge, booking, session_id="t")
    assert r.stats.prefix_break == "tools changed" and len(tool_msgs(r)[-1]["content"]) < len(LOG) // 10
    assert tool_msgs(r)[-2]["content"] == medium  # frozen as it was first sent


def test_placeholders_once_varied_waits_for_a_second_value():
    cfg = Config(min_shared_tokens=0, placeholders="once_varied")
    tp = TokenPilot(cfg)

    def day(d: str) -> list[dict]:
        return [
            {"role": "system", "content": SYSTEM.replace("2026-12-02", d)},
            {"role": "user", "content": "go"},
        ]

    a = tp.prepare(day("2026-12-02"), TOOLS, session_id="a")
    assert a.messages[0]["content"] == SYSTEM  # one value seen: sent as it came, no values block
    b = tp.prepare(day("2026-12-03"), TOOLS, session_id="b")
    c = tp.prepare(day("2026-12-04"), TOOLS, session_id="c")
    assert "{{TP_" in b.messages[0]["content"] and "2026-12-03" in b.messages[0]["content"]
    head = b.messages[0]["content"].split("<tokenpilot-values>")[0]
    assert c.messages[0]["content"].startswith(head)  # later days share the placeholder form
    again = tp.prepare(day("2026-12-02") + [{"role": "assistant", "content": "ok"}], TOOLS, session_id="a")
    assert again.messages[0] == a.messages[0]  # a session keeps the form it started with
    assert (
        TokenPilot(SHARED).prepare(day("2026-12-02"), TOOLS, session_id="x").messages[0]["content"] != SYSTEM
    )
    with pytest.raises(ConfigError):
        Config(placeholders="sometimes")


def test_stabilize_off_and_recall_tool_off():
    p = TokenPilot(Config(stabilize=False, register_recall_tool=False)).prepare(
        history(), TOOLS, session_id="s"
    )
    assert p.messages[0]["content"] == SYSTEM and p.tail_start == len(p.messages)
    assert "recall_artifact" not in [t["function"]["name"] for t in p.tools]


def test_declared_volatile_pattern():
    msgs = history()
    msgs[0] = {"role": "system", "content": SYSTEM + "Build: nightly-8842\n"}
    plain = TokenPilot(SHARED).prepare(msgs, session_id="s")
    assert "nightly-8842" in plain.messages[0]["content"].split("<tokenpilot-values>")[0]
    custom = TokenPilot(
        SHARED.replace(volatile_patterns=(VolatilePattern("BUILD", r"nightly-\d+"),))
    ).prepare(msgs, session_id="s")
    assert "{{TP_BUILD_1}}" in custom.messages[0]["content"]


# -- incremental and stable ---------------------------------------------------------
def test_incremental_prepare_ingests_only_new_messages():
    tp = TokenPilot()
    msgs = history()
    first = tp.prepare(msgs, TOOLS, session_id="s")
    assert first.stats.ingested == 3 and first.stats.reduced == 1
    msgs2 = msgs + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]
    second = tp.prepare(msgs2, TOOLS, session_id="s")
    assert second.stats.ingested == 2 and second.stats.reduced == 0
    assert second.stable_messages[: first.tail_start] == first.stable_messages
    assert second.stats.prefix_break is None


def test_rewritten_tool_call_ids_keep_content_and_do_not_reingest():
    tp = TokenPilot()
    msgs = history()
    a = tp.prepare(msgs, session_id="s")
    renamed = [dict(m) for m in msgs]
    renamed[2] = call("callc1", "bash", command="make")
    renamed[3] = result("callc1", LOG)
    b = tp.prepare(renamed, session_id="s")
    assert b.stats.ingested == 0
    assert tool_msgs(b)[0]["content"] == tool_msgs(a)[0]["content"]
    assert tool_msgs(b)[0]["tool_call_id"] == "callc1"


def test_date_rollover_is_not_a_prefix_break():
    tp = TokenPilot(SHARED)
    msgs = history()
    a = tp.prepare(msgs, session_id="s")
    later = [dict(m) for m in msgs] + [{"role": "user", "content": "next day"}]
    later[0] = {"role": "system", "content": SYSTEM.replace("2026-12-02", "2026-12-03")}
    b = tp.prepare(later, session_id="s")
    assert b.stats.prefix_break is None
    assert b.messages[0] == a.messages[0]
    assert "2026-12-03" in b.messages[-1]["content"]


def test_system_prompt_change_is_appended_not_rewritten():
    tp = TokenPilot()
    msgs = history()
    a = tp.prepare(msgs, session_id="s")
    changed = [dict(m) for m in msgs] + [{"role": "user", "content": "go on"}]
    changed[0] = {"role": "system", "content": SYSTEM + "New rule: be brief.\n"}
    b = tp.prepare(changed, session_id="s")
    assert b.stats.prefix_break is None and b.messages[0] == a.messages[0]
    notes = [m for m in b.messages if "tokenpilot-system-update" in str(m["content"])]
    assert len(notes) == 1 and "+New rule: be brief." in notes[0]["content"]
    # the note stays where it was inserted on later calls
    c = tp.prepare(changed + [{"role": "assistant", "content": "ok"}], session_id="s")
    assert c.stable_messages[: b.tail_start] == b.stable_messages


def test_system_updates_replace_mode_breaks_the_prefix_and_says_why():
    tp = TokenPilot(Config(system_updates="replace"))
    msgs = history()
    tp.prepare(msgs, session_id="s")
    changed = [dict(m) for m in msgs]
    changed[0] = {"role": "system", "content": SYSTEM + "New rule.\n"}
    b = tp.prepare(changed, session_id="s")
    assert b.stats.prefix_break == "system prompt changed" and b.stats.prefix_breaks == 1
    assert "New rule." in b.messages[0]["content"]


def test_new_tool_mid_session_is_appended_and_counted():
    tp = TokenPilot()
    tp.prepare(history(), TOOLS[:1], session_id="s")
    p = tp.prepare(history() + [{"role": "user", "content": "x"}], TOOLS, session_id="s")
    assert p.stats.prefix_break == "tools changed"
    assert [t["function"]["name"] for t in p.tools] == ["bash", "recall_artifact", "read", "web_fetch"]


def test_history_rewrite_is_detected():
    tp = TokenPilot()
    msgs = history()
    tp.prepare(msgs, session_id="s")
    p = tp.prepare(msgs[:2] + [{"role": "assistant", "content": "changed my mind"}], session_id="s")
    assert p.stats.prefix_break == "history rewritten by the caller"


# -- reduction and recall -----------------------------------------------------------
def test_reduced_output_names_its_artifact_and_recall_is_exact():
    tp = TokenPilot()
    p = tp.prepare(history(), session_id="s")
    text = tool_msgs(p)[0]["content"]
    assert len(text) < len(LOG) / 3
    aid = p.stats.artifacts[0]
    assert aid in text and "recall_artifact" in text
    assert tp.recall(aid, session_id="s").text == LOG
    whole = tp.execute_recall(json.dumps({"artifact_id": aid}), session_id="s")
    header, body = whole.split("\n", 1)
    assert body == LOG and header.startswith("[tokenpilot: all ") and aid in header
    assert "invalid" in tp.execute_recall("{not json", session_id="s")
    assert "invalid" in tp.execute_recall({"artifact_id": aid, "start_line": "x"}, session_id="s")
    assert "no artifact" in tp.execute_recall({"artifact_id": "art_" + "0" * 24}, session_id="s")


def test_trigger_min_chars_gate():
    out = LOG[:3000]
    assert tool_msgs(TokenPilot().prepare(history(out), session_id="s"))[0]["content"] != out
    assert (
        tool_msgs(TokenPilot(Config(trigger_min_chars=5000)).prepare(history(out), session_id="s"))[0][
            "content"
        ]
        == out
    )


def test_a_reduction_that_saves_too_little_is_not_applied():
    # 3000 chars of plain text with a few trailing spaces: format cleaning saves 20 chars,
    # less than its footer; the original must pass unchanged and nothing is stored.
    # (Every line is different, so log_folding has no run or repeated block to fold.)
    out = "".join("word " * 11 + chr(97 + i // 26) + chr(97 + i % 26) + "  \n" for i in range(50))
    p = TokenPilot().prepare(history(out), session_id="s")
    assert tool_msgs(p)[0]["content"] == out and not p.stats.artifacts
    # the same text with a large saving available is reduced
    noisy = ("\x1b[31mword\x1b[0m " * 11 + "\n") * 50
    p = TokenPilot().prepare(history(noisy), session_id="s")
    assert len(tool_msgs(p)[0]["content"]) < len(noisy) * 0.9
    # min_saving sets the margin: at 0.99 not even that one qualifies
    p = TokenPilot(Config(min_saving=0.99)).prepare(history(noisy), session_id="s")
    assert tool_msgs(p)[0]["content"] == noisy
    with pytest.raises(ConfigError):
        Config(min_saving=1.0)


def test_max_tool_chars_gate_for_parts():
    parts = [
        {"type": "text", "text": "a\x1b[0m" * 1500},
        {"type": "text", "text": "b\x1b[0m" * 200},
    ]
    p = TokenPilot().prepare(history(parts), session_id="s")
    got = tool_msgs(p)[0]["content"]
    assert "\x1b" not in got[0]["text"] and got[1]["text"].endswith("\x1b[0m")
    q = TokenPilot(Config(max_tool_chars=8000)).prepare(history(parts), session_id="s")
    assert tool_msgs(q)[0]["content"] == parts


def test_passes_and_profiles_settings():
    ansi = "\n".join(f"\x1b[1mline {i}\x1b[0m" for i in range(500))
    on = tool_msgs(TokenPilot().prepare(history(ansi), session_id="s"))[0]["content"]
    assert "\x1b" not in on
    off = tool_msgs(TokenPilot(Config(passes=("truncate",))).prepare(history(ansi), session_id="s"))[0][
        "content"
    ]
    assert off == ansi
    prof = TokenPilot(Config(profiles={"bash": ("truncate",)}))
    assert tool_msgs(prof.prepare(history(ansi), session_id="s"))[0]["content"] == ansi
    with pytest.raises(ConfigError):
        Config(passes=("nope",))
    with pytest.raises(ConfigError):
        Config(trigger_min_chars=-1)


def test_reads_keep_their_text_exact():
    code = "\n".join(f"    def method_{i}(self):\n        return {i}  " for i in range(400))
    p = TokenPilot().prepare(history(code, name="read", path="a.py"), session_id="s")
    assert tool_msgs(p)[0]["content"] == code  # read profile: no whitespace or layout rewriting


def test_truncation_limits_and_preview_sizes():
    big = "x" * 60_000
    p = TokenPilot().prepare(history(big, name="mcp__srv__lookup", q=1), session_id="s")
    text = tool_msgs(p)[0]["content"]
    assert text.startswith("x" * 600) and "59,000 of 60,000 chars omitted" in text
    q = TokenPilot(Config(default_truncation_limit=100_000)).prepare(
        history(big, name="mcp__srv__lookup", q=1), session_id="s"
    )
    assert tool_msgs(q)[0]["content"] == big
    r = TokenPilot(Config(preview_head=100, preview_tail=50)).prepare(
        history(big, name="mcp__srv__lookup", q=1), session_id="s"
    )
    assert "59,850 of 60,000" in tool_msgs(r)[0]["content"]
    s = TokenPilot(Config(truncation_limits={"mcp__srv__lookup": 1000})).prepare(
        history("y" * 5000, name="mcp__srv__lookup", q=1), session_id="s"
    )
    assert "4,000 of 5,000" in tool_msgs(s)[0]["content"]


def test_hard_limit_caps_unlimited_reads():
    big = "z" * 300_000
    p = TokenPilot().prepare(history(big, name="read", path="big.txt"), session_id="s")
    assert len(tool_msgs(p)[0]["content"]) < 2000
    q = TokenPilot(Config(hard_limit_chars=400_000)).prepare(
        history(big, name="read", path="big.txt"), session_id="s"
    )
    assert tool_msgs(q)[0]["content"] == big


def _repeat_session(n: int, same_output=True) -> list[dict]:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "read twice"}]
    for i in range(n):
        msgs += [
            call(f"c{i}", "bash", command="cat log"),
            result(f"c{i}", LOG if same_output else LOG + str(i)),
        ]
    return msgs


def test_dedup_of_identical_outputs():
    p = TokenPilot().prepare(_repeat_session(2), session_id="s")
    first, second = tool_msgs(p)
    assert "identical to an earlier output of bash" in second["content"]
    q = TokenPilot(Config(dedup=False, reshown=False)).prepare(_repeat_session(2), session_id="s")
    a, b = tool_msgs(q)
    assert a["content"] == b["content"]
    # without dedup, the reduced copy folds against the first, which the model still sees
    r = TokenPilot(Config(dedup=False)).prepare(_repeat_session(2), session_id="s")
    a, b = tool_msgs(r)
    assert b["content"].startswith("[… ") and "already shown above, unchanged," in b["content"]
    assert len(b["content"]) < 200 < len(a["content"])


def test_loop_guard_call_cap_and_window():
    p = TokenPilot().prepare(_repeat_session(7), session_id="s")
    notes = [m["content"] for m in tool_msgs(p)]
    assert sum("withheld to break a loop" in t for t in notes) == 2  # calls 6 and 7
    q = TokenPilot(Config(call_cap=0)).prepare(_repeat_session(7), session_id="s")
    assert not any("withheld" in m["content"] for m in tool_msgs(q))
    r = TokenPilot(Config(call_cap=2)).prepare(_repeat_session(4), session_id="s")
    assert sum("withheld" in m["content"] for m in tool_msgs(r)) == 2
    w = TokenPilot(Config(call_cap=2, call_window=2)).prepare(_repeat_session(4), session_id="s")
    assert not any("withheld" in m["content"] for m in tool_msgs(w))
    # different outputs are not a loop
    d = TokenPilot(Config(call_cap=2)).prepare(_repeat_session(4, same_output=False), session_id="s")
    assert not any("withheld" in m["content"] for m in tool_msgs(d))


def test_recall_gate_lets_a_much_recalled_source_through():
    def session_with(n_reads: int) -> list[dict]:
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "look"}]
        for i in range(n_reads):
            msgs += [call(f"r{i}", "web_fetch", url="http://x/page"), result(f"r{i}", LOG + f"\nversion {i}")]
        return msgs

    for tau, expect_full in ((1, True), (2, False)):
        tp = TokenPilot(Config(recall_gate_tau=tau))
        p = tp.prepare(session_with(1), session_id="s")
        aid = p.stats.artifacts[0]
        tp.recall(aid, session_id="s")
        tp.recall(aid, start_line=1, end_line=2, session_id="s")
        later = tp.prepare(session_with(2), session_id="s")
        full = tool_msgs(later)[1]["content"] == LOG + "\nversion 1"
        assert full == expect_full, tau
        assert tool_msgs(later)[0]["content"] == tool_msgs(p)[0]["content"]  # frozen: old one unchanged


def test_tool_argument_truncation_keeps_valid_json():
    body = "print('x')\n" * 1000
    msgs = [
        {"role": "user", "content": "write"},
        call("w", "write", path="a.py", content=body),
        result("w", "ok"),
    ]
    tp = TokenPilot()
    p = tp.prepare(msgs, session_id="s")
    args = json.loads(p.messages[1]["tool_calls"][0]["function"]["arguments"])
    assert args["path"] == "a.py" and len(args["content"]) < 1500
    aid = p.stats.artifacts[0]
    assert tp.recall(aid, session_id="s").text == msgs[1]["tool_calls"][0]["function"]["arguments"]
    q = TokenPilot(Config(tool_arg_max_chars=0)).prepare(msgs, session_id="s")
    assert q.messages[1]["tool_calls"] == msgs[1]["tool_calls"]


def _png(w: int, h: int, noise=True) -> bytes:
    img = Image.effect_noise((w, h), 80).convert("RGB") if noise else Image.new("RGB", (w, h), "white")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def test_user_image_parts_downsampled_with_setting():
    uri = "data:image/png;base64," + base64.b64encode(_png(600, 600)).decode()
    msgs = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": uri}}],
        }
    ]
    tp = TokenPilot()
    p = tp.prepare(msgs, session_id="s")
    assert p.messages[0]["content"][0] == {"type": "text", "text": "look"}
    assert len(json.dumps(p.messages[0]["content"])) < len(uri) and p.stats.artifacts
    assert tp.recall(p.stats.artifacts[0], session_id="s").text == uri
    q = TokenPilot(Config(downsample_user_images=False)).prepare(msgs, session_id="s")
    assert q.messages[0]["content"] == msgs[0]["content"]


# -- bad input ------------------------------------------------------------------------
def test_malformed_messages_pass_through_or_raise_when_strict():
    msgs = history() + [{"role": "user", "content": 42}, "garbage", {"no": "role"}]
    p = TokenPilot().prepare(msgs, session_id="s")
    assert p.stats.malformed == 3 and len(p.stats.warnings) == 3
    assert p.messages[p.tail_start - 2] == "garbage"
    with pytest.raises(MessageError, match="message 4"):
        TokenPilot(Config(strict=True)).prepare(msgs, session_id="s")
    with pytest.raises(MessageError):
        TokenPilot().prepare("not a list")
    with pytest.raises(MessageError):
        TokenPilot().prepare([], tools=[{"x": 1}])


def test_invalid_utf8_and_binary_blobs():
    tp = TokenPilot()
    blob = bytes(range(256)).decode("latin-1") * 40 + "\x00"
    broken = (b"valid \xff\xfe text " * 400).decode("utf-8", "surrogateescape")
    for out in (blob, broken):
        p = tp.prepare(history(out), session_id=f"s{len(out)}")
        text = tool_msgs(p)[0]["content"]
        text.encode("utf-8")  # the request can be sent
        aid = p.stats.artifacts[0]
        assert tp.recall(aid, session_id=f"s{len(out)}").text == out


def test_fifty_megabyte_output():
    big = ("0123456789abcdef" * 64 + "\n") * 50_000  # ~52 MB
    tp = TokenPilot()
    p = tp.prepare(history(big), session_id="s")
    text = tool_msgs(p)[0]["content"]
    assert len(text) < 5_000
    assert tp.store.get("s", p.stats.artifacts[0]) == big


def test_broken_and_huge_html():
    broken = "<html><body><div><p>unclosed <b>bold <i>text" * 500 + "<<<>>></td></tr>" * 100
    huge = (
        "<html><body>" + "<div class='x'><p>para</p><script>s()</script></div>" * 200_000 + "</body></html>"
    )
    tp = TokenPilot()
    for i, page in enumerate((broken, huge)):
        p = tp.prepare(history(page, name="web_fetch", url=f"http://x/{i}"), session_id=f"h{i}")
        text = tool_msgs(p)[0]["content"]
        assert len(text) < len(page)
        assert tp.recall(p.stats.artifacts[0], session_id=f"h{i}").text == page


def _bomb_png(w: int = 100_000, h: int = 100_000) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = zlib.compress(b"\x00" * 1000)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", raw)
        + chunk(b"IEND", b"")
    )


def test_decompression_bomb_and_truncated_base64_in_tool_output():
    bomb = "data:image/png;base64," + base64.b64encode(_bomb_png()).decode()
    trunc = "data:image/png;base64," + base64.b64encode(_png(500, 500))[:150_001].decode()
    tp = TokenPilot()
    for i, uri in enumerate((bomb, trunc)):
        out = f"screenshot: {uri}\n" + "log line\n" * 300
        p = tp.prepare(history(out, name="browser", i=i), session_id=f"b{i}")
        text = tool_msgs(p)[0]["content"]
        assert "base64," not in text and ("could not" in text or "refused" in text), text[:300]
        assert tp.recall(p.stats.artifacts[0], session_id=f"b{i}").text == out


# -- persistence ----------------------------------------------------------------------
def test_export_import_renders_identical_bytes(tmp_path):
    store = ArtifactStore(tmp_path)
    tp = TokenPilot(store=store)
    msgs = _repeat_session(3)
    a = tp.prepare(msgs, TOOLS, session_id="s")
    saved = json.loads(json.dumps(tp.export_session("s")))
    fresh = TokenPilot(store=ArtifactStore(tmp_path))
    fresh.import_session(saved)
    b = fresh.prepare(msgs, TOOLS, session_id="s")
    assert b.messages == a.messages and b.tools == a.tools and b.stats.ingested == 0
    c = fresh.prepare(msgs + [{"role": "user", "content": "more"}], TOOLS, session_id="s")
    assert c.stats.prefix_break is None and c.stats.ingested == 1
    assert fresh.recall(a.stats.artifacts[0], session_id="s").found


def test_session_id_derivation_and_scoping():
    tp = TokenPilot()
    a = tp.prepare(history(), session_id=None)
    b = tp.prepare(history(), session_id=None)
    assert a.session_id == b.session_id and a.session_id.startswith("s_")
    other = history()
    other[1] = {"role": "user", "content": "something else"}
    c = tp.prepare(other)
    assert c.session_id != a.session_id
    aid = a.stats.artifacts[0]
    assert not tp.recall(aid, session_id="unrelated").found
    with pytest.raises(ValueError):
        tp.recall(aid)  # two sessions: ambiguous without a session id


def test_recalled_originals_reach_the_model_unreduced():
    """A recall_artifact result is what the agent asked for: no pass, no dedup, no loop guard."""
    page = "<html><body><nav>menu</nav>" + "<p>paragraph text</p>" * 400 + "</body></html>"
    tp = TokenPilot()
    msgs = history(page, name="web_fetch", url="http://x")
    p = tp.prepare(msgs, session_id="s")
    aid = p.stats.artifacts[0]
    back = tp.execute_recall({"artifact_id": aid}, session_id="s")
    assert back.startswith("[tokenpilot: all ") and back.split("\n", 1)[1] == page
    for i in range(3):  # recalled again and again: whole at the call it reaches
        msgs = msgs + [call(f"r{i}", "recall_artifact", artifact_id=aid), result(f"r{i}", back)]
        q = tp.prepare(msgs, session_id="s")
        assert tool_msgs(q)[-1]["content"] == back


def test_an_empty_profile_runs_no_pass():
    ansi = "\n".join(f"\x1b[1mline {i}\x1b[0m" for i in range(500))
    p = TokenPilot(Config(profiles={"bash": ()})).prepare(history(ansi), session_id="s")
    assert tool_msgs(p)[0]["content"] == ansi
