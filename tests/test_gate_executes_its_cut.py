"""The cost gate weighs evicting every segment from a cut on; the plan then executed must
be that one. A rule bundle's segment starts at its assistant message (the user's words
stay), while re-planning from an index counts whole turns: planned again from the cut
itself, a turn that opens with the user's words would drop out, and the eviction would
take less than the gate weighed (or nothing, with the gate's decision logged as made)."""

from __future__ import annotations

import base64
import hashlib
import json

from tokenpilot import TokenPilot
from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.lifecycle.schedule import LifecycleConfig

TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}}
]


def _words(seed: str) -> str:
    """A line of letters no other line shares."""
    digest = hashlib.sha256(seed.encode()).digest() + hashlib.sha256(seed.encode() + b"+").digest()
    return base64.b32encode(digest).decode().lower().replace("=", "")


def _turn(k: int, rerun: str) -> list[dict]:
    """The user's words, then the agent runs the same test command again (a superseded command)."""
    # lines that share no shape (nothing for log folding) and no run with another output
    out = "".join(_words(f"{k}:{i}") + "\n" for i in range(80))
    cid = f"c{k}"
    return [
        {"role": "user", "content": f"Step {k}: {rerun}"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": "pytest -q"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": cid, "content": out},
        {"role": "assistant", "content": f"Step {k} done."},
    ]


def test_every_eviction_takes_what_the_gate_weighed() -> None:
    tp = TokenPilot(lifecycle=LifecycleConfig(schedule="inline"))
    msgs: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    weighed_and_taken = []
    for k in range(40):
        msgs = msgs + _turn(k, "run the test suite again and tell me what changed")
        before = tp.lifecycle_stats("s") if k else {}
        out = tp.prepare(msgs, TOOLS, session_id="s")
        assert validate_pairing(out.messages) == []
        after = tp.lifecycle_stats("s")
        decisions = after.get("gate_decisions", [])
        if len(decisions) > len(before.get("gate_decisions", [])) and decisions[-1]["evict"]:
            taken = after["tokens_evicted"] - before.get("tokens_evicted", 0)
            weighed_and_taken.append((decisions[-1]["evictedTokens"], taken))
    assert weighed_and_taken, "the session must evict"
    for weighed, taken in weighed_and_taken:
        # taken counts the evicted messages; weighed is that minus the stubs standing in them
        assert taken >= weighed > 0, weighed_and_taken
