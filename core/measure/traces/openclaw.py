"""OpenClaw session transcripts: JSONL records (up to 2026.6), also the rows of the SQLite store.

Records are `{"type": "session", ...}` headers, `{"type": "message", "message": {role:
user | assistant | toolResult, ...}}` and bookkeeping (`model_change`, `custom`, …).
Assistant messages carry `usage {input, output, cacheRead, cacheWrite}` (`input` is the
uncached part) and `toolCall` content blocks. OpenClaw does not store its system prompt
or tool schemas, so the hidden prefix is estimated from the first call. A
`{"type": "compaction", "summary": …}` record becomes a user message where later
prompts restart (approximate: the entries OpenClaw keeps after the summary are not
re-added; no recorded example to check against).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .build import Builder, content_from_blocks, message, parse_time, tool_call
from .model import Session, Usage

FMT = "openclaw"


def add_records(
    b: Builder, records: Iterable[dict[str, Any]], meta: dict[str, Any], task_per_user_message: bool = True
) -> list[dict[str, Any]]:
    """Append the messages of OpenClaw records to `b`; returns the user messages added."""
    users: list[dict[str, Any]] = []
    restart: dict[str, Any] | None = None
    for rec in records:
        kind = rec.get("type")
        if kind == "session":
            meta.setdefault("session_id", rec.get("id"))
            meta.setdefault("version", rec.get("version"))
            continue
        if kind == "compaction" and rec.get("summary"):
            restart = b.add(message("user", str(rec["summary"])))
            meta["compactions"] = meta.get("compactions", 0) + 1
            continue
        if kind != "message":
            continue
        msg = rec.get("message") or {}
        role = msg.get("role")
        ts = parse_time(rec.get("timestamp")) or parse_time(msg.get("timestamp"))
        if role == "user":
            added = b.add(message("user", content_from_blocks(msg.get("content"))))
            users.append(added)
            if task_per_user_message or len(users) == 1:
                b.task_start(added)
        elif role == "assistant":
            content = msg.get("content")
            texts: list[str] = [content] if isinstance(content, str) else []
            calls = []
            for blk in content if isinstance(content, list) else []:
                if isinstance(blk, dict) and blk.get("type") == "text":
                    texts.append(blk.get("text") or "")
                elif isinstance(blk, dict) and blk.get("type") == "toolCall":
                    calls.append(tool_call(blk.get("id"), blk.get("name", ""), blk.get("arguments")))
            out = b.add(message("assistant", "\n\n".join(t for t in texts if t), tool_calls=calls))
            usage = msg.get("usage")
            b.call(
                out,
                Usage.from_openclaw(usage) if isinstance(usage, dict) else None,
                ts,
                msg.get("model"),
                start=restart,
            )
        elif role == "toolResult":
            b.add(
                message("tool", content_from_blocks(msg.get("content")), tool_call_id=msg.get("toolCallId"))
            )
        else:
            meta["skipped_roles"] = sorted({*meta.get("skipped_roles", []), str(role)})
    return users


def load_records(
    path: Path, records: Iterable[dict[str, Any]], fmt: str = FMT, default_id: str | None = None
) -> Session:
    b = Builder()
    meta: dict[str, Any] = {}
    add_records(b, records, meta)
    sid = str(meta.get("session_id") or default_id or path.stem)
    return b.finish(session_id=sid, source=str(path), fmt=fmt, meta=meta)


def load(path: Path, records: list[tuple[int, Any]]) -> list[Session]:
    return [load_records(path, (r for _, r in records if isinstance(r, dict)))]
