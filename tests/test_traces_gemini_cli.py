"""Gemini CLI saved chats: an inline session (never skips) and the shared recordings."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import shared_path

from tokenpilot.measure import traces
from tokenpilot.measure.traces import detect_format, pairing_problems


def _session(tmp_path: Path) -> Path:
    doc = {
        "sessionId": "0123abcd-0000-0000-0000-000000000000",
        "projectHash": "ab" * 32,
        "startTime": "2026-01-10T07:58:21.496Z",
        "messages": [
            {
                "id": "u1",
                "timestamp": "2026-01-10T07:58:22Z",
                "type": "user",
                "content": [{"text": "fix utils.go"}],
            },
            {
                "id": "g1",
                "timestamp": "2026-01-10T07:58:25Z",
                "type": "gemini",
                "content": "",
                "thoughts": [{"subject": "Reading", "description": "not sent back"}],
                "tokens": {
                    "input": 12020,
                    "output": 20,
                    "cached": 0,
                    "thoughts": 43,
                    "tool": 0,
                    "total": 12083,
                },
                "model": "gemini-2.5-flash",
                "toolCalls": [
                    {
                        "id": "read_file-1",
                        "name": "read_file",
                        "args": {"absolute_path": "/w/utils.go"},
                        "result": [
                            {
                                "functionResponse": {
                                    "id": "read_file-1",
                                    "name": "read_file",
                                    "response": {"output": "package cli\n"},
                                }
                            }
                        ],
                        "status": "success",
                    },
                    {
                        "id": "replace-2",
                        "name": "replace",
                        "args": {"file_path": "/w/utils.go"},
                        "result": [
                            {
                                "functionResponse": {
                                    "id": "replace-2",
                                    "name": "replace",
                                    "response": {"error": "[Operation Cancelled]"},
                                }
                            }
                        ],
                        "status": "cancelled",
                    },
                ],
            },
            {
                "id": "i1",
                "timestamp": "2026-01-10T07:58:26Z",
                "type": "info",
                "content": "Request cancelled.",
            },
            {
                "id": "g2",
                "timestamp": "2026-01-10T07:58:30Z",
                "type": "gemini",
                "content": "Done.",
                "tokens": {
                    "input": 12100,
                    "output": 5,
                    "cached": 11862,
                    "thoughts": 7,
                    "tool": 0,
                    "total": 12112,
                },
                "model": "gemini-2.5-flash",
            },
            {
                "id": "g3",
                "type": "gemini",
                "content": "",
                "tokens": {"input": 0, "output": 0, "cached": 0, "thoughts": 0, "tool": 0, "total": 0},
            },
        ],
    }
    path = tmp_path / "session-2026-01-10T07-58-0123abcd.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_a_gemini_cli_session_is_read_as_calls_with_usage(tmp_path: Path) -> None:
    path = _session(tmp_path)
    assert detect_format(path) == "gemini_cli"
    [s] = traces.load(path)
    assert s.id == "0123abcd-0000-0000-0000-000000000000" and s.fmt == "gemini_cli"
    assert [m["role"] for m in s.messages] == ["user", "assistant", "tool", "tool", "assistant", "assistant"]
    assert s.messages[0]["content"] == "fix utils.go"
    assert [tc["function"]["name"] for tc in s.messages[1]["tool_calls"]] == ["read_file", "replace"]
    assert json.loads(s.messages[1]["tool_calls"][0]["function"]["arguments"]) == {
        "absolute_path": "/w/utils.go"
    }
    assert s.messages[2] == {"role": "tool", "content": "package cli\n", "tool_call_id": "read_file-1"}
    assert s.messages[3]["content"] == "[Operation Cancelled]"
    assert pairing_problems(s.messages) == []
    assert [(c.start, c.end) for c in s.calls] == [(0, 1), (0, 4), (0, 5)]
    first, second, cancelled = (c.usage for c in s.calls)
    assert (first.prompt_tokens, first.cached_tokens, first.output_tokens) == (
        12020,
        0,
        63,
    )  # thoughts are output
    assert (second.prompt_tokens, second.cached_tokens, second.output_tokens) == (12100, 11862, 12)
    assert cancelled is None
    assert s.meta["notices"] == 1
    assert [t["function"]["name"] for t in s.tools] == ["read_file", "replace"]
    assert s.hidden_prefix_tokens > 11_900  # the CLI's unrecorded system prompt and tool schemas


def test_the_shared_gemini_sessions_hold_their_tool_results() -> None:
    sessions = traces.load(shared_path("traces") / "gemini_cli")
    results = [m for s in sessions for m in s.messages if m["role"] == "tool"]
    assert len(results) == 32  # the README's 32 tool calls, each with its result
    assert all(isinstance(m["content"], str) for m in results)
    # Every call's recorded prompt includes its cache hit; none reads more than it sent.
    assert all(c.usage.cached_tokens <= c.usage.prompt_tokens for s in sessions for c in s.usage_calls)


def test_bench_prices_gemini_cli_sessions_on_geminis_cache(capsys) -> None:
    """`tokenpilot bench` on Gemini CLI's sessions alone picks the gemini cache profile and
    prints every method; --profile still chooses."""
    from tokenpilot.cli import main

    folder = str(shared_path("traces") / "gemini_cli")
    assert main(["bench", folder, "--methods", "vanilla,oracle,keep_last_n,tokenpilot"]) == 0
    out = capsys.readouterr().out
    assert "gemini cache" in out and "(gemini profile)" in out
    for method in ("vanilla", "oracle", "keep_last_n", "tokenpilot"):
        assert f"\n {method} " in out
    assert main(["bench", folder, "--methods", "vanilla", "--profile", "anthropic"]) == 0
    assert "anthropic cache" in capsys.readouterr().out


def test_gemini_cli_0_61_json_lines_are_read_as_the_document_they_build(tmp_path: Path) -> None:
    """0.61 writes a session as JSON lines: a header, messages (rewritten by id once their
    tool calls ran), `$set` updates, and each tool result again as a user message."""
    result = [{"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "a\nb"}}}]
    lines = [
        {"sessionId": "s-0161", "projectHash": "ab" * 32, "startTime": "2026-12-07T08:08:17Z", "kind": "main"},
        {"$set": {"messages": [{"id": "u0", "type": "user", "content": [{"text": "<session_context>"}]}]}},
        {"id": "u1", "type": "user", "content": [{"text": "build it"}]},
        {"$set": {"lastUpdated": "2026-12-07T08:08:19Z"}},
        {"id": "g1", "type": "gemini", "content": "", "tokens": {"input": 100, "output": 1, "cached": 0}},
        {"id": "g1", "type": "gemini", "content": "", "tokens": {"input": 100, "output": 1, "cached": 0},
         "toolCalls": [{"id": "c1", "name": "run_shell_command", "args": {"command": "make"}, "result": result}]},
        {"id": "u2", "type": "user", "content": result},
        {"id": "g2", "type": "gemini", "content": "done", "tokens": {"input": 180, "output": 2, "cached": 96}},
        {"$unset": ["kind"]},
    ]  # fmt: skip
    path = tmp_path / "chats" / "session-2026-12-07T08-08-s0161.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert detect_format(path) == "gemini_cli"
    (s,) = traces.load(tmp_path)
    assert s.id == "s-0161"
    assert [(m["role"], m.get("content")) for m in s.messages] == [
        ("user", "<session_context>"),
        ("user", "build it"),
        ("assistant", ""),
        ("tool", "a\nb"),
        ("assistant", "done"),
    ]
    assert [(c.usage.prompt_tokens, c.usage.cached_tokens) for c in s.usage_calls] == [(100, 0), (180, 96)]
    assert pairing_problems(s.messages) == []
