"""LightMem2 as a bench peer: its Claude Code adapter's own reduction, run under Node."""

from __future__ import annotations

import pytest

from tokenpilot.measure.bench.peers import lightmem2 as peer

pytestmark = pytest.mark.skipif(peer.missing() is not None, reason=f"LightMem2 cannot run: {peer.missing()}")

LOG = "\n".join(f"2024-01-01 12:00:{i % 60:02d} INFO worker {i} processed batch ok" for i in range(400))
LOG += "\nERROR: disk full at worker 399"


def _session():
    from tokenpilot.measure.traces.model import RecordedCall, Session

    msgs = [
        {"role": "system", "content": "You are a careful operations assistant."},
        {"role": "user", "content": "Why did the batch job stop?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": '{"command": "cat w.log"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": LOG},
        {"role": "assistant", "content": "The job stopped: disk full at worker 399."},
    ]
    tools = [
        {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object", "properties": {}}}}
    ]
    return Session("lm2", "inline", "claude_code", msgs, tools, [RecordedCall(0, 2), RecordedCall(0, 4)])


def test_reduces_a_big_output_and_recalls_its_original():
    session = _session()
    method = peer.LightMem2()
    ms = method.session(session.id)
    try:
        rendered = [ms.render(session.prompt(c), session.tools, c.timestamp) for c in session.calls]
        last = rendered[-1]
        tool = next(m for m in last.messages if m.get("role") == "tool")
        assert len(tool["content"]) < len(LOG) / 2
        assert "memory_fault_recover" in tool["content"]
        (key,) = last.artifact_ids
        assert key.startswith("segment:message-")
        assert ms.recall_text(key) == LOG
        assert ms.recall_text("segment:message-99-block-0") is None
        # what the gateway left alone is the agent's own message, not a format round trip;
        # it appends its recovery protocol to the system prompt
        prompt = session.prompt(session.calls[-1])
        assert last.messages[2] is prompt[2]
        assert "[Recovery Protocol]" in last.messages[0]["content"]
    finally:
        ms.close()
    assert "Claude Code gateway" in method.notes()[0] and "cut messages in 1/2 requests" in method.notes()[0]


def test_replay_prices_it():
    from tokenpilot.measure.bench.methods import Vanilla
    from tokenpilot.measure.bench.replay import replay

    lm = replay([_session()], peer.LightMem2()).record()
    van = replay([_session()], Vanilla()).record()
    assert lm["method"] == "lightmem2" and lm["calls"] == 2
    assert lm["peak_context_tokens"] < van["peak_context_tokens"]


def test_missing_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setenv(peer.ENV_DIR, str(tmp_path / "nowhere"))
    why = peer.missing()
    assert why is not None and "LightMem2 not found" in why and str(tmp_path / "nowhere") in why
