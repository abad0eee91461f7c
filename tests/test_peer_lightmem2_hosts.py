"""LightMem2 through each host's own adapter (Claude Code gateway, Codex proxy, OpenClaw
plugin proxy and its tool_result_persist hook), run under Node on a small session."""

from __future__ import annotations

import pytest

from tokenpilot.measure.bench.peers import lightmem2 as peer

pytestmark = pytest.mark.skipif(peer.missing() is not None, reason=f"LightMem2 cannot run: {peer.missing()}")

LOG = "\n".join(f"2024-01-01 12:00:{i % 60:02d} INFO worker {i} processed batch ok" for i in range(400))
LOG += "\nERROR: disk full at worker 399"


def _session(fmt: str, *, system: bool = True, call_id: str = "call_1"):
    from tokenpilot.measure.traces.model import RecordedCall, Session

    msgs = [{"role": "system", "content": "You are a careful operations assistant."}] if system else []
    msgs += [
        {"role": "user", "content": "Why did the batch job stop?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "exec", "arguments": '{"command": "cat w.log"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": LOG},
        {"role": "assistant", "content": "Disk full at worker 399. Anything else?"},
        {"role": "user", "content": "No, thanks."},
        {"role": "assistant", "content": "Bye."},
    ]
    n = len(msgs)
    calls = [RecordedCall(0, n - 5), RecordedCall(0, n - 3), RecordedCall(0, n - 1)]
    return Session("lm2-" + fmt, "inline", fmt, msgs, [], calls)


def _render_all(method, session):
    ms = method.session_for(session.id, session.fmt)
    try:
        return ms, [ms.render(session.prompt(c), session.tools, c.timestamp) for c in session.calls]
    finally:
        ms.close()


def _tool(rendered):
    return next(m for m in rendered.messages if m.get("role") == "tool")


@pytest.mark.parametrize(
    ("fmt", "label", "key_prefix"),
    [
        ("tau_bench", "Codex proxy's before-call chain", "segment:input-"),
        ("openclaw_pinchbench", "OpenClaw plugin proxy", "segment:proxy-"),
    ],
)
def test_responses_adapters_reduce_the_log_and_recall_its_archived_original(fmt, label, key_prefix):
    session = _session(fmt, call_id="call_1|fc_1")
    method = peer.LightMem2()
    ms, rendered = _render_all(method, session)
    first, second, third = rendered
    assert first.artifact_ids == frozenset()
    tool = _tool(second)
    assert len(tool["content"]) < len(LOG) / 2
    assert "memory_fault_recover" in tool["content"]
    (key,) = second.artifact_ids
    assert key.startswith(key_prefix) and third.artifact_ids == second.artifact_ids
    assert ms.recall_text(key) == LOG and ms.recall_text("segment:nowhere") is None
    # the tool call keeps pi-ai's / the recorded id; the agent's words are its own objects
    prompt = session.prompt(session.calls[1])
    call_msg = next(m for m in second.messages if m.get("tool_calls"))
    assert call_msg is next(m for m in prompt if m.get("tool_calls"))
    assert any(m is prompt[1] for m in second.messages)
    # its recovery protocol rides in the system prompt
    assert "[Recovery Protocol]" in str(second.messages[0]["content"])
    notes = method.notes()
    assert f"{label} (stabiliser" in notes[0] and "cut messages in 2/3 requests" in notes[0]
    assert "did not run: Claude Code's heuristic eviction" in notes[1] and "Date.now()" in notes[2]


@pytest.mark.parametrize("system", [False, True])
def test_claude_gateway_adds_its_protocol_and_reduces(system):
    """The Claude Code gateway appends its recovery protocol to the system prompt (or makes
    it the system prompt: the recorded sessions keep none) and reduces the log."""
    session = _session("claude_code", system=system, call_id="toolu_1")
    method = peer.LightMem2()
    ms, rendered = _render_all(method, session)
    head = rendered[0].messages[0]
    assert head["role"] == "system" and "[Recovery Protocol]" in head["content"]
    assert head["content"].startswith("You are a careful") is system
    (key,) = rendered[1].artifact_ids
    assert key.startswith("segment:message-") and ms.recall_text(key) == LOG
    assert len(_tool(rendered[1])["content"]) < len(LOG) / 2
    assert "Claude Code gateway" in method.notes()[0] and "cut messages in 2/3 requests" in method.notes()[0]


def test_claude_gateway_fails_on_system_blocks_as_claude_code_sends_them():
    """A system prompt as text blocks: the codec refuses to encode a changed structured
    system (its gateway answers HTTP 500), so the bench sends the system as a string."""
    driver = peer._Driver(("claude",))
    try:
        body = {"model": "claude-sonnet-4-5", "system": [{"type": "text", "text": "You are Claude Code."}],
                "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
        with pytest.raises(RuntimeError, match="structured Anthropic system changed"):
            driver.call({"host": "claude", "session": "s", "payload": body})
        body["system"] = "You are Claude Code."
        reply = driver.call({"host": "claude", "session": "s", "payload": body})
        assert reply["payload"]["system"].startswith("You are Claude Code.\n\n[Recovery Protocol]")
    finally:
        driver.close()


def test_openclaw_persist_hook_then_the_proxy_re_reduces_the_preview():
    """`lightmem2_persist`: OpenClaw's tool_result_persist hook keeps a 4,000-char preview of
    an `exec` result as it enters. The proxy's skip test looks for its marker in an item's
    `content`, which a Responses `function_call_output` does not have (it has `output`), so
    the proxy reduces the preview again on every call; a recall of the proxy's key resolves
    through the preview's own hint to the original, as one recall."""
    session = _session("openclaw_pinchbench", call_id="call_1|fc_1")
    method = peer.LightMem2(name="lightmem2_persist", persist=True)
    ms, rendered = _render_all(method, session)
    tool = _tool(rendered[1])["content"]
    assert len(tool) < 4000 and "memory_fault_recover" in tool
    _, plain = _render_all(peer.LightMem2(), session)
    assert _tool(plain[1])["content"] != tool  # the proxy cut the preview, not the whole log
    (key,) = rendered[1].artifact_ids
    assert key.startswith("segment:proxy-") and ms.recall_text(key) == LOG
    assert ms.recall_text("tool_result_persist:exec:call_1") == LOG
    assert any("tool_result_persist hook at ingestion: 1 results persisted" in n for n in method.notes())


def test_claude_gateway_with_its_eviction_on_stubs_a_big_result_one_call_later():
    """`lightmem2_evict`: the gateway's heuristic eviction (no estimator configured) replaces
    a tool result over 4,000 chars with its stub on the call after the one that reduced
    it; a recall of the stub's key returns the original it archived."""
    session = _session("claude_code", system=False, call_id="toolu_1")
    method = peer.LightMem2(name="lightmem2_evict", evict=True)
    ms, rendered = _render_all(method, session)
    reduced, stubbed = _tool(rendered[1])["content"], _tool(rendered[2])["content"]
    assert "memory_fault_recover" in reduced and len(reduced) < len(LOG) / 2
    assert stubbed.startswith("[Tool payload trimmed; recovery_ref=claude_tool_result:")
    (key,) = rendered[2].artifact_ids
    assert key.startswith("claude_tool_result:") and ms.recall_text(key) == LOG
    assert "Claude Code gateway with its eviction on" in method.notes()[0]


FROZEN_CLOCK = """
const T = 1767225600000;
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) { super(...(a.length ? a : [T])); }
  static now() { return T; }
};
"""


@pytest.mark.parametrize("fmt", ["claude_code", "tau_bench", "openclaw_pinchbench"])
def test_same_bytes_on_a_second_run_once_its_clock_is_frozen(fmt, tmp_path, monkeypatch):
    """Its only run-to-run difference is `Date.now()` in the archive paths its hints name:
    with a frozen clock a second replay renders the same bytes (same HOME path too)."""
    from tokenpilot.measure.bench.replay import render_digests

    session = _session(fmt, system=False, call_id="call_1|fc_1")
    kw = {"mode": "continuous", "profile": "openai"}
    ticking = render_digests([session], peer.LightMem2(), **kw)
    assert ticking != render_digests([session], peer.LightMem2(), **kw)
    clock = tmp_path / "frozen.mjs"
    clock.write_text(FROZEN_CLOCK)
    monkeypatch.setenv("NODE_OPTIONS", f"--import {clock}")
    assert render_digests([session], peer.LightMem2(), **kw) == render_digests(
        [session], peer.LightMem2(), **kw
    )


def test_two_sessions_same_positions_keep_their_own_originals():
    """Its data keys are positions, alike in every session; the artifact ids name the
    session, so the replay (which caches a recall by id) never mixes two sessions' originals."""
    one, two = _session("tau_bench"), _session("tau_bench")
    two = type(two)("lm2-other", two.source, two.fmt, [dict(m) for m in two.messages], [], two.calls)
    two.messages[3]["content"] = LOG.replace("worker", "thread")
    method = peer.LightMem2()
    ms1, ms2 = method.session_for(one.id, one.fmt), method.session_for(two.id, two.fmt)
    try:
        (id1,) = ms1.render(one.prompt(one.calls[1]), [], None).artifact_ids
        (id2,) = ms2.render(two.prompt(two.calls[1]), [], None).artifact_ids
        assert id1 != id2 and id1.split("@")[0] == id2.split("@")[0]
        assert ms1.recall_text(id1) == LOG and ms2.recall_text(id2) == two.messages[3]["content"]
    finally:
        ms1.close()
        ms2.close()
