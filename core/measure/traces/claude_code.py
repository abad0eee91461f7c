"""Claude Code session transcripts (JSONL, one record per line).

One API call streams as several `assistant` lines sharing `message.id` (one content
block each, usage repeated), with tool results (`user` lines) interleaved: lines are
merged by id into one assistant message and the results follow it. After a
`compact_boundary` the next user line is the compaction summary, where later calls'
prompts restart. System prompt and tool schemas are not recorded: the first call's
recorded prompt minus our count of the rest is the hidden prefix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .build import Builder, called_tools, content_from_blocks, message, parse_time, text_of, tool_call
from .model import RecordedCall, Session, Usage

FMT = "claude_code"

# User text Claude Code injects or echoes rather than a human typing a new request.
_NOT_A_TASK = (
    "<local-command",
    "<task-notification",
    "<system-reminder",
    "[Request interrupted",
    "Caveat:",
    "This session is being continued",
)
# Built-in slash commands that run locally and ask the model nothing.
_LOCAL_COMMANDS = (
    "/mcp",
    "/model",
    "/clear",
    "/config",
    "/help",
    "/cost",
    "/status",
    "/login",
    "/logout",
    "/permissions",
    "/resume",
    "/exit",
    "/ide",
    "/memory",
    "/doctor",
    "/context",
    "/usage",
)


def _opens_task(text: str) -> bool:
    text = text.lstrip()
    if text.startswith(_NOT_A_TASK):
        return False
    if "<command-name>" in text:
        name = text.split("<command-name>", 1)[1].split("<", 1)[0].strip()
        return name not in _LOCAL_COMMANDS
    return True


class _Call:
    __slots__ = ("msg", "pieces", "usage", "output_tokens", "ts", "model", "start")

    def __init__(
        self,
        msg: dict[str, Any],
        usage: dict[str, Any],
        ts: float | None,
        model: str | None,
        start: dict[str, Any] | None,
    ) -> None:
        self.msg = msg
        self.pieces: list[str] = []
        self.usage = usage
        self.output_tokens = int(usage.get("output_tokens") or 0)
        self.ts = ts
        self.model = model
        self.start = start


def load(path: Path, records: list[tuple[int, Any]]) -> list[Session]:
    b = Builder()
    calls: dict[str, _Call] = {}
    restart: dict[str, Any] | None = None
    pending_compact = False
    meta: dict[str, Any] = {"compactions": 0, "thinking_blocks": 0}
    first: dict[str, Any] = {}

    for lineno, rec in records:
        if not isinstance(rec, dict):
            continue
        kind = rec.get("type")
        if not first and kind in ("user", "assistant"):
            first = rec
        if kind == "system" and rec.get("subtype") == "compact_boundary":
            pending_compact = True
            meta["compactions"] += 1
        elif kind == "user":
            msg = _user(b, rec)
            if msg is None:
                continue
            summary = bool(rec.get("isCompactSummary")) or (
                pending_compact and text_of(msg["content"]).startswith("This session is being continued")
            )
            if summary:
                restart, pending_compact = msg, False
            elif not rec.get("isMeta") and _opens_task(text_of(msg["content"])):
                b.task_start(msg)
        elif kind == "assistant":
            _assistant(b, rec, lineno, calls, restart, meta)

    for call in calls.values():
        call.msg["content"] = "\n\n".join(p for p in call.pieces if p)
        usage = dict(
            call.usage, output_tokens=max(call.output_tokens, int(call.usage.get("output_tokens") or 0))
        )
        b.call(call.msg, Usage.from_anthropic(usage), call.ts, call.model, start=call.start)

    session_id = str(first.get("sessionId") or path.stem)
    meta["version"] = first.get("version")
    models = sorted({c.model for c in calls.values() if c.model})
    meta["models"] = models
    agent_id = first.get("agentId")
    if agent_id:
        meta.update(_subagent_meta(path, session_id, str(agent_id)))
        session_id = f"{session_id}/agent-{agent_id}"
    tools = called_tools(b.messages)  # the record holds no schemas; the agent sent them
    return [b.finish(session_id=session_id, source=str(path), fmt=FMT, tools=tools, meta=meta)]


def _user(b: Builder, rec: dict[str, Any]) -> dict[str, Any] | None:
    """Tool results become tool messages; remaining text/images one user message (returned)."""
    content = (rec.get("message") or {}).get("content")
    if isinstance(content, str):
        return b.add(message("user", content))
    if not isinstance(content, list):
        return None
    rest = []
    for blk in content:
        if isinstance(blk, dict) and blk.get("type") == "tool_result":
            b.add(
                message("tool", content_from_blocks(blk.get("content")), tool_call_id=blk.get("tool_use_id"))
            )
        else:
            rest.append(blk)
    return b.add(message("user", content_from_blocks(rest))) if rest else None


def _assistant(
    b: Builder,
    rec: dict[str, Any],
    lineno: int,
    calls: dict[str, _Call],
    restart: dict[str, Any] | None,
    meta: dict[str, Any],
) -> None:
    m = rec.get("message") or {}
    mid = str(m.get("id") or f"line-{lineno}")
    call = calls.get(mid)
    if call is None:
        msg = b.add({"role": "assistant", "content": ""})
        call = calls[mid] = _Call(
            msg, m.get("usage") or {}, parse_time(rec.get("timestamp")), m.get("model"), restart
        )
    else:
        call.output_tokens = max(call.output_tokens, int((m.get("usage") or {}).get("output_tokens") or 0))
    for blk in m.get("content") or []:
        if not isinstance(blk, dict):
            continue
        kind = blk.get("type")
        if kind == "text":
            call.pieces.append(blk.get("text") or "")
        elif kind == "tool_use":
            calls_list = call.msg.setdefault("tool_calls", [])
            if all(tc["id"] != blk.get("id") for tc in calls_list):
                calls_list.append(tool_call(blk.get("id"), blk.get("name", ""), blk.get("input")))
        elif kind in ("thinking", "redacted_thinking"):
            meta["thinking_blocks"] += 1  # not representable in Chat Completions messages


def _subagent_meta(path: Path, parent: str, agent_id: str) -> dict[str, Any]:
    """Link a subagent file to its parent session and the Task call that spawned it."""
    meta: dict[str, Any] = {
        "parent": parent,
        "agent_id": agent_id,
        "kind": "compaction" if agent_id.startswith("acompact") else "task",
        "parent_tool_use_id": None,
    }
    parent_file = path.parent.parent.parent / f"{parent}.jsonl" if path.parent.name == "subagents" else None
    if parent_file is None or not parent_file.is_file():
        return meta
    needle = f'"agentId": "{agent_id}"'
    compact = f'"agentId":"{agent_id}"'
    with parent_file.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if needle not in line and compact not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            data = rec.get("data") or {}
            if data.get("agentId") == agent_id and rec.get("parentToolUseID"):
                meta["parent_tool_use_id"] = rec["parentToolUseID"]
                break
    return meta


def merge_compactions(sessions: list[Session]) -> list[Session]:
    """Each auto-compaction's call put back into the session it compacted.

    Claude Code writes the compaction agent's transcript (`agent-acompact-*.jsonl`) with
    only the messages it added: the hook reminders, the summary request and the summary.
    What it sent was the whole conversation before them, with the same system prompt and
    tools, so the provider read almost all of it from the cache (166,758 of 169,248
    prompt tokens on the shared recordings: the prompt of the parent's last call). Replayed
    on its own, that call would be priced as a fresh 169k-token prompt for every method.

    Merged, the call sits in its parent at the boundary: its prompt is the parent's
    history up to the restart, then the compaction's own messages; its output is the
    summary. Later calls restart at the summary as before. A compaction whose parent or
    boundary cannot be found (a folder without the parent file) stays a session of its own.
    """
    by_id = {s.id: s for s in sessions}
    merged: set[str] = set()
    inserted: list[RecordedCall] = []  # a boundary takes one compaction (a copy of the file: none)
    for s in sessions:
        parent = by_id.get(str(s.meta.get("parent"))) if s.meta.get("kind") == "compaction" else None
        if parent is None or parent.fmt != FMT or s.system is not None or len(s.calls) != 1:
            continue
        call = s.calls[0]
        if call.end != len(s.messages) - 1 or call.timestamp is None:
            continue
        boundary = _restart_after(parent, call.timestamp)
        if boundary is None or any(boundary[0] is c for c in inserted):
            continue
        before, at = boundary
        inserted.append(_insert_call(parent, at, s.messages, before, call))
        parent.meta["compaction_calls"] = parent.meta.get("compaction_calls", 0) + 1
        merged.add(s.id)
    return [s for s in sessions if s.id not in merged]


def _restart_after(parent: Session, ts: float) -> tuple[RecordedCall, int] | None:
    """(the parent's last call before `ts`, the index where the next call's prompt
    restarts) when that next call restarts at a compaction summary after `ts`."""
    calls = parent.calls
    for k in range(len(calls) - 1):
        before, after = calls[k], calls[k + 1]
        if before.timestamp is None or after.timestamp is None:
            continue
        if before.timestamp <= ts <= after.timestamp and after.start > before.end:
            return before, after.start
    return None


def _insert_call(
    parent: Session, at: int, added: list[dict[str, Any]], before: RecordedCall, call: RecordedCall
) -> RecordedCall:
    """Insert `added` (the compaction's messages, its output last) at `at` in `parent`
    and the call that sent them, shifting every index after `at`."""
    n = len(added)
    parent.messages[at:at] = added
    for c in parent.calls:
        if c.start >= at:
            c.start += n
            c.end += n
        if c.sent:
            c.sent = {i + n if i >= at else i: m for i, m in c.sent.items()}
    parent.task_starts = [i + n if i >= at else i for i in parent.task_starts]
    merged = RecordedCall(
        start=before.start,
        end=at + n - 1,
        usage=call.usage,
        timestamp=call.timestamp,
        model=call.model,
        system=before.system,
        sent=dict(before.sent) if before.sent else None,
    )
    k = next(i for i, c in enumerate(parent.calls) if c is before)
    parent.calls.insert(k + 1, merged)
    return merged
