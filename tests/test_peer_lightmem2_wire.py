"""LightMem2's Responses wire (Codex, OpenClaw) and the replay's per-format session hook:
pure Python, no Node needed."""

from __future__ import annotations

import copy

import pytest

from tokenpilot.measure.bench.peers import lightmem2 as peer
from tokenpilot.measure.bench.peers.lightmem2_wire import from_responses, to_responses

PROMPT = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "Change my flight."},
    {
        "role": "assistant",
        "content": "Looking it up.",
        "tool_calls": [
            {
                "id": "call_A|fc_1",
                "type": "function",
                "function": {"name": "get_user", "arguments": '{"id": 1}'},
            },
            {"id": "call_B|fc_2", "type": "function", "function": {"name": "get_flight", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_A|fc_1", "content": "user 1"},
    {"role": "tool", "tool_call_id": "call_B|fc_2", "content": [{"type": "text", "text": "flight 9"}]},
]
TOOLS = [{"type": "function", "function": {"name": "get_user", "parameters": {"type": "object"}}}]


def test_codex_wire_puts_the_system_prompt_in_instructions():
    wire = to_responses(PROMPT, TOOLS, "codex", "gpt-5.4-mini")
    body = wire.body
    assert body["instructions"] == "You are an airline agent."
    assert [it.get("type") for it in body["input"]] == [
        "message", "message", "function_call", "function_call", "function_call_output", "function_call_output",
    ]  # fmt: skip
    assert body["input"][0]["content"] == [{"type": "input_text", "text": "Change my flight."}]
    assert body["input"][1]["content"] == [{"type": "output_text", "text": "Looking it up."}]
    assert body["input"][2]["call_id"] == "call_A|fc_1" and "id" not in body["input"][2]
    assert body["input"][5]["output"] == "flight 9"
    assert body["tools"] == [{"type": "function", "name": "get_user", "parameters": {"type": "object"}}]
    assert wire.owners == [1, 2, 2, 2, 3, 4] and wire.instructions_from == 0


def test_openclaw_wire_splits_pi_ai_call_ids_and_leads_with_a_developer_item():
    body = to_responses(PROMPT, [], "openclaw", "gpt-5.4-mini").body
    assert "instructions" not in body
    assert body["input"][0] == {"role": "developer", "content": "You are an airline agent."}
    call = body["input"][3]
    assert (call["call_id"], call["id"]) == ("call_A", "fc_1")
    assert body["input"][5]["call_id"] == "call_A"


def test_unchanged_items_give_back_the_agents_own_messages():
    wire = to_responses(PROMPT, TOOLS, "codex", "m")
    back = from_responses(wire, copy.deepcopy(wire.body), PROMPT)
    assert back is not None and all(a is b for a, b in zip(back, PROMPT, strict=True))


def test_a_changed_output_and_added_instructions_map_back_to_their_messages():
    wire = to_responses(PROMPT, TOOLS, "openclaw", "m")
    forwarded = copy.deepcopy(wire.body)
    forwarded["input"][5]["output"] = "flight 9 [trimmed]"
    forwarded["input"][6]["output"] = "other [trimmed]"
    forwarded["instructions"] = "[Recovery Protocol] ..."
    back = from_responses(wire, forwarded, PROMPT)
    assert back is not None and len(back) == len(PROMPT) + 1
    assert back[0] == {"role": "system", "content": "[Recovery Protocol] ..."}
    assert back[4] == {"role": "tool", "tool_call_id": "call_A|fc_1", "content": "flight 9 [trimmed]"}
    # a list-content result keeps its shape
    assert back[5]["content"] == [{"type": "text", "text": "other [trimmed]"}]
    assert all(back[i + 1] is PROMPT[i] for i in range(3))


def test_codex_instructions_changed_rewrite_the_system_message():
    wire = to_responses(PROMPT, TOOLS, "codex", "m")
    forwarded = copy.deepcopy(wire.body)
    forwarded["instructions"] += "\n\n[Recovery Protocol]"
    back = from_responses(wire, forwarded, PROMPT)
    assert back is not None and len(back) == len(PROMPT)
    assert back[0]["content"].endswith("[Recovery Protocol]") and back[1] is PROMPT[1]


def test_a_changed_item_shape_has_no_map_back():
    wire = to_responses(PROMPT, TOOLS, "codex", "m")
    forwarded = copy.deepcopy(wire.body)
    forwarded["input"].pop()
    assert from_responses(wire, forwarded, PROMPT) is None
    with pytest.raises(ValueError):
        to_responses(PROMPT, TOOLS, "claude", "m")


@pytest.mark.parametrize(
    ("fmt", "host"),
    [("claude_code", "claude"), ("openclaw_pinchbench", "openclaw"), ("openclaw", "openclaw"),
     ("tau_bench", "codex"), ("tau2", "codex"), ("mini_swe_agent", "codex"), ("swe_agent", "codex")],
)  # fmt: skip
def test_each_trace_format_goes_to_its_agents_adapter(fmt, host):
    assert peer.host_for(fmt) == host


def test_replay_opens_a_session_by_the_traces_format():
    """A method with `session_for` is handed each recorded session's format."""
    from tokenpilot.measure.bench.method import Rendered
    from tokenpilot.measure.bench.replay import replay
    from tokenpilot.measure.traces.model import RecordedCall, Session

    opened: list[tuple[str, str]] = []

    class _S:
        def render(self, prompt, tools, timestamp):
            return Rendered(prompt, tools, len(prompt))

        def recall_text(self, artifact_id):
            return None

        def close(self):
            pass

    class _M:
        name = "probe"
        kind = "peer"

        def session(self, session_id):
            raise AssertionError("session_for must be used")

        def session_for(self, session_id, fmt):
            opened.append((session_id, fmt))
            return _S()

    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    sessions = [Session("a", "inline", "tau_bench", msgs, [], [RecordedCall(0, 1)]),
                Session("b", "inline", "claude_code", msgs, [], [RecordedCall(0, 1)])]  # fmt: skip
    replay(sessions, _M())
    assert opened == [("a", "tau_bench"), ("b", "claude_code")]
