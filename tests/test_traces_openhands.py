"""OpenHands' own trajectories (the event list it saves) read as the calls it made."""

from __future__ import annotations

import json

from tokenpilot.measure.bench.methods import TokenPilotMethod, Vanilla
from tokenpilot.measure.bench.replay import replay
from tokenpilot.measure.traces import detect_format, load, pairing_problems


def _response(rid: str, content: str, calls: list[tuple[str, str, dict]], prompt: int, cached: int) -> dict:
    tool_calls = [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for cid, name, args in calls
    ]
    return {
        "id": rid,
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": tool_calls}}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def _trajectory(n: int) -> list[dict]:
    events: list[dict] = [
        {"id": 0, "timestamp": "2025-02-01T00:00:00", "source": "agent", "action": "system",
         "args": {"content": "You are OpenHands agent.", "tools": [{"type": "function", "function": {"name": "execute_bash"}}]}},
        {"id": 1, "timestamp": "2025-02-01T00:00:01", "source": "user", "action": "message",
         "message": "Fix the failing test.", "args": {"content": "Fix the failing test."}},
        {"id": 2, "source": "environment", "observation": "agent_state_changed", "content": "", "extras": {}},
    ]  # fmt: skip
    for k in range(n):
        calls = [(f"call_{k}", "execute_bash", {"command": f"grep -rn handler_{k} src"})]
        if k % 3 == 2:  # one response, two actions: one assistant message
            calls.append((f"call_{k}b", "str_replace_editor", {"command": "view", "path": f"/w/m{k}.py"}))
        resp = _response(f"resp_{k}", f"Step {k}.", calls, 1000 + 900 * k, 800 * k)
        for j, (cid, name, _args) in enumerate(calls):
            meta = {
                "function_name": name,
                "tool_call_id": cid,
                "model_response": resp,
                "total_calls_in_response": len(calls),
            }
            events.append({"id": 10 * k + 3 + j, "timestamp": f"2025-02-01T00:{k + 1:02d}:00", "source": "agent",
                           "action": "run", "tool_call_metadata": meta, "args": {"command": "..."}})  # fmt: skip
        for j, (cid, name, _args) in enumerate(calls):
            out = "\n".join(f"src/m{k}/f{i}.py:{i}: def handler_{k}_{i}(x): return x" for i in range(150))
            meta = {"function_name": name, "tool_call_id": cid, "model_response": resp}
            events.append({"id": 10 * k + 6 + j, "source": "agent", "observation": "run", "cause": 10 * k + 3 + j,
                           "tool_call_metadata": meta, "content": out, "extras": {}})  # fmt: skip
    events.append(
        {"id": 999, "source": "agent", "action": "message", "message": "Done.", "args": {"content": "Done."}}
    )
    return events


def test_an_openhands_trajectory_is_read_as_its_calls(tmp_path):
    f = tmp_path / "trajectory.json"
    f.write_text(json.dumps(_trajectory(6)))
    assert detect_format(f) == "openhands"
    (s,) = load(f)
    assert s.fmt == "openhands" and [t["function"]["name"] for t in s.tools] == ["execute_bash"]
    roles = [m["role"] for m in s.messages]
    assert roles[:2] == ["system", "user"] and roles.count("assistant") == 7  # 6 responses and the last words
    assert len(s.calls) == 7 and pairing_problems(s.messages) == []
    two = next(m for m in s.messages if m["role"] == "assistant" and len(m.get("tool_calls") or []) == 2)
    assert [c["id"] for c in two["tool_calls"]] == ["call_2", "call_2b"]
    first = s.calls[0]
    assert (
        first.usage is not None and first.usage.prompt_tokens == 1000 and first.model == "gpt-4o-2024-08-06"
    )


def test_the_bench_runs_on_an_openhands_trajectory(tmp_path):
    f = tmp_path / "trajectory.json"
    f.write_text(json.dumps(_trajectory(12)))
    sessions = load(f)
    vanilla = replay(sessions, Vanilla()).record()
    tp = replay(sessions, TokenPilotMethod(name="tokenpilot")).record()
    assert tp["cost_usd"] < vanilla["cost_usd"] and tp["recoverable"] == 1.0
