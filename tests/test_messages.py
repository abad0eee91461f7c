"""The neutral message model and the Anthropic converters."""

from __future__ import annotations

import pytest

from tokenpilot.errors import MessageError
from tokenpilot.messages.model import check_message, check_messages, from_anthropic, to_anthropic


def _history():
    return [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "read two files"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a"}'}},
                {"id": "c2", "type": "function", "function": {"name": "read", "arguments": '{"path": "b"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "x"},
                {"type": "text", "text": "Done."},
            ],
        },
    ]


TOOLS = [
    {
        "type": "function",
        "function": {"name": "read", "description": "Read a file", "parameters": {"type": "object"}},
    }
]


def test_to_anthropic_pairs_tool_results_in_one_user_turn():
    body = to_anthropic(_history(), TOOLS)
    assert body["system"] == [{"type": "text", "text": "You are helpful."}]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"]
    turn = body["messages"][2]["content"]
    assert [b["type"] for b in turn] == ["tool_result", "tool_result", "text", "image"]
    assert body["messages"][1]["content"][1]["input"] == {"path": "a"}
    assert body["tools"][0] == {
        "name": "read",
        "description": "Read a file",
        "input_schema": {"type": "object"},
    }
    # unknown block kinds pass through untouched
    assert body["messages"][3]["content"][0] == {"type": "thinking", "thinking": "hmm", "signature": "x"}


def test_round_trip_openai_anthropic_openai():
    body = to_anthropic(_history(), TOOLS)
    back, tools = from_anthropic(body["messages"], body["system"], body["tools"])
    assert tools == TOOLS
    again = to_anthropic(back, tools)
    assert again == body
    assert [m["role"] for m in back] == ["system", "user", "assistant", "tool", "tool", "user", "assistant"]


def test_unknown_roles_pass_through():
    msgs = [{"role": "user", "content": "hi"}, {"role": "critic", "content": "meh"}]
    check_messages(msgs)
    body = to_anthropic(msgs)
    assert body["messages"][1] == {"role": "critic", "content": [{"type": "text", "text": "meh"}]}


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("hello", "expected an object"),
        ({"content": "x"}, "role"),
        ({"role": "user", "content": 5}, "content"),
        ({"role": "user", "content": [{"text": "x"}]}, "part 0"),
        ({"role": "assistant", "tool_calls": "x"}, "tool_calls"),
        ({"role": "assistant", "tool_calls": [{"id": 1, "function": {}}]}, "tool_calls[0]"),
        (
            {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {}}}]},
            "arguments",
        ),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
    ],
)
def test_malformed_messages_get_clear_errors(bad, fragment):
    with pytest.raises(MessageError) as exc:
        check_message(bad, 3)
    assert "message 3" in str(exc.value) and fragment in str(exc.value)


def test_invalid_tool_arguments_are_reported_on_conversion():
    msgs = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{oops"}}],
        }
    ]
    with pytest.raises(MessageError, match="not JSON"):
        to_anthropic(msgs)
