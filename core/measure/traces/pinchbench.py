"""PinchBench run files of OpenClaw (`raw/<run>.json`): one session per task.

`tasks[i].transcript` is the task's slice of the OpenClaw session JSONL. In
"continuous" mode a task's calls also carry the earlier tasks' turns, so each task's
session starts with the messages of the tasks before it (its calls are its own).
Lines the harness could not parse are kept as `{"raw": …}` fragments: a binary read
result split by Python's `splitlines` at U+2028; joining the fragments restores it.
The hidden prefix (system prompt, tool schemas) is estimated once, from the run's
first call, and shared by all its tasks: they ran in one OpenClaw session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .build import Builder
from .model import Session
from .openclaw import add_records

FMT = "openclaw_pinchbench"
# Characters str.splitlines() breaks on besides \n (a JSON line cannot contain a raw \n).
_LINE_BREAKS = ("\u2028", "\u2029", "\x85", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def _join(fragments: list[str]) -> dict[str, Any] | None:
    for sep in _LINE_BREAKS:
        try:
            rec = json.loads(sep.join(fragments))
        except ValueError:
            continue
        if isinstance(rec, dict):
            return rec
    return None


def mend(transcript: list[Any], meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Records with split `{"raw": …}` lines joined back where they parse."""
    out: list[dict[str, Any]] = []
    fragments: list[str] = []
    for rec in transcript:
        if isinstance(rec, dict) and "raw" in rec and "type" not in rec:
            fragments.append(str(rec["raw"]))
            joined = _join(fragments)
            if joined is not None:
                out.append(joined)
                meta["mended_records"] = meta.get("mended_records", 0) + 1
                fragments = []
            continue
        if fragments:
            meta["unparsed_fragments"] = meta.get("unparsed_fragments", 0) + len(fragments)
            fragments = []
        if isinstance(rec, dict):
            out.append(rec)
    if fragments:
        meta["unparsed_fragments"] = meta.get("unparsed_fragments", 0) + len(fragments)
    return out


def load(path: Path, data: dict[str, Any]) -> list[Session]:
    continuous = data.get("session_mode") == "continuous"
    run_id = str(data.get("run_id") or path.stem)
    sessions: list[Session] = []
    prior: list[dict[str, Any]] = []
    task_firsts: list[dict[str, Any]] = []
    hidden: int | None = None
    for task in data.get("tasks") or []:
        if not isinstance(task, dict):
            continue
        b = Builder()
        if continuous:
            for m in prior:
                b.add(m)
            for m in task_firsts:
                b.task_start(m)
        else:
            task_firsts = []
        runs = (task.get("grading") or {}).get("runs") or [{}]
        meta: dict[str, Any] = {
            "run_id": run_id,
            "task_id": task.get("task_id"),
            "model": data.get("model"),
            "session_mode": data.get("session_mode"),
            "transcript_span": task.get("transcript_span"),
            "score": runs[0].get("score") if isinstance(runs[0], dict) else None,
            "llm_calls": len(task.get("llm_calls") or []),
        }
        users = add_records(b, mend(task.get("transcript") or [], meta), meta, task_per_user_message=False)
        if users:
            task_firsts.append(users[0])
        session = b.finish(
            session_id=f"{run_id}/{task.get('task_id')}",
            source=str(path),
            fmt=FMT,
            meta=meta,
            hidden_prefix_tokens=hidden,
        )
        if hidden is None and session.usage_calls:
            hidden = session.hidden_prefix_tokens  # the run's first recorded call measures it
        sessions.append(session)
        prior = session.messages
    return sessions
