"""Decisions at the prompt's tail, outputs cut in place, and the retention dial.

End to end through the default facade (`TokenPilot().prepare`), as an agent calls it:
what a tail rule cuts, when (once, at the first call after the agent answered), how the
cut reads, that recall gives the output back byte for byte, and that the request stays
valid and extends the last one except at the cut. The dial's positions, from the core to
the proxy's and the hosts' options.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from PIL import Image
from strategies import TOOLS, call_points, session

from tokenpilot import TokenPilot
from tokenpilot.errors import ConfigError
from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.lifecycle.schedule import LifecycleConfig
from tokenpilot.lifecycle.segments import SegmentRules, WindowRule, bundle_record, evictable_bundles
from tokenpilot.lifecycle.settings import KEEP
from tokenpilot.lifecycle.tail import RECALLED_MARKER, TailRules, citable
from tokenpilot.messages.turns import segment_turns

_ART = re.compile(r"art_[0-9a-f]{24}")


def _png(size: int = 96) -> str:
    """A deterministic noisy PNG (incompressible enough to stay a few KB) as a data URL."""
    img = Image.new("RGB", (size, size))
    img.putdata(
        [
            ((x * 37 + y * 91) % 256, (x * x + y) % 256, (x ^ y) % 256)
            for y in range(size)
            for x in range(size)
        ]
    )
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _call(cid: str, name: str, args: dict) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _pilot(**lifecycle) -> TokenPilot:
    return TokenPilot(lifecycle=LifecycleConfig(schedule="inline", **lifecycle))


def _browse_session() -> list[dict]:
    """A screenshot, then two more steps: the agent answers the screenshot at once."""
    shot = [
        {"type": "text", "text": "Captured screenshot ss_1 (96x96)"},
        {"type": "image_url", "image_url": {"url": _png()}},
    ]
    return [
        {"role": "system", "content": "You drive a browser."},
        {"role": "user", "content": "Is the login button visible?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c1", "computer", {"action": "screenshot"})],
        },
        {"role": "tool", "tool_call_id": "c1", "content": shot},
        {
            "role": "assistant",
            "content": "I see it.",
            "tool_calls": [_call("c2", "computer", {"action": "click"})],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "clicked at 120,300"},
        {"role": "assistant", "content": "Done: the button is visible and works."},
    ]


def test_an_image_leaves_at_the_call_after_the_one_that_showed_it():
    msgs = _browse_session()
    tp = _pilot()
    first = tp.prepare(msgs[:4], TOOLS, session_id="s")  # the call that sees the screenshot
    assert any(p.get("type") == "image_url" for p in first.messages[-1]["content"])
    second = tp.prepare(msgs[:6], TOOLS, session_id="s")  # the agent has answered it
    shot = next(m for m in second.messages if m.get("tool_call_id") == "c1")
    assert isinstance(shot["content"], str) and "image seen at its call, cut at the tail" in shot["content"]
    assert shot["content"].startswith("Captured screenshot ss_1 (96x96)")  # its words stay
    assert second.stats.prefix_break == "eviction"
    assert validate_pairing(second.messages) == []
    aid = re.search(
        r'cut at the tail; recall_artifact\(artifact_id="(art_[0-9a-f]+)"\)', shot["content"]
    ).group(1)
    parts = json.loads(tp.recall(aid, session_id="s").text)  # the output as it was shown, image and all
    assert parts[0] == msgs[3]["content"][0] and parts[1]["type"] == "image_url"
    if parts[1] != msgs[3]["content"][1]:  # the image pass re-encoded it: its marker names the original
        (orig,) = set(_ART.findall(json.dumps(parts))) - {aid}
        assert msgs[3]["content"][1]["image_url"]["url"] in tp.recall(orig, session_id="s").text
    third = tp.prepare(msgs[:7], TOOLS, session_id="s")  # nothing more to cut: it extends the last
    assert third.stats.prefix_break is None
    assert [m for m in third.messages if m.get("tool_call_id") == "c1"] == [shot]


def test_an_output_with_nothing_to_cite_leaves_and_one_with_names_stays():
    bar = "\n".join("=" * 60 + " done" for _ in range(40))  # a progress bar: no name, path or number
    assert not citable(bar) and citable("edited core/x.py line 120") and citable("call parse_args")
    msgs = [
        {"role": "user", "content": "Install it."},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "bash", {"command": "make"})]},
        {"role": "tool", "tool_call_id": "c1", "content": bar},
        {"role": "assistant", "content": None, "tool_calls": [_call("c2", "bash", {"command": "ls"})]},
        {"role": "tool", "tool_call_id": "c2", "content": "\n".join(f"src/mod_{i}.py" for i in range(80))},
        {"role": "assistant", "content": "Installed."},
    ]
    tp = _pilot()
    shown = {}
    for k in call_points(msgs):
        p = tp.prepare(msgs[:k], TOOLS, session_id="s")
        shown.setdefault(len(p.messages), p.messages[-1]["content"])
    out = {m.get("tool_call_id"): m["content"] for m in p.messages if m.get("role") == "tool"}
    assert out["c1"].startswith(
        "[tokenpilot: output cut, at the tail, it names no file, path, identifier or number"
    )
    assert out["c2"] == msgs[4]["content"]
    (aid,) = set(_ART.findall(out["c1"]))
    as_taken_in = tp.recall(aid, session_id="s").text  # the output as the agent saw it (folded)
    assert as_taken_in == shown[3]
    (original,) = set(_ART.findall(as_taken_in))  # its own folds name the original
    assert tp.recall(original, session_id="s").text == bar


def test_each_turn_is_looked_at_once_and_a_restart_goes_on_from_the_same_mark():
    msgs = _browse_session()
    steady = _pilot()
    for k in call_points(msgs)[:2]:
        steady.prepare(msgs[:k], TOOLS, session_id="s")
    saved = json.loads(json.dumps(steady.export_session("s")))
    assert saved["lifecycle"]["tailMark"] == 0  # the screenshot's turn is not answered yet
    restarted = _pilot()
    restarted.import_session(saved)
    for k in call_points(msgs)[2:]:
        a = steady.prepare(msgs[:k], TOOLS, session_id="s")
        b = restarted.prepare(msgs[:k], TOOLS, session_id="s")
        assert a.messages == b.messages
    for tp in (steady, restarted):
        assert tp._sessions["s"].lifecycle.stats["tail_cuts"] == 1  # the screenshot, once
        assert tp.export_session("s")["lifecycle"]["tailMark"] == 2


def test_a_state_saved_before_tail_rules_cuts_nothing_old():
    msgs = _browse_session()
    tp = _pilot()
    for k in call_points(msgs)[:2]:
        tp.prepare(msgs[:k], TOOLS, session_id="s")
    saved = json.loads(json.dumps(tp.export_session("s")))
    del saved["lifecycle"]["tailMark"]  # as an older version wrote it
    old = _pilot()
    old.import_session(saved)
    p = old.prepare(msgs[:6], TOOLS, session_id="s")
    assert any(isinstance(m.get("content"), list) for m in p.messages)  # the old screenshot stays


def _listing_lines() -> list[str]:
    """120 lines of a listing whose shapes vary (so the ingestion folds none of them)."""
    words = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()
    out = []
    for i in range(120):
        h = hashlib.sha256(str(i).encode()).hexdigest()
        extra = [words[int(h[j], 16) % 11] for j in range(i % 4 + 1)] + ([str(i * 13)] if i % 3 else [])
        out.append(" ".join([f"src/{words[i % 11]}/{words[(i * 7) % 11]}_{i:03d}.py", *extra]))
    return out


def test_the_shrink_keeps_the_lines_the_agent_named_with_two_around_and_recalls_the_rest():
    listing = "\n".join(_listing_lines())
    msgs = [
        {"role": "user", "content": "Find the parser."},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "bash", {"command": "ls -R src"})]},
        {"role": "tool", "tool_call_id": "c1", "content": listing},
        {
            "role": "assistant",
            "content": "lambda_042.py looks like it.",
            "tool_calls": [_call("c2", "read", {"path": "src/sigma/lambda_042.py"})],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "def parse(): pass"},
        {"role": "assistant", "content": "Found it."},
    ]
    tp = _pilot(tail=TailRules(shrink=True))
    for k in call_points(msgs):
        p = tp.prepare(msgs[:k], TOOLS, session_id="s")
    shown = next(m["content"] for m in p.messages if m.get("tool_call_id") == "c1")
    kept = [line for line in shown.split("\n") if not line.startswith("[tokenpilot:")]
    assert kept == listing.split("\n")[40:45]  # the named line and two on each side
    for m in re.finditer(
        r'recall_artifact\(artifact_id="(art_[0-9a-f]+)", start_line=(\d+), end_line=(\d+)\)', shown
    ):
        aid, a, b = m.group(1), int(m.group(2)), int(m.group(3))
        assert tp.recall(aid, a, b, session_id="s").text == "".join(
            listing.splitlines(keepends=True)[a - 1 : b]
        )
    plain = _pilot()  # off by default: the listing stays whole
    for k in call_points(msgs):
        q = plain.prepare(msgs[:k], TOOLS, session_id="x")
    assert next(m["content"] for m in q.messages if m.get("tool_call_id") == "c1") == listing


def test_a_retired_write_keeps_its_call_and_its_output_is_cut_in_place():
    """keep_written_calls: the agent's heredoc stays as written; the run's output shows a
    marker that recalls it; the request stays valid."""
    script = "cat > repro.py << 'EOF'\nimport sys\ndef check_totals():\n    return 1\nEOF\npython repro.py"
    run = "\n".join(f"trace line {i}: frame_{i} in check_totals" for i in range(200))
    msgs = [{"role": "user", "content": "Reproduce it."}]
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": [_call("w", "bash", {"command": script})]},
        {"role": "tool", "tool_call_id": "w", "content": run},
    ]
    for i in range(8):
        msgs += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call(f"e{i}", "bash", {"command": f"sed -i 's/a/b/' f{i}.py"})],
            },
            {"role": "tool", "tool_call_id": f"e{i}", "content": ""},
        ]
    msgs.append({"role": "assistant", "content": "Done."})
    rules = SegmentRules(stale_after_turns=2, stale_written_after_turns=2, keep_written_calls=True)
    tp = _pilot(batch_turns=1, cost_gate=False, segments=rules)
    for k in call_points(msgs):
        p = tp.prepare(msgs[:k], TOOLS, session_id="s")
    call = next(m for m in p.messages if any(c["id"] == "w" for c in m.get("tool_calls") or []))
    assert json.loads(call["tool_calls"][0]["function"]["arguments"])["command"] == script
    out = next(m["content"] for m in p.messages if m.get("tool_call_id") == "w")
    assert out.startswith("[tokenpilot: output cut, stale output")
    (aid,) = set(_ART.findall(out))
    assert tp.recall(aid, session_id="s").text == run
    assert validate_pairing(p.messages) == []


def _records(msgs):
    return [bundle_record(msgs, t) for t in segment_turns(msgs)]


def test_answering_the_person_is_acting_on_what_was_gathered():
    """A session that never edits: what it gathered goes stale once it has answered."""
    msgs = [{"role": "user", "content": "Check the router logs."}]
    for i in range(3):
        msgs += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call(f"g{i}", "bash", {"command": f"ssh r logread {i}"})],
            },
            {
                "role": "tool",
                "tool_call_id": f"g{i}",
                "content": "\n".join(f"kernel: event {i} {j}" for j in range(80)),
            },
        ]
    msgs.append({"role": "assistant", "content": "Report: the logs are clean."})
    for i in range(5):
        msgs += [{"role": "user", "content": f"thanks {i}"}, {"role": "assistant", "content": "ok"}]
    recs = _records(msgs)
    assert evictable_bundles(recs, SegmentRules())  # answered, then unused: stale
    assert not evictable_bundles(recs, SegmentRules(answer_is_action=False))  # no file changed


def test_a_file_the_agent_wrote_goes_stale_later_than_an_output():
    msgs = [{"role": "user", "content": "Write the test."}]
    msgs += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("w", "write", {"path": "t.py", "content": "x = 1\n" * 200})],
        },
        {"role": "tool", "tool_call_id": "w", "content": "wrote t.py"},
        {"role": "assistant", "content": None, "tool_calls": [_call("r", "bash", {"command": "env"})]},
        {"role": "tool", "tool_call_id": "r", "content": "\n".join(f"VAR_{i}=value" for i in range(120))},
    ]
    for i in range(6):
        msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": "go on"}]
    recs = _records(msgs)
    gone = evictable_bundles(recs, SegmentRules())
    written, output = 0, 1  # the request opens the write's turn
    assert output in gone and written not in gone
    assert written in evictable_bundles(recs, SegmentRules(stale_written_after_turns=None))


# -- the dial -----------------------------------------------------------------------------


def test_the_dial_positions_order_what_they_keep():
    all_, balanced, lean = (LifecycleConfig.for_keep(k) for k in KEEP)
    assert KEEP == ("all", "balanced", "lean")
    assert balanced == LifecycleConfig()
    assert all_.segments.stale_after_turns > balanced.segments.stale_after_turns
    assert all_.segments.stale_written_after_turns > balanced.segments.stale_written_after_turns
    assert all_.segments.keep_written_calls and not balanced.segments.keep_written_calls
    assert all_.window.trigger_tokens > balanced.window.trigger_tokens > lean.window.trigger_tokens
    assert lean.segments.stale_written_after_turns <= lean.segments.stale_after_turns
    assert LifecycleConfig.for_keep("lean", schedule="manual").schedule == "manual"
    with pytest.raises(ConfigError, match="keep must be one of all, balanced, lean"):
        LifecycleConfig.for_keep("minimal")
    assert TokenPilot(keep="lean").lifecycle_config == lean
    with pytest.raises(ConfigError, match="not both"):
        TokenPilot(keep="lean", lifecycle=LifecycleConfig())


def test_the_dial_reaches_the_proxy_and_the_hosts():
    import argparse

    from tokenpilot_openclaw.openclaw_config import InstallPlan
    from tokenpilot_proxy.hosts import add_enable_arguments
    from tokenpilot_proxy.hosts.enable import serve_args
    from tokenpilot_proxy.serve_options import add_serve_arguments
    from tokenpilot_proxy.server import settings_from_args

    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    assert settings_from_args(p.parse_args(["--upstream", "http://x/v1", "--keep", "lean"])).keep == "lean"
    assert settings_from_args(p.parse_args(["--upstream", "http://x/v1"])).keep == "balanced"
    with pytest.raises(SystemExit):
        p.parse_args(["--upstream", "http://x/v1", "--keep", "tiny"])
    e = argparse.ArgumentParser()
    add_enable_arguments(e)
    assert e.parse_args(["codex", "--keep", "all"]).keep == "all"
    assert serve_args("http://x/v1", 8787, "all")[-2:] == ["--keep", "all"]
    assert "--keep" not in serve_args("http://x/v1", 8787)
    plan = InstallPlan(upstream="http://x/v1", models=("m",), keep="lean")
    assert plan.serve_args()[-2:] == ["--keep", "lean"]


def test_the_bench_shows_each_position_as_a_row():
    from tokenpilot.measure.bench.methods import default_methods

    names = [m.name for m in default_methods()]
    assert {"tokenpilot", "tokenpilot_all", "tokenpilot_lean"} <= set(names)


# -- invariants with every tail rule and cut in place on -----------------------------------


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(session(recalls=True))
def test_invariants_hold_with_tail_cuts_and_calls_kept(msgs):
    """I1: the stable part only grows except at a plan change, each counted as an eviction;
    I3: every marker's id recalls what it stands for; I4: pairing holds at every call; a
    recall exchange cut whole leaves a stub that quotes its call."""
    cfg = LifecycleConfig(
        batch_turns=1,
        schedule="inline",
        cost_gate=False,
        window=WindowRule(trigger_tokens=300, keep_calls=2),
        segments=SegmentRules(stale_after_turns=1, keep_written_calls=True),
        tail=TailRules(shrink=True),
    )
    tp = TokenPilot(lifecycle=cfg)
    prev, breaks = None, 0
    for k in call_points(msgs):
        p = tp.prepare(msgs[:k], TOOLS, session_id="s")
        assert validate_pairing(p.messages) == []
        cur = json.dumps({"tools": p.tools, "messages": p.stable_messages}, ensure_ascii=False)
        if prev is not None and not cur.startswith(prev[:-2]):
            breaks += 1
            assert p.stats.prefix_break == "eviction"
        prev = cur
        for m in p.messages:
            content = m.get("content")
            if isinstance(content, str) and (
                "[tokenpilot: output cut" in content or "image seen at its call" in content
            ):
                for aid in _ART.findall(content):
                    assert tp.recall(aid, session_id="s").found
    exchanges = [m for m in p.messages if "recalled and read, cut" in str(m.get("content"))]
    quoted = {aid for m in exchanges for aid in _ART.findall(m["content"])}
    asked = {
        json.loads(c["function"]["arguments"])["artifact_id"]
        for m in msgs
        for c in m.get("tool_calls") or ()
        if c["function"]["name"] == "recall_artifact"
    }
    assert quoted <= asked and len(quoted) == len(exchanges)
    assert p.stats.prefix_breaks == breaks


@pytest.mark.parametrize("words", [None, "Let me read the log again."])
def test_a_recalled_text_leaves_once_read_and_a_summary_request_shows_its_marker(words):
    """A recall's result is a copy of what the archive holds: shown whole to the call
    that asked for it, gone from the next look on, whole again by recall; a request
    for a summary (nothing evicted) shows the marker, the original being in it. A turn
    that is only the recall (no words) leaves whole, a one-line stub quoting the call in
    its place; one with the agent's words keeps them and its call, the result a marker."""
    from test_compaction_request import REQUEST

    log = "\n".join(f"2024-05-01 12:00:{i % 60:02d} INFO worker step {i} ok" for i in range(300))
    msgs = [
        {"role": "user", "content": "Run the job."},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "bash", {"command": "run"})]},
        {"role": "tool", "tool_call_id": "c1", "content": log},
    ]
    tp = _pilot()
    first = tp.prepare(msgs, TOOLS, session_id="s")
    (aid,) = set(_ART.findall(json.dumps(first.messages[-1]["content"])))
    recalled = tp.recall(aid, session_id="s").text
    assert recalled == log
    msgs += [
        {
            "role": "assistant",
            "content": words,
            "tool_calls": [_call("c2", "recall_artifact", {"artifact_id": aid})],
        },
        {"role": "tool", "tool_call_id": "c2", "content": recalled},
        {"role": "assistant", "content": "Step 217 ran as expected."},
        {"role": "user", "content": "Good. List the files."},
        {"role": "assistant", "content": None, "tool_calls": [_call("c3", "bash", {"command": "ls"})]},
        {"role": "tool", "tool_call_id": "c3", "content": "a.py\nb.py"},
    ]
    seen = tp.prepare(msgs[:5], TOOLS, session_id="s")
    assert seen.messages[-1]["content"] == log  # the call that asked reads it whole
    later = tp.prepare(msgs, TOOLS, session_id="s")
    out = {m.get("tool_call_id"): m["content"] for m in later.messages if m.get("role") == "tool"}
    if words is None:  # the exchange left whole: a stub that quotes the call stands in its place
        assert "c2" not in out
        assert all(c["id"] != "c2" for m in later.messages for c in m.get("tool_calls") or ())
        (stub,) = [m for m in later.messages if "recalled and read" in str(m.get("content"))]
        assert stub["role"] == "user" and f'recall_artifact(artifact_id="{aid}")' in stub["content"]
        assert later.messages[later.messages.index(stub) + 1]["content"] == "Step 217 ran as expected."
    else:  # the agent's words and its call stay as written
        assert out["c2"] == RECALLED_MARKER  # the call above it names what it returned
        assert any(m.get("content") == words and m.get("tool_calls") for m in later.messages)
    assert tp.recall(aid, session_id="s").text == log  # and returns it again
    assert out["c1"] == first.messages[-1]["content"]  # the output as taken in stays
    assert validate_pairing(later.messages) == []
    summary = tp.prepare([*msgs, {"role": "user", "content": REQUEST}], TOOLS, session_id="s")
    whole = {m.get("tool_call_id"): m["content"] for m in summary.messages if m.get("role") == "tool"}
    assert whole["c2"] == RECALLED_MARKER and whole["c1"] == out["c1"]
    assert validate_pairing(summary.messages) == []
    marker_only = _pilot(tail=TailRules(recall_turns=False))  # the control: the turn stays, cut in place
    for k in (3, 5, len(msgs)):
        shown = marker_only.prepare(msgs[:k], TOOLS, session_id="s")
    assert {m.get("tool_call_id"): m["content"] for m in shown.messages if m.get("role") == "tool"}[
        "c2"
    ] == RECALLED_MARKER
    off = _pilot(tail=TailRules(recalled=False))
    for k in (3, 5, len(msgs)):
        kept = off.prepare(msgs[:k], TOOLS, session_id="s")
    assert {m.get("tool_call_id"): m["content"] for m in kept.messages if m.get("role") == "tool"}[
        "c2"
    ] == log


def test_a_recalled_copy_carries_no_names_its_source_stays_in_use():
    """A use of a name the recall showed again is charged to the turn that first showed
    it, not to the copy (cut at the tail, it shows nothing): the source stays in use."""
    from tokenpilot.lifecycle.segments import last_uses

    listing = "\n".join(f"src/pkg/mod_{i}.py: def handler_{i}(request_id): ..." for i in range(30))
    msgs = [
        {"role": "user", "content": "Find the handlers."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c1", "grep", {"pattern": "def handler"})],
        },
        {"role": "tool", "tool_call_id": "c1", "content": listing},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c2", "recall_artifact", {"artifact_id": "x"})],
        },
        {"role": "tool", "tool_call_id": "c2", "content": listing},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c3", "bash", {"command": "pytest -k handler_7"})],
        },
        {"role": "tool", "tool_call_id": "c3", "content": "1 passed"},
    ]
    records = [bundle_record(msgs, t) for t in segment_turns(msgs)]
    assert records[1].provides == frozenset() and "handler_7" in records[0].provides
    assert last_uses(records)[0] == 2
