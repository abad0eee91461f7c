"""Task-state estimators: read a compact view of new turns, propose a semantic delta.

An estimator only *proposes*; `TaskRegistry.apply` decides. Three implementations:

- `OfflineEstimator` (default): deterministic heuristics, no model call.
- `LLMEstimator`: any OpenAI-compatible endpoint, strict parsing, one repair retry;
  every failure becomes "no change".
- `ImmediateEstimator`: the paper's ablation, evicting a task as soon as it is
  completed and the session moved on, without asking whether later work uses it.

The view is built from frozen history only, so the same history gives the same
view and, offline, the same delta (invariant I2).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .estimator_prompts import IMMEDIATE_SYSTEM_PROMPT, REPAIR_PROMPT, SYSTEM_PROMPT
from .registry import LIFECYCLES, UPDATE_FIELDS, TaskRegistry
from .turns import Turn, call_name_args, content_text, tool_calls_of

log = logging.getLogger("tokenpilot")

EXCERPT_CHARS = 400
# Caps on the refs a model estimator reads (prompt size). The offline estimator and the
# registry always use every ref: a cap there once dropped "transcript.md" from a task
# with many refs (alphabetical order), and the task that read it was evicted while the
# current request named it (invariant I6).
MAX_REFS_PER_TURN = 64
MAX_REFS_PER_TASK = 128


def prompt_refs(refs: Iterable[str], limit: int) -> list[str]:
    """At most `limit` refs for a prompt: files, paths and URLs first, then identifiers."""
    return sorted(refs, key=lambda r: (not ("/" in r or "." in r), r))[:limit]


# ---------------------------------------------------------------------------
# References: what ties one task's content to later work (residual utility).
# ---------------------------------------------------------------------------
_EXTENSIONS = (
    "md|markdown|txt|rst|py|pyi|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|"
    "csv|tsv|xml|html|htm|css|scss|sh|bash|zsh|ps1|rs|go|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|sql|"
    "log|lock|pdf|docx|xlsx|pptx|png|jpe?g|gif|svg|webp|zip|gz|tar|parquet|db|sqlite"
)
_URL_RE = re.compile(r"https?://[^\s\"'<>()\[\]{}`]+")
_ART_RE = re.compile(r"\bart_[0-9a-f]{8,64}\b")
_ABS_PATH_RE = re.compile(r"(?<![\w/.])(?:~|\.{1,2})?/(?:[\w.-]+/)*[\w.-]+")
_REL_PATH_RE = re.compile(r"\b[\w.-]+(?:/[\w.-]+)+")
_FILE_RE = re.compile(r"\b[\w-]+(?:\.[\w-]+)*\.(?:" + _EXTENSIONS + r")\b", re.IGNORECASE)
_CAMEL_RE = re.compile(r"\b[A-Za-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b")
_SNAKE_RE = re.compile(r"\b[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+\b")
_NUMBER_RE = re.compile(r"(?<![\w.])\d{4,}(?![\w])")
_TRAILING = ".,;:!?)'\"`"


# Names every task of an agent touches: the workspace files injected into its system
# prompt (OpenClaw, Claude Code) and tool-chain folders. Sharing them says nothing about
# one task needing another's content, so they never count as residual use.
AMBIENT_NAMES = frozenset(
    {
        "AGENTS.md",
        "SOUL.md",
        "USER.md",
        "IDENTITY.md",
        "BOOTSTRAP.md",
        "MEMORY.md",
        "TOOLS.md",
        "HEARTBEAT.md",
        "SKILL.md",
        "CLAUDE.md",
        "node_modules",
        ".git",
        "__pycache__",
        ".venv",
    }
)
_YEAR_RE = re.compile(r"^(?:19|20)\d\d$")


def _ambient(ref: str) -> bool:
    return ref.rstrip("/").rsplit("/", 1)[-1] in AMBIENT_NAMES or bool(_YEAR_RE.match(ref))


def _json_strings(args: str) -> str:
    """The string values of tool-call arguments (not their keys: `oldText` is no reference)."""
    try:
        value = json.loads(args)
    except (ValueError, RecursionError):  # not JSON, or nested past what Python reads
        return args
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return "\n".join(out)


def extract_refs(text: str, *, identifiers: bool = True) -> set[str]:
    """Files, paths, URLs, artifact ids and (optionally) distinctive identifiers.

    Identifiers are CamelCase or snake_case names of 6+ chars and numbers of 4+
    digits. Open-world tool output is scanned with `identifiers=False`: there,
    such tokens are mostly noise (dates, ids of unrelated records) and would keep
    unrelated tasks alive.
    """
    if not text:
        return set()
    refs: set[str] = set()
    for rx in (_URL_RE, _ART_RE):
        refs.update(m.group(0).rstrip(_TRAILING) for m in rx.finditer(text))
    stripped = _URL_RE.sub(" ", text)
    for m in _ABS_PATH_RE.finditer(stripped):
        p = m.group(0).rstrip(_TRAILING)
        if len(p) > 2 and p.strip("/.~"):
            refs.add(p)
    for m in _REL_PATH_RE.finditer(stripped):
        p = m.group(0).rstrip(_TRAILING)
        if "." in p.rsplit("/", 1)[-1]:  # a/b/c.ext, not and/or
            refs.add(p)
    refs.update(m.group(0) for m in _FILE_RE.finditer(stripped))
    if identifiers:
        for rx in (_CAMEL_RE, _SNAKE_RE):
            refs.update(w for w in (m.group(0) for m in rx.finditer(stripped)) if len(w) >= 6)
        refs.update(m.group(0) for m in _NUMBER_RE.finditer(stripped))
    return {r for r in refs if not _ambient(r)}


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """At most `limit` chars: head and tail around an ellipsis."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = int(limit * 0.6)
    tail = limit - head - 3
    return text[:head] + " … " + text[len(text) - tail :]


# ---------------------------------------------------------------------------
# The compact view an estimator reads.
# ---------------------------------------------------------------------------
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
        elif role == "user" or text:
            users.append(text)
    user_text = "\n".join(u for u in users if u)
    refs = extract_refs(user_text) | extract_refs(assistant_text)
    wrote: list[str] = []
    for n, (cid, name, args) in enumerate(calls):
        refs |= extract_refs(_json_strings(args[:20_000]))
        result = results.get(cid, result_texts[n] if n < len(result_texts) else "")
        path = _written_path(name, args)
        if path and path not in wrote and not FAILED_RE.match(result):
            wrote.append(path)
    for r in result_texts:
        refs |= extract_refs(excerpt(r), identifiers=False)
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
        final=not calls and bool(assistant_text.strip()),
        question=_closing_question(assistant_text) if not calls else "",
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


@runtime_checkable
class Estimator(Protocol):
    """Reads a view, returns a semantic delta (a dict in the paper's schema)."""

    def estimate(self, view: EstimatorView) -> dict[str, Any]: ...


# ---------------------------------------------------------------------------
# Offline heuristics.
# ---------------------------------------------------------------------------
_WORD_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./\-]*")
_STOPWORDS = frozenset(
    """a an the and or but if then else of to in on at by for from with into onto about as is are was were be
    been being do does did done have has had can could should would will shall may might must please pls
    me my mine we our us you your i he she they their them it its this that these those there here what which
    who whom whose when where why how all any some each every more most other such only own same so than too
    very just also now new one two make made get got give put let use using used want need like file files
    write read create save into out up down over under again further once not no yes ok okay""".split()
)
# Instruction verbs say what to do, not what about: they do not tell tasks apart.
_GENERIC_VERBS = frozenset(
    """summarize summarise extract list find show explain describe generate compute calculate analyze
    analyse check run add build implement produce prepare draft look tell give provide count collect""".split()
)
# A message that opens with one of these continues the current task.
CONTINUATION_OPENERS = frozenset(
    """also and additionally plus then again continue keep still instead but however actually wait oh
    ok okay yes yep yeah no nope sure great thanks thank perfect good nice hmm retry redo undo revert""".split()
)
# In a short message (<= SHORT_WORDS words) these point back at earlier work ("now fix that").
BACK_REFERENCES = frozenset({"it", "that", "them", "those", "again", "too", "instead", "same", "above"})
SHORT_WORDS = 8
NEW_TASK_OVERLAP = 0.5


def content_words(text: str) -> set[str]:
    """Lower-cased content words, light plural folding, stopwords removed."""
    out = set()
    for w in _WORD_RE.findall(text.lower()):
        w = w.strip("./-_")
        if len(w) < 3 or w in _STOPWORDS or w in _GENERIC_VERBS:
            continue
        if len(w) > 4 and w.endswith("s") and not w.endswith("ss") and "." not in w:
            w = w[:-1]
        out.add(w)
    return out


def is_continuation(text: str) -> bool:
    """Does this user message refer back to the work in progress?"""
    words = re.findall(r"[a-z']+", text.lower())
    if not words:
        return True
    if words[0] in CONTINUATION_OPENERS:
        return True
    return len(words) <= SHORT_WORDS and any(w in BACK_REFERENCES for w in words)


def departs_from(text: str, objective: str) -> bool:
    """A new user request starts a new task when it departs from the objective.

    Heuristic: not a continuation (see `is_continuation`), has content words, and
    their Jaccard similarity with the objective's content words (stopwords and
    generic instruction verbs removed) is below NEW_TASK_OVERLAP. Splitting a
    follow-up off by mistake is the safe error: the residual-utility check keeps
    a task that later work still refers to.
    """
    if is_continuation(text):
        return False
    words = content_words(text)
    if not words:
        return False
    prev = content_words(objective)
    if not prev:
        return True
    return len(words & prev) / len(words | prev) < NEW_TASK_OVERLAP


def _title(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    words = first.split()
    title = " ".join(words[:10])
    return title[:80] if title else "untitled"


@dataclass(slots=True)
class _TaskState:
    task_id: str
    title: str
    objective: str
    lifecycle: str
    first: int
    last: int
    refs: set[str]
    evidence: list[str]
    questions: list[str]
    new: bool = False
    new_turns: list[str] = field(default_factory=list)
    touched: bool = False
    reason: str = ""
    evicted: bool = False


class OfflineEstimator:
    """Deterministic heuristics for the paper's lifecycle, no model call.

    - New task: a user-opened turn whose text departs from the current task's
      objective (`departs_from`). While the current task waits on an answer to the
      assistant's question, a short user message (<= SHORT_WORDS words) is taken
      as that answer.
    - Completed: the task's latest turn is a final answer (no tool call) that does
      not end in a question; evidence is that answer and the files written.
      Ending in a question: blocked (or completed with an open question when files
      were written), so never evictable until answered.
    - Evictable: completed, no open questions, a later task exists, and (unless
      `residual_check` is off) no later live task mentions any of its refs: files,
      paths, URLs, art_ ids, identifiers. Tasks are judged newest first, so a task
      whose only later users are themselves evicted is released too. An evictable
      task whose eviction is still pending (batch protection, cost gate) goes back
      to completed when a later live task turns out to share its refs.
    """

    residual_check: bool = True

    def __init__(self, *, residual_check: bool | None = None) -> None:
        if residual_check is not None:
            self.residual_check = residual_check

    def estimate(self, view: EstimatorView) -> dict[str, Any]:
        states: dict[str, _TaskState] = {}
        for s in view.task_summaries:
            states[s["taskId"]] = _TaskState(
                s["taskId"],
                s["title"],
                s["objective"],
                s["lifecycle"],
                s["firstTurnSeq"],
                s["lastTurnSeq"],
                set(s["refs"]),
                list(s["completionEvidence"]),
                list(s["unresolvedQuestions"]),
                evicted=bool(s.get("evicted")),
            )
        current = max(states.values(), key=lambda t: t.last, default=None)
        if current is not None and current.lifecycle == "evictable":
            current = None
        for rec in view.new_turns:
            current = self._assign(rec, current, states)
        self._release(states)
        updates = [self._update(st) for st in states.values() if st.touched]
        return {"baseVersion": view.base_version, "taskUpdates": updates}

    def _assign(
        self, rec: TurnRecord, current: _TaskState | None, states: dict[str, _TaskState]
    ) -> _TaskState:
        # A short reply to the assistant's open question is its answer, whatever its words.
        answer = current is not None and bool(current.questions) and len(rec.user.split()) <= SHORT_WORDS
        starts_new = current is None or (
            rec.opens_with_user
            and not answer
            and departs_from(rec.user, f"{current.title}\n{current.objective}")
        )
        if starts_new:
            task_id = "task_" + rec.turn_id.removeprefix("t_")
            text = rec.user or rec.assistant
            current = _TaskState(
                task_id, _title(text), excerpt(text, 200), "active", rec.seq, rec.seq, set(), [], [], new=True
            )
            states[task_id] = current
        assert current is not None
        current.touched = True
        current.new_turns.append(rec.turn_id)
        current.last = rec.seq
        current.refs.update(rec.refs)
        if rec.opens_with_user:
            current.questions = []  # the user spoke: earlier questions are answered or moot
        for path in rec.wrote:
            ev = f"wrote {path}"
            if ev not in current.evidence:
                current.evidence.append(ev)
        if not rec.final:
            current.lifecycle = "active"
        elif rec.question:
            current.questions = [rec.question]
            current.lifecycle = "completed" if current.evidence else "blocked"
        else:
            ev = f"final answer: {excerpt(rec.assistant, 160)}"
            if ev not in current.evidence:
                current.evidence.append(ev)
            current.lifecycle = "completed"
        return current

    def _release(self, states: dict[str, _TaskState]) -> None:
        ordered = sorted(states.values(), key=lambda t: t.last, reverse=True)
        for st in ordered:
            later = [o for o in ordered if o is not st and o.last > st.last]
            shared: set[str] = set()
            if self.residual_check:
                for o in later:
                    if o.lifecycle != "evictable":
                        shared |= st.refs & o.refs
            if st.lifecycle == "evictable" and not st.evicted and shared:
                st.lifecycle = "completed"  # reprieve: later work needs it after all
                st.touched = True
                continue
            if st.lifecycle != "completed" or st.questions or not st.evidence or not later:
                continue
            if self.residual_check:
                if shared:
                    continue
                st.reason = "finished; later tasks use none of its files, paths or identifiers"
            else:
                st.reason = "finished and another task has taken over"
            st.lifecycle = "evictable"
            st.touched = True

    @staticmethod
    def _update(st: _TaskState) -> dict[str, Any]:
        upd: dict[str, Any] = {"taskId": st.task_id, "objective": st.objective, "lifecycle": st.lifecycle}
        if st.new:
            upd["title"] = st.title
        if st.new_turns:
            upd["coveredTurnAbsIds"] = list(st.new_turns)
        if st.evidence:
            upd["completionEvidence"] = list(st.evidence)
        if st.new_turns or st.new:
            upd["unresolvedQuestions"] = list(st.questions)
        if st.lifecycle == "evictable":
            upd["evictableReason"] = st.reason
        return upd


class ImmediateEstimator(OfflineEstimator):
    """The paper's ablation: evict a task as soon as it is completed and another has
    taken over, without the residual-utility check. For benchmarks only."""

    residual_check = False


# ---------------------------------------------------------------------------
# Model-based estimator.
# ---------------------------------------------------------------------------
class EstimatorReplyError(ValueError):
    """The model's reply is not a valid delta; the message is sent back for repair."""


_ALTERNATE_NAMES = {
    "status": "lifecycle",
    "description": "objective",
    "id": "taskId",
    "task_id": "taskId",
    "turns": "coveredTurnAbsIds",
    "evidence": "completionEvidence",
    "questions": "unresolvedQuestions",
}


def _extract_json_object(text: str) -> Any:
    """The first JSON object in a reply, tolerating think blocks and code fences."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    start = text.find("{")
    if start < 0:
        raise EstimatorReplyError("the reply contains no JSON object")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise EstimatorReplyError(f"the reply is not valid JSON: {exc}") from None
    return obj


def parse_delta(text: str, view: EstimatorView) -> dict[str, Any]:
    """Strictly parse and validate a model reply against the schema and the view."""
    obj = _extract_json_object(text)
    if not isinstance(obj, dict):
        raise EstimatorReplyError("the reply must be a JSON object")
    extra = set(obj) - {"baseVersion", "taskUpdates"}
    if extra:
        raise EstimatorReplyError(f"unknown top-level field(s): {', '.join(sorted(extra))}")
    base = obj.get("baseVersion")
    if not isinstance(base, int) or isinstance(base, bool):
        raise EstimatorReplyError("baseVersion must be an integer")
    if base != view.base_version:
        raise EstimatorReplyError(f"baseVersion must be {view.base_version}, copied from the input")
    updates = obj.get("taskUpdates")
    if not isinstance(updates, list):
        raise EstimatorReplyError("taskUpdates must be a list")
    known_turns = view.known_turn_ids
    known_tasks = view.task_ids
    for n, upd in enumerate(updates):
        where = f"taskUpdates[{n}]"
        if not isinstance(upd, dict):
            raise EstimatorReplyError(f"{where} must be an object")
        for key in upd:
            if key not in UPDATE_FIELDS:
                hint = f" (use {_ALTERNATE_NAMES[key]!r})" if key in _ALTERNATE_NAMES else ""
                raise EstimatorReplyError(f"{where}: unknown field {key!r}{hint}")
        if not isinstance(upd.get("taskId"), str) or not upd["taskId"].strip():
            raise EstimatorReplyError(f"{where}: taskId must be a non-empty string")
        if not isinstance(upd.get("objective"), str):
            raise EstimatorReplyError(f"{where}: objective must be a string")
        if upd.get("lifecycle") not in LIFECYCLES:
            raise EstimatorReplyError(f"{where}: lifecycle must be one of {', '.join(LIFECYCLES)}")
        for key in ("title", "currentSubgoal", "evictableReason"):
            if key in upd and not isinstance(upd[key], str):
                raise EstimatorReplyError(f"{where}: {key} must be a string")
        for key in ("coveredTurnAbsIds", "completionEvidence", "unresolvedQuestions"):
            if key in upd and not (isinstance(upd[key], list) and all(isinstance(v, str) for v in upd[key])):
                raise EstimatorReplyError(f"{where}: {key} must be a list of strings")
        unknown = [t for t in upd.get("coveredTurnAbsIds", []) if t not in known_turns]
        if unknown:
            raise EstimatorReplyError(f"{where}: unknown turn id(s) {', '.join(unknown[:5])}")
        if upd["taskId"] not in known_tasks and not upd.get("coveredTurnAbsIds"):
            raise EstimatorReplyError(
                f"{where}: unknown taskId {upd['taskId']!r}; a new task needs coveredTurnAbsIds"
            )
    return {"baseVersion": base, "taskUpdates": updates}


class LLMEstimator:
    """A task-state estimator over any OpenAI-compatible chat endpoint.

    Configuration: arguments, else `TOKENPILOT_ESTIMATOR_MODEL`,
    `TOKENPILOT_ESTIMATOR_BASE_URL`, `TOKENPILOT_ESTIMATOR_API_KEY` (then
    `OPENAI_API_KEY`). Each call is bounded by `timeout_s` (the repair retry gets
    its own). Any failure returns the empty delta and is logged; `last_error` says
    why (per thread, None after a success), `failures` counts them. One instance
    may serve many sessions at once.
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30,
        client: Any = None,
        *,
        immediate: bool = False,
        max_tokens: int = 2048,
    ) -> None:
        self.model = model or os.environ.get("TOKENPILOT_ESTIMATOR_MODEL", "")
        if not self.model:
            from .errors import ConfigError

            raise ConfigError("LLMEstimator needs a model (argument or TOKENPILOT_ESTIMATOR_MODEL)")
        self.base_url = base_url or os.environ.get("TOKENPILOT_ESTIMATOR_BASE_URL") or None
        self.timeout_s = float(timeout_s)
        self.system_prompt = IMMEDIATE_SYSTEM_PROMPT if immediate else SYSTEM_PROMPT
        self.max_tokens = max_tokens
        self.failures = 0
        self._local = threading.local()  # one instance may serve many sessions' threads
        self._count_lock = threading.Lock()
        if client is None:
            import openai

            key = (
                api_key
                or os.environ.get("TOKENPILOT_ESTIMATOR_API_KEY")
                or os.environ.get("OPENAI_API_KEY")
                or "not-needed"  # local servers (vLLM, llama.cpp) ignore the key
            )
            client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout_s, max_retries=0)
        self._client = client

    @property
    def last_error(self) -> str | None:
        """Why this thread's latest `estimate` failed; None after a success."""
        return getattr(self._local, "error", None)

    def _ask(self, messages: list[dict[str, str]]) -> str:
        resp = self._client.chat.completions.create(
            model=self.model,
            messages=messages,
            temperature=0,
            max_tokens=self.max_tokens,
            timeout=self.timeout_s,
        )
        content = resp.choices[0].message.content if resp.choices else None
        return content or ""

    def estimate(self, view: EstimatorView) -> dict[str, Any]:
        user = json.dumps(view.to_prompt_dict(), ensure_ascii=False, separators=(",", ":"))
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]
        try:
            reply = self._ask(messages)
            try:
                delta = parse_delta(reply, view)
            except EstimatorReplyError as first:
                log.info("tokenpilot: estimator reply invalid (%s); asking once for a repair", first)
                messages += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": REPAIR_PROMPT.format(error=first)},
                ]
                delta = parse_delta(self._ask(messages), view)
        except Exception as exc:  # transport, timeout, HTTP status, bad reply: all "no change"
            self._local.error = f"{type(exc).__name__}: {exc}"
            with self._count_lock:
                self.failures += 1
            log.warning("tokenpilot: estimator failed, keeping the registry as is: %s", self._local.error)
            return empty_delta(view.base_version)
        self._local.error = None
        return delta


def records_for(
    messages: Sequence[Mapping[str, Any]], turns: Iterable[Turn], first_seq: int = 0
) -> list[TurnRecord]:
    """Records of consecutive turns, numbered from `first_seq`."""
    return [turn_record(messages, t, first_seq + n) for n, t in enumerate(turns)]
