"""Codex CLI rollouts: the two shared recordings, and small made-up rollouts that never skip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import shared_path

from tokenpilot.measure import traces
from tokenpilot.measure.cachesim import request_segments, segments_tokens
from tokenpilot.measure.traces import Session, TraceFormatError, detect_format, pairing_problems
from tokenpilot.measure.traces.build import parse_time

OLD = "rollout-2026-01-02T18-39-45-019b7f94-51b4-7593-922e-ba12b5b73b52.jsonl"  # 0.77, with usage
NEW = "rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl"  # 0.128, no usage


def check(s: Session) -> None:
    """Every call's output is an assistant message; each prompt extends the previous one."""
    assert s.fmt == "codex_cli"
    assert pairing_problems(s.messages) == [], s.id
    for c in s.calls:
        assert 0 <= c.start <= c.end < len(s.messages)
        assert s.output(c)["role"] == "assistant"
    for a, b in zip(s.calls, s.calls[1:]):
        if a.start == b.start:
            assert s.prompt(b)[: len(s.prompt(a)) + 1] == [*s.prompt(a), s.output(a)]
    assert s.task_starts and all(s.messages[i]["role"] == "user" for i in s.task_starts)


# -- the shared recordings ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared() -> dict[str, Session]:
    folder = shared_path("traces", "codex_cli")
    return {Path(s.source).name: s for s in traces.load(folder)}


def test_shared_rollouts_load(shared: dict[str, Session]) -> None:
    assert set(shared) == {OLD, NEW}
    for s in shared.values():
        check(s)
    calls = [c for s in shared.values() for c in s.calls]
    # The README counts 3 + 18 = 21 calls: it merges 019e1695's reply at 10:30:28 with
    # its replies to the prompts typed at 11:20:44 and 11:28:54 (recorded only as
    # `user_message` events). Each prompt starts a model call: 3 + 20.
    assert len(calls) == 23
    assert sum(c.usage is not None for c in calls) == 3
    assert sum(m["role"] == "tool" for s in shared.values() for m in s.messages) == 41
    assert all(c.timestamp is not None for c in calls)


def test_shared_rollout_with_usage(shared: dict[str, Session]) -> None:
    s = shared[OLD]
    assert s.id == "019b7f94-51b4-7593-922e-ba12b5b73b52"
    # 0.77: no base prompt recorded; `instructions` is the AGENTS.md text, already a user message.
    assert s.system is None
    assert s.messages[0]["content"].startswith("# AGENTS.md instructions")
    assert s.messages[1]["content"].startswith("<environment_context>")
    assert s.messages[2]["content"].startswith("what is current repository about?")
    assert s.task_starts == [0]  # the preamble opens the one task, with the typed prompt
    first, second, third = (c.usage for c in s.calls)
    # line 11: last_token_usage {input 7266, cached 0, output 115 (64 of them reasoning)}
    assert (first.prompt_tokens, first.cached_tokens, first.cache_write_tokens, first.output_tokens) == (
        7266,
        0,
        None,
        115,
    )
    assert first.cache_reported and first.uncached_tokens == 7266
    assert (second.prompt_tokens, second.cached_tokens, second.output_tokens) == (7546, 7296, 60)
    assert (third.prompt_tokens, third.cached_tokens, third.output_tokens) == (7662, 7552, 125)
    assert s.meta["repeated_token_counts"] == 2  # lines 14 and 20 repeat lines 11 and 17
    assert s.meta["reasoning_items"] == 3 and s.meta["skipped"] == {"ghost_snapshot": 1}
    assert {c.model for c in s.calls} == {"gpt-5-1-codex-2025-11-13"}
    assert s.calls[0].timestamp == parse_time("2026-01-02T16:39:49.392Z")  # its first output item
    names = [tc["function"]["name"] for c in s.calls for tc in s.output(c)["tool_calls"]]
    assert names == ["shell", "shell", "shell"]
    # 0.77 sends the tool output as a JSON string {"output", "metadata"}: kept verbatim.
    assert json.loads(s.messages[4]["content"])["metadata"]["exit_code"] == 0
    # The hidden prefix (base prompt + tool schemas) makes the first prompt match the record.
    ours = segments_tokens(request_segments(s.prompt(s.calls[0]), s.tools, system_breakpoint=False))
    assert 5000 < s.hidden_prefix_tokens == 7266 - ours


def test_shared_rollout_without_usage(shared: dict[str, Session]) -> None:
    s = shared[NEW]
    assert s.system is not None and s.system["content"].startswith("You are Codex")
    assert all(c.usage is None and c.model is None for c in s.calls)
    assert s.hidden_prefix_tokens == 0
    assert s.meta["user_messages_from_events"] == 3
    users = [i for i, m in enumerate(s.messages) if m["role"] == "user"]
    assert s.task_starts == users and len(users) == 3
    assert "My request for Codex" in s.messages[users[0]]["content"]
    # The reply to the second prompt is a call of its own, not merged into the first task's.
    second = next(c for c in s.calls if c.end == users[1] + 1)
    assert s.output(second)["content"].startswith("Yes. The transcript clearly assigns")
    assert "tool_calls" not in s.output(second)
    # the app tools it declared with their schemas, then the built-in ones it called, by name
    assert [t["function"]["name"] for t in s.tools] == [
        "codex_app__automation_update",
        "read_thread_terminal",
        "load_workspace_dependencies",
        "exec_command",
        "mcp__node_repl__js",
    ]
    assert s.tools[-1] == {"type": "function", "function": {"name": "mcp__node_repl__js"}}
    mcp = [tc for m in s.messages for tc in m.get("tool_calls", []) if "node_repl" in tc["function"]["name"]]
    assert len(mcp) == 3 and mcp[0]["function"]["name"] == "mcp__node_repl__js"


# -- made-up rollouts ----------------------------------------------------------------------------

T0 = "2026-01-01T00:00:00.000Z"


def line(kind: str, payload: dict[str, Any], ts: str = T0) -> dict[str, Any]:
    return {"timestamp": ts, "type": kind, "payload": payload}


def meta(**extra: Any) -> dict[str, Any]:
    return line("session_meta", {"id": "sess-1", "cli_version": "0.99.0", **extra})


def user(text: str) -> dict[str, Any]:
    return line(
        "response_item",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    )


def say(text: str, ts: str = T0) -> dict[str, Any]:
    item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    return line("response_item", item, ts)


def call(call_id: str, cmd: str = "ls") -> dict[str, Any]:
    args = json.dumps({"cmd": cmd})
    return line(
        "response_item",
        {"type": "function_call", "name": "exec_command", "arguments": args, "call_id": call_id},
    )


def result(call_id: str, output: Any) -> dict[str, Any]:
    return line("response_item", {"type": "function_call_output", "call_id": call_id, "output": output})


def reasoning() -> dict[str, Any]:
    return line(
        "response_item", {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "gAAA"}
    )


def tokens(total_in: int, last_in: int, cached: int = 0, out: int = 10) -> dict[str, Any]:
    last = {
        "input_tokens": last_in,
        "cached_input_tokens": cached,
        "output_tokens": out,
        "reasoning_output_tokens": 4,
    }
    total = {"input_tokens": total_in, "cached_input_tokens": cached, "output_tokens": out}
    return line(
        "event_msg", {"type": "token_count", "info": {"total_token_usage": total, "last_token_usage": last}}
    )


NULL_TOKENS = line("event_msg", {"type": "token_count", "info": None, "rate_limits": {}})


def rollout(tmp_path: Path, lines: list[dict[str, Any]], name: str = "rollout.jsonl") -> Session:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    [s] = traces.load(path)
    check(s)
    return s


def test_repeated_and_null_token_counts_count_once(tmp_path: Path) -> None:
    s = rollout(
        tmp_path,
        [
            meta(),
            line("turn_context", {"model": "gpt-x"}),
            user("hello"),
            NULL_TOKENS,
            reasoning(),
            call("c1"),
            tokens(100, 100, out=12),
            tokens(100, 100, out=12),  # 0.77 writes every event twice
            result("c1", "a\nb"),
            line("turn_context", {"model": "gpt-y"}),
            NULL_TOKENS,
            say("done"),
            tokens(230, 130, cached=96),
            tokens(230, 130, cached=96),
        ],
    )
    assert [(c.usage.prompt_tokens, c.usage.cached_tokens, c.usage.output_tokens) for c in s.calls] == [
        (100, 0, 12),
        (130, 96, 10),
    ]
    assert [c.model for c in s.calls] == ["gpt-x", "gpt-y"]
    assert [m["role"] for m in s.messages] == ["user", "assistant", "tool", "assistant"]
    assert s.messages[1]["content"] == ""  # the reasoning item is not text the model is re-sent as
    assert s.meta["repeated_token_counts"] == 2 and s.meta["reasoning_items"] == 1
    assert s.hidden_prefix_tokens > 0


def test_exec_command_end_is_not_the_tool_result(tmp_path: Path) -> None:
    end = {"type": "exec_command_end", "call_id": "c1", "aggregated_output": "FULL OUTPUT", "exit_code": 0}
    s = rollout(
        tmp_path,
        [
            meta(),
            user("run it"),
            call("c1", "make"),
            line("event_msg", end),
            result("c1", "Process running with session ID 7"),
            line("event_msg", {"type": "agent_message", "message": "copy"}),
            line("event_msg", {"type": "user_message", "message": "hello"}),  # a copy: ignored
            say("ok"),
        ],
    )
    assert [m["role"] for m in s.messages] == ["user", "assistant", "tool", "assistant"]
    assert s.messages[2] == {
        "role": "tool",
        "content": "Process running with session ID 7",
        "tool_call_id": "c1",
    }
    assert "FULL OUTPUT" not in json.dumps(s.messages)
    assert [c.usage for c in s.calls] == [None, None]  # no usage: one call per run of output


def test_runs_without_usage_split_at_inputs_and_typed_prompts(tmp_path: Path) -> None:
    s = rollout(
        tmp_path,
        [
            meta(base_instructions={"text": "SYSTEM PROMPT"}),
            line("event_msg", {"type": "user_message", "message": "first task"}),
            reasoning(),
            call("c1"),
            call("c2"),  # parallel calls: one response
            result("c1", "1"),
            result("c2", "2"),
            say("answer one", "2026-01-01T00:00:05.000Z"),
            line("event_msg", {"type": "user_message", "message": "second task"}),
            say("answer two", "2026-01-01T00:01:00.000Z"),
        ],
    )
    assert s.system == {"role": "system", "content": "SYSTEM PROMPT"}
    roles = " ".join(m["role"] for m in s.messages)
    assert roles == "system user assistant tool tool assistant user assistant"
    assert len(s.messages[2]["tool_calls"]) == 2
    assert [c.end for c in s.calls] == [2, 5, 7]
    assert s.task_starts == [1, 6]
    assert s.calls[2].timestamp == parse_time("2026-01-01T00:01:00.000Z")
    assert s.meta["user_messages_from_events"] == 2


def test_compacted_line_restarts_the_prompt(tmp_path: Path) -> None:
    s = rollout(
        tmp_path,
        [
            meta(base_instructions={"text": "SYS"}),
            user("<environment_context>cwd</environment_context>"),
            user("build it"),
            call("c1"),
            tokens(100, 100),
            result("c1", "x" * 50),
            say("built"),
            tokens(250, 150),
            user("now test it"),
            tokens(450, 200, out=30),  # the summarisation request: no output items
            line("compacted", {"message": "SUMMARY of the work so far"}),
            say("tested"),
            tokens(520, 70),
        ],
    )
    assert len(s.calls) == 4
    first, second, compaction, after = s.calls
    assert first.start == second.start == compaction.start == 0
    assert s.output(compaction) == {"role": "assistant", "content": "SUMMARY of the work so far"}
    assert compaction.usage.output_tokens == 30
    summary = s.messages[after.start]
    assert summary == {"role": "user", "content": "SUMMARY of the work so far"}
    assert s.prompt(after) == [s.system, summary]
    assert after.usage.prompt_tokens == 70
    assert s.meta["compactions"] == 1
    # The environment preamble opens the first task; "now test it" (after output) the next.
    assert s.task_starts == [1, next(i for i, m in enumerate(s.messages) if m["content"] == "now test it")]


def test_compacted_replacement_history(tmp_path: Path) -> None:
    kept = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "build it"}]}
    bridge = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "SUMMARY"}]}
    s = rollout(
        tmp_path,
        [
            meta(),
            user("build it"),
            say("working"),
            tokens(100, 100),
            line("compacted", {"message": "SUMMARY", "replacement_history": [kept, bridge]}),
            say("done"),
            tokens(180, 80),
        ],
    )
    assert len(s.calls) == 2
    after = s.calls[1]
    assert [m["content"] for m in s.prompt(after)] == ["build it", "SUMMARY"]
    assert s.messages[after.start] is not s.messages[0]
    assert s.task_starts == [0]


def test_custom_tool_call_pairs_with_its_output(tmp_path: Path) -> None:
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    out = json.dumps({"output": "Success. Updated: A a.txt", "metadata": {"exit_code": 0}})
    s = rollout(
        tmp_path,
        [
            meta(),
            user("add a file"),
            line(
                "response_item",
                {
                    "type": "custom_tool_call",
                    "name": "apply_patch",
                    "input": patch,
                    "call_id": "p1",
                    "status": "completed",
                },
            ),
            tokens(100, 100),
            line("response_item", {"type": "custom_tool_call_output", "call_id": "p1", "output": out}),
            say("added"),
            tokens(200, 100),
        ],
    )
    [tc] = s.messages[1]["tool_calls"]
    assert tc["id"] == "p1" and tc["function"]["name"] == "apply_patch"
    assert json.loads(tc["function"]["arguments"]) == {"input": patch}
    assert s.messages[2] == {"role": "tool", "content": out, "tool_call_id": "p1"}


def test_tool_output_content_items_and_namespaced_calls(tmp_path: Path) -> None:
    items = [
        {"type": "input_text", "text": "shot:"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
    ]
    fc = {
        "type": "function_call",
        "name": "js",
        "namespace": "mcp__node_repl__",
        "arguments": "{}",
        "call_id": "m1",
    }
    s = rollout(tmp_path, [meta(), user("look"), line("response_item", fc), result("m1", items), say("seen")])
    assert s.messages[1]["tool_calls"][0]["function"]["name"] == "mcp__node_repl__js"
    assert s.messages[2]["content"] == [
        {"type": "text", "text": "shot:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]


def test_a_missing_usage_event_leaves_the_earlier_output_without_usage(tmp_path: Path) -> None:
    s = rollout(tmp_path, [meta(), user("go"), call("c1"), result("c1", "1"), say("done"), tokens(90, 90)])
    assert [c.usage and c.usage.prompt_tokens for c in s.calls] == [None, 90]


def test_detected_by_content_not_name(tmp_path: Path) -> None:
    path = tmp_path / "session.data"
    path.write_text("".join(json.dumps(r) + "\n" for r in [meta(), user("hi"), say("hello")]))
    assert detect_format(path) == "codex_cli"
    other = tmp_path / "rollout-2026-01-01.jsonl"  # a Codex-like name, OpenAI chat content
    other.write_text(
        json.dumps({"role": "user", "content": "hi"})
        + "\n"
        + json.dumps({"role": "assistant", "content": "yo"})
    )
    assert detect_format(other) == "openai_chat_jsonl"


def test_malformed_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [meta(), user("hi"), [1, 2], say("x")]))
    with pytest.raises(TraceFormatError) as err:
        traces.load(path)
    assert err.value.line == 3 and "bad.jsonl:3" in str(err.value)
    path.write_text(json.dumps(meta()) + "\n" + json.dumps(line("response_item", {"role": "user"})) + "\n")
    with pytest.raises(TraceFormatError) as err:
        traces.load(path)
    assert err.value.line == 2 and "without a type" in err.value.reason
    path.write_text(json.dumps(meta()) + "\n{not json\n")
    with pytest.raises(TraceFormatError) as err:
        traces.load(path)
    assert err.value.line == 2


def test_empty_and_callless_rollouts(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(TraceFormatError) as err:
        traces.load(empty)
    assert err.value.line == 1
    only_meta = tmp_path / "started.jsonl"
    only_meta.write_text(json.dumps(meta()) + "\n" + json.dumps(user("hi")) + "\n")
    assert traces.load(only_meta) == []  # no model call: nothing to replay
