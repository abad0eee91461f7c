"""Issue #26's per-session floors: a fetched page or document is the web's read, what the
agent asked for by name, so ingestion never cuts it to a preview (it still goes through
the other passes and the hard limit). Cut, the next call had to recall it: Claude Code
`258c7280/agent-a881341` answered from a 78k-char WebFetch of the hooks reference and
went to 1.251x of vanilla at 6.7% retention."""

from __future__ import annotations

import pytest

from tokenpilot import TokenPilot
from tokenpilot.passes.truncate import Truncation

DOC = "\n".join(f"## hook_event_{i}\nThe `additionalContext_{i}` field adds text." for i in range(1800))


@pytest.mark.parametrize("tool", ["WebFetch", "web_fetch", "fetch", "mcp__web__fetch"])
def test_a_fetch_has_no_truncation_limit(tool):
    assert Truncation().limit_for(tool) is None


def test_a_long_fetched_document_reaches_the_next_call_whole():
    assert 60_000 < len(DOC) < TokenPilot().config.hard_limit_chars
    history = [
        {"role": "user", "content": "What can a SessionStart hook print?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "WebFetch", "arguments": '{"url": "https://example.com/hooks.md"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": DOC},
    ]
    out = TokenPilot().prepare(history, session_id="fetch")
    text = out.messages[-1]["content"]
    assert "additionalContext_1799" in text and "hook_event_900" in text
    assert "output truncated" not in text
