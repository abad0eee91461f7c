"""The compact view an estimator reads: one record per turn (excerpts, refs, delivery
signals), the registry's tasks summarised, and hints.

Built from frozen history only, so the same history gives the same view (invariant I2).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages.observations import is_observation
from ..messages.turns import Turn, call_name_args, content_text, tool_calls_of
from ..registry import TaskRegistry
from .refs import (
    MAX_REFS_PER_TASK,
    MAX_REFS_PER_TURN,
    excerpt,
    extract_refs,
    json_strings,
    prompt_refs,
)

_WRITE_TOOL_RE = re.compile(
    r"write|edit|create_file|save|patch|append|str_replace|insert|apply_diff|notebook_edit", re.I
)
_PATH_KEYS = (
    "path",
    "file_path",
    "filepath",
    "filename",
    "file",
    "target_file",
    "notebook_path",
    "destination",
    "output_path",
)
# A tool result that reports a failure (Claude Code wraps its own in <tool_use_error>).
FAILED_RE = re.compile(
    r"^\s*(?:<tool_use_error>|(?:error|failed|failure|exception|traceback|permission denied)\b)", re.I
)


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    name: str
    args: str  # excerpt of the JSON arguments


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn, compressed for the estimator: excerpts, refs, delivery signals."""

    turn_id: str
    seq: int  # position among all turns of the session
    opens_with_user: bool
    user: str
    assistant: str
    tool_calls: tuple[ToolCallRecord, ...]
    tool_results: tuple[str, ...]
    refs: tuple[str, ...]
    wrote: tuple[str, ...]  # files written or edited by successful tool calls
    final: bool  # the assistant answered without calling a tool
    question: str  # the assistant's closing question to the user, if any

    def to_dict(self) -> dict[str, Any]:
        return {
            "turnId": self.turn_id,
            "seq": self.seq,
            "user": self.user,
            "assistant": self.assistant,
            "toolCalls": [{"name": c.name, "args": c.args} for c in self.tool_calls],
            "toolResults": list(self.tool_results),
            "refs": prompt_refs(self.refs, MAX_REFS_PER_TURN),
            "wrote": list(self.wrote),
            "final": self.final,
        }


def _closing_question(text: str) -> str:
    """The last sentence, when the text ends by asking the user something."""
    t = text.rstrip().rstrip("*_`) \u200b")
    if not t.endswith("?"):
        return ""
    parts = re.split(r"(?<=[.!?\n])\s+", t)
    return parts[-1].strip()[:200] if parts else t[-200:]


def _written_path(name: str, args: str) -> str | None:
    if not _WRITE_TOOL_RE.search(name):
        return None
    try:
        parsed = json.loads(args)
    except (ValueError, TypeError, RecursionError):
        parsed = None
    if isinstance(parsed, Mapping):
        for key in _PATH_KEYS:
            value = parsed.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return f"(via {name})"


def turn_record(messages: Sequence[Mapping[str, Any]], turn: Turn, seq: int) -> TurnRecord:
    """The compact record of one turn (pure: same messages, same record)."""
    users: list[str] = []
    assistant_text = ""
    calls: list[tuple[str, str, str]] = []  # (id, name, args)
    results: dict[str, str] = {}
    result_texts: list[str] = []
    for k in range(turn.start, turn.end):
        m = messages[k]
        role = m.get("role")
        text = content_text(m.get("content"))
        if role == "assistant":
            assistant_text = text
            for c in tool_calls_of(m):
                name, args = call_name_args(c)
                calls.append((str(c.get("id", "")), name, args))
        elif role == "tool":
            result_texts.append(text)
            if isinstance(m.get("tool_call_id"), str):
                results[m["tool_call_id"]] = text
        elif k > turn.start and is_observation(m, messages[k - 1]):
            result_texts.append(text)  # a text-action agent's tool output, not the person's words (I5)
        elif role == "user" or text:
            users.append(text)
    user_text = "\n".join(u for u in users if u)
    refs = extract_refs(user_text) | extract_refs(assistant_text)
    wrote: list[str] = []
    for n, (cid, name, args) in enumerate(calls):
        refs |= extract_refs(json_strings(args[:20_000]))
        result = results.get(cid, result_texts[n] if n < len(result_texts) else "")
        path = _written_path(name, args)
        if path and path not in wrote and not FAILED_RE.match(result):
            wrote.append(path)
    for r in result_texts:
        refs |= extract_refs(excerpt(r), identifiers=False)
    acted = bool(calls or result_texts)  # a text action's output answers it: the turn did not end the task
    return TurnRecord(
        turn_id=turn.turn_id,
        seq=seq,
        opens_with_user=turn.opens_with_user,
        user=excerpt(user_text),
        assistant=excerpt(assistant_text),
        tool_calls=tuple(ToolCallRecord(n, excerpt(a)) for _, n, a in calls),
        tool_results=tuple(excerpt(r) for r in result_texts),
        refs=tuple(sorted(refs)),
        wrote=tuple(wrote),
        final=not acted and bool(assistant_text.strip()),
        question=_closing_question(assistant_text) if not acted else "",
    )


@dataclass(frozen=True, slots=True)
class EstimatorView:
    """Everything an estimator may read: registry snapshot, new turns, task summaries."""

    base_version: int
    registry: dict[str, Any]
    new_turns: tuple[TurnRecord, ...]
    task_summaries: tuple[dict[str, Any], ...]
    hints: dict[str, Any] = field(default_factory=dict)

    @property
    def known_turn_ids(self) -> set[str]:
        return set(self.registry.get("turns", [])) | {r.turn_id for r in self.new_turns}

    @property
    def task_ids(self) -> set[str]:
        return {t["taskId"] for t in self.registry.get("tasks", [])}

    def to_prompt_dict(self) -> dict[str, Any]:
        """The JSON the model reads (evicted tasks shortened to id/title/lifecycle)."""
        tasks = []
        for s in self.task_summaries:
            if s.get("evicted"):
                tasks.append({k: s[k] for k in ("taskId", "title", "lifecycle", "lastTurnSeq", "evicted")})
            else:
                tasks.append({**s, "refs": prompt_refs(s["refs"], MAX_REFS_PER_TASK)})
        return {
            "baseVersion": self.base_version,
            "tasks": tasks,
            "newTurns": [r.to_dict() for r in self.new_turns],
            "hints": self.hints,
        }


def task_summaries(registry: TaskRegistry, records: Mapping[str, TurnRecord]) -> list[dict[str, Any]]:
    """Per task: its state, the span of turns it owns, and the refs of those turns."""
    out = []
    for task in registry.tasks:
        positions = [p for p in (registry.turn_position(t) for t in task.turn_ids) if p is not None]
        refs: set[str] = set()
        for tid in task.turn_ids:
            rec = records.get(tid)
            if rec is not None:
                refs.update(rec.refs)
        out.append(
            {
                "taskId": task.task_id,
                "title": task.title,
                "objective": task.objective,
                "lifecycle": task.lifecycle,
                "completionEvidence": list(task.completion_evidence),
                "unresolvedQuestions": list(task.unresolved_questions),
                "firstTurnSeq": min(positions, default=-1),
                "lastTurnSeq": max(positions, default=-1),
                "refs": sorted(refs),
            }
        )
    return out


def build_view(
    registry: TaskRegistry,
    new_turns: Sequence[TurnRecord],
    records: Mapping[str, TurnRecord],
    evicted_tasks: Iterable[str] = (),
) -> EstimatorView:
    """Snapshot the registry and summarise its tasks for one estimator run.

    `evicted_tasks`: tasks whose content has already left the view (their
    summaries say `evicted: true`; an evictable task not yet evicted can still be
    reprieved).
    """
    gone = set(evicted_tasks)
    summaries = task_summaries(registry, records)
    for s in summaries:
        s["evicted"] = s["taskId"] in gone
    current = max(summaries, key=lambda s: s["lastTurnSeq"], default=None)
    candidates = [
        s["taskId"]
        for s in summaries
        if s["lifecycle"] == "completed" and not s["unresolvedQuestions"] and s is not current
    ]
    hints = {
        "currentTaskId": current["taskId"] if current else None,
        "evictableCandidateTaskIds": candidates,
    }
    return EstimatorView(registry.version, registry.to_dict(), tuple(new_turns), tuple(summaries), hints)


def empty_delta(base_version: int) -> dict[str, Any]:
    """The delta that changes nothing."""
    return {"baseVersion": base_version, "taskUpdates": []}


def records_for(
    messages: Sequence[Mapping[str, Any]], turns: Iterable[Turn], first_seq: int = 0
) -> list[TurnRecord]:
    """Records of consecutive turns, numbered from `first_seq`."""
    return [turn_record(messages, t, first_seq + n) for n, t in enumerate(turns)]
