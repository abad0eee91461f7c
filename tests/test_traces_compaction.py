"""Claude Code's auto-compaction call replayed inside the session it compacted.

The compaction agent's transcript holds only the messages it added; what Claude Code
sent was the whole conversation before them (the provider read it from the cache).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builders import claude_code_assistant
from conftest import shared_path

from tokenpilot.measure import traces
from tokenpilot.measure.bench.methods import Vanilla
from tokenpilot.measure.bench.replay import replay
from tokenpilot.measure.traces import Session

SID = "sess-1"


def _asst(mid: str, block: dict[str, Any], ts: str, *, read: int = 1000, agent: str | None = None) -> dict:
    rec = claude_code_assistant(mid, block, read=read, uuid=mid, session=SID, timestamp=ts)
    if agent:
        rec["agentId"] = agent
    return rec


def _user(content: Any, uid: str, *, agent: str | None = None, **extra: Any) -> dict:
    rec = {
        "type": "user",
        "uuid": uid,
        "sessionId": SID,
        "message": {"role": "user", "content": content},
        **extra,
    }
    if agent:
        rec["agentId"] = agent
    return rec


def _result(tid: str, text: str) -> dict:
    return _user([{"type": "tool_result", "tool_use_id": tid, "content": text}], "r" + tid)


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _folder(tmp_path: Path) -> Path:
    parent = [
        _user("fix the bug in a.py", "u1"),
        _asst(
            "m1",
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a.py"}},
            "2026-02-11T20:00:00Z",
        ),
        _result("t1", "def f():\n    return 1\n"),
        _asst(
            "m2",
            {"type": "tool_use", "id": "t2", "name": "Edit", "input": {"file_path": "a.py"}},
            "2026-02-11T20:01:00Z",
        ),
        _result("t2", "The file a.py has been updated."),
        {"type": "system", "subtype": "compact_boundary", "compactMetadata": {"trigger": "auto"}},
        _user(
            "This session is being continued from a previous conversation. Summary: …",
            "s",
            isCompactSummary=True,
        ),
        _asst("m3", {"type": "text", "text": "Continuing."}, "2026-02-11T20:03:00Z", read=500),
        _user("now run the tests", "u2"),
        _asst("m4", {"type": "text", "text": "ok"}, "2026-02-11T20:04:00Z", read=600),
    ]
    agent = "acompact-abc123"
    compaction = [
        _user(
            "<system-reminder>\nPostToolUse:Edit hook additional context: ok\n</system-reminder>",
            "h1",
            agent=agent,
            isMeta=True,
        ),
        _user("Your task is to create a detailed summary of the conversation so far.", "q", agent=agent),
        _asst(
            "mc",
            {"type": "text", "text": "<analysis>a.py: f returns 1</analysis>"},
            "2026-02-11T20:02:00Z",
            read=1100,
            agent=agent,
        ),
    ]
    root = tmp_path / "cc"
    _write(root / f"{SID}.jsonl", parent)
    _write(root / SID / "subagents" / f"agent-{agent}.jsonl", compaction)
    return root


def test_the_compaction_call_is_replayed_in_its_parent_after_its_history(tmp_path: Path) -> None:
    [s] = traces.load(_folder(tmp_path))
    assert s.id == SID and s.meta["compaction_calls"] == 1
    assert len(s.calls) == 5
    compaction = s.calls[2]
    prompt = [m["content"] for m in s.prompt(compaction)]
    # the whole conversation before the boundary, then the compaction's own messages
    assert prompt[0] == "fix the bug in a.py"
    assert "The file a.py has been updated." in prompt
    assert prompt[-1].startswith("Your task is to create a detailed summary")
    assert s.output(compaction)["content"].startswith("<analysis>")
    assert compaction.usage is not None and compaction.usage.cached_tokens == 1100
    # later calls restart at the summary, after the inserted messages
    after = s.calls[3]
    assert s.messages[after.start]["content"].startswith("This session is being continued")
    assert [m["content"] for m in s.prompt(after)][0].startswith("This session is being continued")
    assert [s.messages[i]["content"] for i in s.task_starts] == ["fix the bug in a.py", "now run the tests"]
    assert [c.timestamp for c in s.calls] == sorted(c.timestamp for c in s.calls)


def test_a_compaction_without_its_parent_stays_a_session_of_its_own(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    (root / f"{SID}.jsonl").unlink()
    [s] = traces.load(root)
    assert s.meta["kind"] == "compaction" and len(s.calls) == 1


def test_shared_compactions_are_priced_as_the_cache_hits_they_were() -> None:
    """On the shared recordings each compaction call read from the cache the whole prompt
    of the parent's call before it (166,758 of 169,248 tokens, one less than that prompt);
    replayed in its parent, vanilla's simulated call reads that prompt from the cache too,
    where on its own it was priced as a fresh prompt."""
    sessions: list[Session] = traces.load(shared_path("traces") / "claude_code_spotter")
    assert not [s.id for s in sessions if s.meta.get("kind") == "compaction"]
    assert sum(s.meta.get("compaction_calls", 0) for s in sessions) == 4
    checked = 0
    for session in (s for s in sessions if s.meta.get("compaction_calls")):
        result = replay([session], Vanilla(), mode="continuous", profile="anthropic")
        assert len(result.calls) == len(session.calls)  # one session: its calls in time order
        for k, call in enumerate(session.calls):
            if not session.output(call)["content"].lstrip().startswith("<analysis>"):
                continue
            before, got = session.calls[k - 1], result.calls[k]
            assert call.usage is not None and before.usage is not None
            assert call.usage.cached_tokens >= before.usage.prompt_tokens - 1  # as recorded
            assert got.hit_tokens == result.calls[k - 1].prompt_tokens  # as replayed
            checked += 1
    assert checked == 4


def test_a_copy_of_the_compaction_file_is_not_merged_twice(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    agent_dir = root / SID / "subagents"
    original = agent_dir / "agent-acompact-abc123.jsonl"
    rows = [json.loads(line) for line in original.read_text().splitlines()]
    for r in rows:
        r["agentId"] = "acompact-copy99"
    _write(agent_dir / "agent-acompact-copy99.jsonl", rows)
    sessions = traces.load(root)
    [parent] = [s for s in sessions if s.id == SID]
    assert parent.meta["compaction_calls"] == 1 and len(parent.calls) == 5
    assert [s.meta["kind"] for s in sessions if s.id != SID] == ["compaction"]
