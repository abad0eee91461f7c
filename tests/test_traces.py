"""Trace importers: every shared recording loads right, plus small inline fixtures that never skip."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from builders import claude_code_assistant
from conftest import shared_path

from tokenpilot.measure import traces
from tokenpilot.measure.traces import (
    Session,
    TraceFormatError,
    UnrecognizedTrace,
    detect_format,
    pairing_problems,
)
from tokenpilot.measure.traces.detect import is_candidate


def check_session(s: Session) -> None:
    """Invariants every importer guarantees."""
    assert pairing_problems(s.messages) == [], s.id
    for c in s.calls:
        assert 0 <= c.start <= c.end < len(s.messages), s.id
        assert s.output(c)["role"] == "assistant", s.id
        assert all(m["role"] != "assistant" or m is not s.output(c) for m in s.prompt(c))
    assert s.task_starts and all(s.messages[i]["role"] == "user" for i in s.task_starts)
    first_user = next(i for i, m in enumerate(s.messages) if m["role"] == "user")
    assert s.task_starts[0] == first_user
    assert s.hidden_prefix_tokens >= 0


# -- the shared corpus ----------------------------------------------------------------------

# README table: folder -> (format, sessions, calls, calls with usage, prompt tokens, cache reads)
# The README counts 18 Claude Code sessions; the 4 compaction agents' calls are replayed
# inside the sessions they compacted (`claude_code.merge_compactions`), so 14 remain.
EXPECTED = {
    "claude_code_spotter": ("claude_code", 14, 781, 781, 71_876_927, 69_971_020),
    "openclaw_pinchbench": ("openclaw_pinchbench", 3, 19, 19, 876_747, 796_160),
    "mini_swe_agent": ("mini_swe_agent", 18, 1285, 1273, 28_850_725, 28_312_704),
    "tau2_bench": ("tau2", 110, 1382, 1382, 11_542_470, 5_451_512),
    "tau_bench": ("tau_bench", 200, 2454, 0, 0, 0),
    # The README counts 227 trajectory steps; `history` (what was sent) holds 230 model
    # outputs: one file has no trajectory, two end with an extra step.
    "swe_agent": ("swe_agent", 22, 230, 0, 0, 0),
    "pinchbench_payloads": (None, 0, 0, 0, 0, 0),
    # The README counts 21 calls (3 with usage); 019e1695 holds 20 runs of model output,
    # not 18: two of its replies answer prompts that only its `user_message` events record
    # (tests/test_traces_codex_cli.py).
    "codex_cli": ("codex_cli", 2, 23, 3, 7_266 + 7_546 + 7_662, 7_296 + 7_552),
    # The README counts 46 calls, 44 with non-zero tokens: a cancelled call's all-zero
    # tokens are no usage.
    "gemini_cli": ("gemini_cli", 7, 46, 44, 896_230, 606_113),
}


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[Session]]:
    root = shared_path("traces")
    return {folder: traces.load(root / folder) for folder in EXPECTED}


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_shared_folder_matches_readme(corpus: dict[str, list[Session]], folder: str) -> None:
    fmt, n_sessions, n_calls, n_usage, prompt, cached = EXPECTED[folder]
    sessions = corpus[folder]
    assert len(sessions) == n_sessions
    assert {s.fmt for s in sessions} <= {fmt}
    assert sum(len(s.calls) for s in sessions) == n_calls
    usage = [c.usage for s in sessions for c in s.calls if c.usage is not None]
    assert len(usage) == n_usage
    assert sum(u.prompt_tokens for u in usage) == prompt
    assert sum(u.cached_tokens for u in usage) == cached
    for s in sessions:
        check_session(s)


def test_every_shared_file_is_detected_by_content() -> None:
    root = shared_path("traces")
    formats: Counter[str] = Counter()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if not is_candidate(path):
            assert path.suffix in ("", ".md") or path.name.startswith(("LICENSE", "README", "UPSTREAM"))
            continue
        try:
            formats[detect_format(path)] += 1
        except UnrecognizedTrace:
            assert "openclaw_pinchbench" in path.parts and path.parent.name in ("reports", "logs")
    assert formats == {
        "claude_code": 18 + 7 + 8,  # spotter, mclaude, codemie (7 sessions and a subagent)
        "openclaw_pinchbench": 1,
        "mini_swe_agent": 18,
        "tau2": 3,
        "tau_bench": 1,
        "swe_agent": 22,
        "codex_cli": 2,
        "gemini_cli": 7,
    }


def test_tau2_files_and_user_side_tools(corpus: dict[str, list[Session]]) -> None:
    per_file: Counter[str] = Counter()
    tools: Counter[str] = Counter()
    for s in corpus["tau2_bench"]:
        name = Path(s.source).name
        per_file[name] += len(s.calls)
        tools[name] += sum(m["role"] == "tool" for m in s.messages)
        assert (
            s.messages[0]["role"] == "system"
            and s.messages[0]["content"].startswith("# Airline")
            or ("telecom" in name)
        )
    assert per_file == {
        "gpt-4.1_airline_default_gpt-4.1_1trials.json": 206,
        "gpt-4.1_telecom_default_gpt-4.1_1trials.json": 620,
        "adaptive-agent_airline_claude-opus-4-6_1trial.json": 556,
    }
    assert tools["gpt-4.1_telecom_default_gpt-4.1_1trials.json"] == 207  # 482 user-side results dropped
    assert tools["adaptive-agent_airline_claude-opus-4-6_1trial.json"] == 371
    adaptive = [s for s in corpus["tau2_bench"] if "adaptive" in s.source]
    assert all(c.usage.cache_reported for s in adaptive for c in s.calls)
    assert not any(
        c.usage.cache_reported for s in corpus["tau2_bench"] if "gpt-4.1" in s.source for c in s.calls
    )


def test_claude_code_sessions(corpus: dict[str, list[Session]]) -> None:
    sessions = {s.id: s for s in corpus["claude_code_spotter"]}
    main = sessions["258c7280-ae70-4798-800f-63464d01a85d"]
    assert len(main.calls) == 153  # 152 of its own and the compaction's (merge_compactions)
    assert main.meta["compaction_calls"] == 1
    assert sum(m["role"] == "tool" for m in main.messages) == 186
    assert 25_000 < main.hidden_prefix_tokens < 27_000
    # After the compaction the prompt restarts at the summary.
    restarts = sorted({c.start for c in main.calls})
    assert restarts[0] == 0 and len(restarts) == 2
    assert main.messages[restarts[1]]["content"].startswith("This session is being continued")
    first = main.calls[0].usage
    assert (first.prompt_tokens, first.cached_tokens, first.cache_write_tokens) == (25_882, 17_842, 8_037)
    assert first.cache_ttl_s == 3600
    subs = [s for s in sessions.values() if "parent" in s.meta]
    assert len(subs) == 6  # the 4 compaction agents are replayed in their parents
    assert {s.meta["kind"] for s in subs} == {"task"}
    linked = [s for s in subs if s.meta["kind"] == "task" and s.meta["parent_tool_use_id"]]
    assert len(linked) == 5  # 6c2214d7's parent transcript is missing
    assert all(s.meta["parent"] in s.id for s in subs)


def test_pinchbench_continuous_sessions(corpus: dict[str, list[Session]]) -> None:
    s20, s21, s22 = corpus["openclaw_pinchbench"]
    assert [len(s.calls) for s in (s20, s21, s22)] == [4, 7, 8]
    assert s20.meta["mended_records"] == 1  # the PDF read split at U+2028
    # Continuous mode: task 22 carries the earlier tasks' turns, one task start each.
    assert len(s22.task_starts) == 3
    assert s22.messages[: len(s21.messages)] == s21.messages
    assert s20.hidden_prefix_tokens == s22.hidden_prefix_tokens > 9000
    u = s20.calls[0].usage
    assert (u.prompt_tokens, u.cached_tokens) == (467 + 9216, 9216)


def test_openclaw_example_transcript() -> None:
    path = shared_path("openclaw", "transcript_e2e-2.jsonl")
    assert detect_format(path) == "openclaw"
    [s] = traces.load(path)
    check_session(s)
    assert s.id == "e2e-2"
    assert [c.usage.prompt_tokens for c in s.calls] == [1000, 1000, 1000]
    assert s.messages[1]["tool_calls"][0]["function"]["name"] == "recall_artifact"


# -- inline fixtures (never skip) -----------------------------------------------------------------


def write(tmp_path: Path, name: str, content: object, jsonl: bool = False) -> Path:
    path = tmp_path / name
    if jsonl:
        path.write_text("\n".join(json.dumps(r) for r in content) + "\n")  # type: ignore[union-attr]
    else:
        path.write_text(json.dumps(content))
    return path


def test_openai_chat_json_with_tools(tmp_path: Path) -> None:
    data = {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "ls", "arguments": {"path": "."}}}],
            },
            {"role": "user", "content": "and?"},
            {
                "role": "assistant",
                "content": "done",
                "usage": {
                    "prompt_tokens": 50,
                    "completion_tokens": 2,
                    "prompt_tokens_details": {"cached_tokens": 32},
                },
            },
        ],
        "tools": [{"type": "function", "function": {"name": "ls", "parameters": {}}}],
    }
    path = write(tmp_path, "chat.data", data)
    assert detect_format(path) == "openai_chat"
    [s] = traces.load(path)
    check_session(s)
    # The missing id is synthesised and the missing result placeholder follows the call.
    call_id = s.messages[2]["tool_calls"][0]["id"]
    assert call_id and s.messages[3] == {
        "role": "tool",
        "content": s.messages[3]["content"],
        "tool_call_id": call_id,
    }
    assert json.loads(s.messages[2]["tool_calls"][0]["function"]["arguments"]) == {"path": "."}
    assert s.meta["pairing_repairs"] == {"ids_synthesized": 1, "results_synthesized": 1}
    assert [(c.start, c.end) for c in s.calls] == [(0, 2), (0, 5)]
    assert s.calls[1].usage.cached_tokens == 32 and s.tools[0]["function"]["name"] == "ls"


def test_openai_chat_jsonl_requests_are_stitched(tmp_path: Path) -> None:
    sys = {"role": "system", "content": "S"}
    u1 = {"role": "user", "content": "one"}
    a1 = {"role": "assistant", "content": "A1"}
    u2 = {"role": "user", "content": "two"}
    volatile = {"role": "user", "content": "internal context 1"}
    rows = [
        {"t": 1.0, "body": {"messages": [sys, u1, volatile], "tools": []}},
        {"t": 2.0, "body": {"messages": [sys, u1, a1, u2]}},
        {
            "t": 3.0,
            "body": {"messages": [sys, u1, a1, u2]},
            "response": {
                "choices": [{"message": {"role": "assistant", "content": "A2"}}],
                "usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 0}},
            },
        },
    ]
    path = write(tmp_path, "requests.jsonl", rows, jsonl=True)
    assert detect_format(path) == "openai_chat_jsonl"
    [s] = traces.load(path)
    check_session(s)
    # The volatile tail breaks the thread; the repeated request shares the recorded reply.
    assert s.meta["threads"] == 2 and s.meta["placeholder_outputs"] == 1
    assert [m["content"] for m in s.messages] == [
        "S",
        "one",
        "internal context 1",
        "",
        "S",
        "one",
        "A1",
        "two",
        "A2",
    ]
    assert [(c.start, c.end) for c in s.calls] == [(0, 3), (4, 8), (4, 8)]
    assert s.output(s.calls[2])["content"] == "A2" and s.calls[2].usage.prompt_tokens == 9


def test_claude_code_merges_streamed_lines_and_restarts_after_compaction(tmp_path: Path) -> None:
    def asst(mid: str, block: dict, read: int) -> dict:
        return claude_code_assistant(
            mid, block, read=read, uuid=mid + str(read), session="sess", timestamp="2026-02-11T20:00:00Z"
        )

    def result(tid: str) -> dict:
        return {
            "type": "user",
            "uuid": "r" + tid,
            "sessionId": "sess",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tid, "content": "ok"}],
            },
        }

    rows = [
        {"type": "progress", "data": {}},
        {"type": "user", "uuid": "u1", "sessionId": "sess", "message": {"role": "user", "content": "do it"}},
        asst("m1", {"type": "thinking", "thinking": "hmm"}, 1000),
        asst("m1", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}, 1000),
        result("t1"),
        asst("m1", {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "a"}}, 1000),
        result("t2"),
        asst("m2", {"type": "text", "text": "done"}, 1100),
        {"type": "system", "subtype": "compact_boundary", "compactMetadata": {"trigger": "auto"}},
        {
            "type": "user",
            "uuid": "s",
            "sessionId": "sess",
            "isCompactSummary": True,
            "message": {
                "role": "user",
                "content": "This session is being continued from a previous conversation.",
            },
        },
        asst("m3", {"type": "text", "text": "resumed"}, 900),
        {
            "type": "user",
            "uuid": "u2",
            "sessionId": "sess",
            "message": {"role": "user", "content": "next task"},
        },
        asst("m4", {"type": "text", "text": "ok"}, 1000),
    ]
    path = write(tmp_path, "sess.jsonl", rows, jsonl=True)
    assert detect_format(path) == "claude_code"
    [s] = traces.load(path)
    check_session(s)
    roles = [m["role"] for m in s.messages]
    assert roles == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert [tc["id"] for tc in s.messages[1]["tool_calls"]] == ["t1", "t2"]
    assert [(c.start, c.end) for c in s.calls] == [(0, 1), (0, 4), (5, 6), (5, 8)]
    assert s.calls[0].usage.prompt_tokens == 1103 and s.calls[0].usage.cache_ttl_s == 300
    assert s.task_starts == [0, 7] and s.meta["compactions"] == 1 and s.meta["thinking_blocks"] == 1
    assert s.hidden_prefix_tokens > 1000


def test_openclaw_sqlite_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zstandard

    records = [
        {"type": "session", "version": 4, "id": "db-1"},
        {
            "type": "message",
            "timestamp": "2026-12-02T09:18:47Z",
            "message": {"role": "user", "content": "Turn 1"},
        },
        {
            "type": "message",
            "timestamp": "2026-12-02T09:18:48Z",
            "message": {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "x"}}],
                "usage": {"input": 232, "output": 10, "cacheRead": 768, "cacheWrite": 0},
            },
        },
        {
            "type": "message",
            "message": {
                "role": "toolResult",
                "toolCallId": "c1",
                "content": [{"type": "text", "text": "big " * 500}],
            },
        },
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "done"}],
                "usage": {"input": 5, "output": 1, "cacheRead": 1024, "cacheWrite": 0},
            },
        },
    ]
    db = tmp_path / "openclaw-agent.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE transcript_events (id INTEGER PRIMARY KEY, event_json BLOB)")
    for k, rec in enumerate(records):
        raw = json.dumps(rec)
        value: object = zstandard.ZstdCompressor().compress(raw.encode()) if k == 3 else raw
        con.execute("INSERT INTO transcript_events (event_json) VALUES (?)", (value,))
    con.commit()
    con.close()
    assert detect_format(db) == "openclaw_sqlite"
    [s] = traces.load(db)
    check_session(s)
    assert s.id == "db-1" and [c.usage.prompt_tokens for c in s.calls] == [1000, 1029]
    assert s.messages[2]["content"].startswith("big big")

    import builtins

    real_import = builtins.__import__

    def no_zstd(name: str, *args: object, **kwargs: object) -> object:
        if name == "zstandard":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_zstd)
    with pytest.raises(TraceFormatError, match=r"row 4 .*zstd-compressed.*zstandard"):
        traces.load(db)


def test_mini_swe_agent_formats(tmp_path: Path) -> None:
    new = {
        "instance_id": "x__y-1",
        "trajectory_format": "mini-swe-agent-1.1",
        "info": {"exit_status": "Submitted"},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "<pr_description>fix it"},
            {
                "role": "assistant",
                "content": "run",
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    }
                ],
                "extra": {
                    "timestamp": 1775804459.0,
                    "response": {
                        "model": "deepseek-chat",
                        "usage": {
                            "prompt_tokens": 1714,
                            "completion_tokens": 84,
                            "prompt_cache_hit_tokens": 320,
                            "prompt_tokens_details": {"cached_tokens": 320},
                        },
                    },
                },
            },
            {"role": "tool", "tool_call_id": "call_0", "content": "<returncode>0</returncode>", "extra": {}},
            {"role": "exit", "content": "diff"},
        ],
    }
    [s] = traces.load(write(tmp_path, "a.traj.json", new))
    check_session(s)
    assert s.fmt == "mini_swe_agent" and [m["role"] for m in s.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
    ]
    assert "extra" not in s.messages[2]
    assert (s.calls[0].usage.prompt_tokens, s.calls[0].usage.cached_tokens, s.calls[0].model) == (
        1714,
        320,
        "deepseek-chat",
    )
    old = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Please solve this issue"},
        {"role": "assistant", "content": "```mswea_bash_command\nls\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>a</output>"},
    ]
    path = write(tmp_path, "old.traj.json", old)
    assert detect_format(path) == "mini_swe_agent"
    [s] = traces.load(path)
    assert len(s.calls) == 1 and s.calls[0].usage is None and s.task_starts == [1]


def test_swe_agent_tau_and_tau2_shapes(tmp_path: Path) -> None:
    traj = {
        "environment": "x",
        "info": {"model_stats": {"api_calls": 1}},
        "history": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "demo", "is_demo": True},
            {
                "role": "assistant",
                "content": "look",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "content": "out", "tool_call_ids": ["c"]},
        ],
        "trajectory": [{"action": "ls", "observation": "out", "response": "look"}],
    }
    [s] = traces.load(write(tmp_path, "t.traj", traj))
    check_session(s)
    assert s.fmt == "swe_agent" and s.messages[3]["tool_call_id"] == "c"
    tau = [
        {
            "task_id": 1,
            "trial": 0,
            "reward": 1.0,
            "traj": [
                {"role": "system", "content": "policy"},
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "k", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "k", "name": "f", "content": "{}"},
                {"role": "assistant", "content": "bye"},
            ],
        }
    ]
    [s] = traces.load(write(tmp_path, "tau.json", tau))
    check_session(s)
    assert s.fmt == "tau_bench" and len(s.calls) == 2
    sim = {
        "id": "sim1",
        "task_id": "0",
        "termination_reason": "user_stop",
        "messages": [
            {"role": "assistant", "content": "Hi!", "usage": None},
            {"role": "user", "content": "help", "usage": {"prompt_tokens": 10, "completion_tokens": 1}},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "q", "name": "g", "arguments": {"a": 1}, "requestor": "assistant"}],
                "timestamp": "2025-08-01T16:20:50",
                "usage": {"prompt_tokens": 3000, "completion_tokens": 5},
            },
            {"role": "tool", "id": "q", "requestor": "assistant", "content": "{}"},
            {
                "role": "user",
                "content": None,
                "tool_calls": [{"id": "u", "name": "check", "arguments": {}, "requestor": "user"}],
            },
            {"role": "tool", "id": "u", "requestor": "user", "content": "status"},
            {
                "role": "assistant",
                "content": "done",
                "usage": {"prompt_tokens": 3100, "completion_tokens": 5},
            },
        ],
        "policy": "Be nice.",
    }
    [s] = traces.load(write(tmp_path, "sims.json", [sim]))
    check_session(s)
    assert s.fmt == "tau2" and [m["role"] for m in s.messages] == [
        "system",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert s.meta["user_side_dropped"] == 2 and [c.usage.prompt_tokens for c in s.calls] == [3000, 3100]
    assert not s.calls[0].usage.cache_reported


def test_malformed_files_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "user"}\n{"type": "assistant"}\n{"type": oops}\n')
    with pytest.raises(TraceFormatError, match=r"bad\.jsonl:3: invalid JSON line"):
        traces.load(bad)
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "messages": [\n    {"role": "user",, "content": "x"}\n  ]\n}\n')
    with pytest.raises(TraceFormatError, match=r"broken\.json:3: invalid JSON"):
        traces.load(broken)
    unknown = write(tmp_path, "report.json", {"totals": {"requests": 3}})
    with pytest.raises(UnrecognizedTrace, match=r"report\.json: JSON object of no known trace format"):
        traces.load(unknown)
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(TraceFormatError, match=r"empty\.json:1: empty file"):
        traces.load(empty)
    with pytest.raises(TraceFormatError):
        traces.load(tmp_path / "missing")


def test_folder_load_skips_non_data_but_not_broken_data(tmp_path: Path) -> None:
    (tmp_path / "LICENSE").write_text("MIT License ...")
    (tmp_path / "notes.md").write_text("[link](x)")
    write(tmp_path, "report.json", {"totals": {}})
    sub = tmp_path / "deep" / "er"
    sub.mkdir(parents=True)
    write(sub, "chat.json", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    sessions = traces.load(tmp_path)
    assert [s.fmt for s in sessions] == ["openai_chat"]
    (sub / "zz.jsonl").write_text('{"role": "user"\n')
    with pytest.raises(TraceFormatError, match=r"zz\.jsonl:1"):
        traces.load(tmp_path)


def test_folder_load_skips_packages_version_control_and_environments(tmp_path: Path) -> None:
    """`tokenpilot bench <folder>` on a project folder: node_modules, .git and virtual
    environments (by name, or by their pyvenv.cfg) hold no sessions and are not entered."""
    chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    write(tmp_path, "chat.json", chat)
    for skipped in ("node_modules/pkg", ".git/objects", ".venv/lib", "my-env/lib"):
        folder = tmp_path / skipped
        folder.mkdir(parents=True)
        write(folder, "chat.json", chat)
        (folder / "broken.jsonl").write_text('{"role": "user"\n')  # would raise if read
    (tmp_path / "my-env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    kept = tmp_path / "src" / "logs"
    kept.mkdir(parents=True)
    write(kept, "chat.json", chat)
    sessions = traces.load(tmp_path)
    assert len(sessions) == 2
    assert traces.trace_files(tmp_path) == [tmp_path / "chat.json", kept / "chat.json"]


def test_pairing_repair_keeps_results_next_to_calls(tmp_path: Path) -> None:
    msgs = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "y", "arguments": "not json"}},
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "user", "content": "queued while tools ran"},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "a", "content": "A again"},
        {"role": "tool", "tool_call_id": "zzz", "content": "orphan"},
        {"role": "assistant", "content": "done"},
    ]
    [s] = traces.load(write(tmp_path, "m.json", msgs))
    check_session(s)
    assert [m["role"] for m in s.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
        "user",
        "assistant",
    ]
    assert [m.get("tool_call_id") for m in s.messages[2:4]] == ["a", "b"]
    assert json.loads(s.messages[1]["tool_calls"][1]["function"]["arguments"]) == {
        "raw_arguments": "not json"
    }
    assert s.meta["pairing_repairs"] == {"orphans_converted": 1, "duplicates_converted": 1, "moved": 1}
    assert s.calls[1].end == 7


def test_reused_tool_call_ids_are_made_unique(tmp_path: Path) -> None:
    """SWE-agent replays and τ-bench reuse ids across turns; Anthropic rejects that."""

    def turn(content: str) -> list[dict]:
        call = {"id": "same", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        return [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "same", "content": content},
        ]

    msgs = [{"role": "user", "content": "go"}, *turn("1"), *turn("2"), *turn("3")]
    [s] = traces.load(write(tmp_path, "dup.json", msgs))
    check_session(s)
    assert [m["tool_calls"][0]["id"] for m in s.messages if m.get("tool_calls")] == [
        "same",
        "same~1",
        "same~2",
    ]
    assert [m["tool_call_id"] for m in s.messages if m["role"] == "tool"] == ["same", "same~1", "same~2"]
    assert s.meta["pairing_repairs"] == {"ids_renamed": 2}


def test_openclaw_jsonl_inline(tmp_path: Path) -> None:
    rows = [
        {"type": "session", "version": 3, "id": "oc-1", "cwd": "/w"},
        {"type": "model_change", "modelId": "m"},
        {"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": "[Wed] hi"}]}},
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": "plain reply",
                "usage": {"input": 10, "output": 2, "cacheRead": 0, "cacheWrite": 0},
            },
        },
        {"type": "compaction", "summary": "Summary of the chat so far."},
        {"type": "message", "message": {"role": "user", "content": "again"}},
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "ok"}],
                "usage": {"input": 3, "output": 1, "cacheRead": 0, "cacheWrite": 5},
            },
        },
    ]
    path = write(tmp_path, "oc.jsonl", rows, jsonl=True)
    assert detect_format(path) == "openclaw"
    [s] = traces.load(path)
    check_session(s)
    assert [m["content"] for m in s.messages] == [
        "[Wed] hi",
        "plain reply",
        "Summary of the chat so far.",
        "again",
        "ok",
    ]
    assert [(c.start, c.end) for c in s.calls] == [(0, 1), (2, 4)]
    assert s.calls[1].usage.prompt_tokens == 8 and s.calls[1].usage.cache_write_tokens == 5
    assert s.task_starts == [0, 3] and s.meta["compactions"] == 1
