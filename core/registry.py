"""The task registry: which task owns which turns, and where each task is in its life.

Estimators propose *semantic deltas* (the paper's schema); the registry is the only
place that decides what holds. It applies the valid parts of a delta, rejects the
rest with a reason (logged and reported), and never lets a task become evictable
without completion evidence, with open questions, or while the session is still on
it (invariant I6). Each applied delta bumps `version`; a delta computed against an
older version is rebased when it only touches tasks unchanged since then, and
dropped otherwise, so a slow background estimator can never overwrite newer state.

Turn ownership only grows: a turn may be covered by several tasks (a turn that
closes one request and opens the next), and it stays in the view while any of its
owners is live. A turn owned by an evictable task cannot be claimed by another
task (its content is gone from the view); the owner itself takes later turns only
by being resumed (evictable -> active/blocked/completed with a later turn).
evictable -> completed without a new turn is a reprieve: later work turned out to
need the task before its eviction was carried out. Evictions already carried out
stay (the lifecycle's plan is cumulative), so a reprieve only stops pending ones.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger("tokenpilot")

LifecycleState = Literal["active", "blocked", "completed", "evictable"]
LIFECYCLES: tuple[str, ...] = ("active", "blocked", "completed", "evictable")
LIVE: frozenset[str] = frozenset({"active", "blocked", "completed"})

# The delta schema's update fields (camelCase, as estimators write them).
UPDATE_FIELDS: frozenset[str] = frozenset(
    {
        "taskId",
        "title",
        "objective",
        "lifecycle",
        "coveredTurnAbsIds",
        "completionEvidence",
        "unresolvedQuestions",
        "currentSubgoal",
        "evictableReason",
    }
)
_TEXT_FIELDS = {
    "title": "title",
    "objective": "objective",
    "currentSubgoal": "current_subgoal",
    "evictableReason": "evictable_reason",
}
_LIST_FIELDS = ("coveredTurnAbsIds", "completionEvidence", "unresolvedQuestions")


@dataclass(slots=True)
class Task:
    """One user-level objective and the turns that served it."""

    task_id: str
    title: str
    objective: str
    lifecycle: str = "active"
    turn_ids: list[str] = field(default_factory=list)
    completion_evidence: list[str] = field(default_factory=list)
    unresolved_questions: list[str] = field(default_factory=list)
    current_subgoal: str = ""
    evictable_reason: str = ""

    @property
    def live(self) -> bool:
        return self.lifecycle in LIVE

    def to_dict(self) -> dict[str, Any]:
        """The task in the delta schema's field names (what estimators read)."""
        return {
            "taskId": self.task_id,
            "title": self.title,
            "objective": self.objective,
            "lifecycle": self.lifecycle,
            "coveredTurnAbsIds": list(self.turn_ids),
            "completionEvidence": list(self.completion_evidence),
            "unresolvedQuestions": list(self.unresolved_questions),
            "currentSubgoal": self.current_subgoal,
            "evictableReason": self.evictable_reason,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Task:
        lifecycle = str(d.get("lifecycle", "active"))
        if lifecycle not in LIFECYCLES:
            raise ValueError(f"task {d.get('taskId')!r}: unknown lifecycle {lifecycle!r}")
        return cls(
            task_id=str(d["taskId"]),
            title=str(d.get("title", "")),
            objective=str(d.get("objective", "")),
            lifecycle=lifecycle,
            turn_ids=[str(t) for t in d.get("coveredTurnAbsIds", [])],
            completion_evidence=[str(e) for e in d.get("completionEvidence", [])],
            unresolved_questions=[str(q) for q in d.get("unresolvedQuestions", [])],
            current_subgoal=str(d.get("currentSubgoal", "")),
            evictable_reason=str(d.get("evictableReason", "")),
        )


@dataclass(frozen=True, slots=True)
class Rejection:
    """One part of a delta that was not applied, and why."""

    task_id: str
    part: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"taskId": self.task_id, "part": self.part, "reason": self.reason}


@dataclass(slots=True)
class ApplyReport:
    """What `TaskRegistry.apply` did with one delta."""

    base_version: int | None
    version_before: int
    version_after: int
    rebased: bool = False
    dropped: bool = False
    drop_reason: str = ""
    applied: list[str] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    changed_tasks: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.version_after != self.version_before


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


class TaskRegistry:
    """Tasks, turn order and versions of one session. Thread-safe."""

    def __init__(self) -> None:
        self.version = 0
        self._tasks: dict[str, Task] = {}  # insertion order = creation order
        self._changed: dict[str, int] = {}  # task id -> version that last changed it
        self._turns: list[str] = []
        self._pos: dict[str, int] = {}
        self._lock = threading.RLock()

    # -- reading -------------------------------------------------------------
    @property
    def tasks(self) -> list[Task]:
        with self._lock:
            return list(self._tasks.values())

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    @property
    def turn_ids(self) -> list[str]:
        return list(self._turns)

    def turn_position(self, turn_id: str) -> int | None:
        return self._pos.get(turn_id)

    def turn_owners(self) -> dict[str, list[str]]:
        """turn id -> ids of the tasks that cover it (usually one)."""
        with self._lock:
            owners: dict[str, list[str]] = {}
            for task in self._tasks.values():
                for tid in task.turn_ids:
                    owners.setdefault(tid, []).append(task.task_id)
            return owners

    def last_turn_position(self, task: Task) -> int:
        return max((self._pos.get(t, -1) for t in task.turn_ids), default=-1)

    # -- turns ---------------------------------------------------------------
    def note_turns(self, turn_ids: Iterable[str]) -> None:
        """Record turns (in history order) so deltas may refer to them."""
        with self._lock:
            for tid in turn_ids:
                if tid not in self._pos:
                    self._pos[tid] = len(self._turns)
                    self._turns.append(tid)

    # -- applying deltas -----------------------------------------------------
    def apply(self, delta: Any) -> ApplyReport:
        """Apply the valid parts of a semantic delta; report (and log) the rest."""
        with self._lock:
            return self._apply(delta)

    def _apply(self, delta: Any) -> ApplyReport:
        report = ApplyReport(None, self.version, self.version)

        def drop(reason: str) -> ApplyReport:
            report.dropped = True
            report.drop_reason = reason
            log.warning("tokenpilot: estimator delta dropped: %s", reason)
            return report

        def reject(task_id: str, part: str, reason: str) -> None:
            report.rejected.append(Rejection(task_id, part, reason))
            log.info("tokenpilot: rejected %s of task %r: %s", part, task_id, reason)

        if not isinstance(delta, Mapping):
            return drop(f"delta is {type(delta).__name__}, not an object")
        base = delta.get("baseVersion")
        if not isinstance(base, int) or isinstance(base, bool):
            return drop("baseVersion missing or not an integer")
        report.base_version = base
        updates = delta.get("taskUpdates")
        if not isinstance(updates, list):
            return drop("taskUpdates missing or not a list")
        for key in delta:
            if key not in ("baseVersion", "taskUpdates"):
                reject("", key, "unknown top-level field")
        if base > self.version:
            return drop(f"baseVersion {base} is newer than the registry (version {self.version})")

        # Shape: keep well-formed updates, one per task.
        clean: list[dict[str, Any]] = []
        seen: set[str] = set()
        for n, raw in enumerate(updates):
            if not isinstance(raw, Mapping):
                reject("", f"taskUpdates[{n}]", "not an object")
                continue
            task_id = raw.get("taskId")
            if not isinstance(task_id, str) or not task_id.strip():
                reject("", f"taskUpdates[{n}]", "taskId missing or not a non-empty string")
                continue
            if task_id in seen:
                reject(task_id, "update", "second update for the same task in one delta")
                continue
            seen.add(task_id)
            upd: dict[str, Any] = {"taskId": task_id}
            for key, value in raw.items():
                if key == "taskId":
                    continue
                if key not in UPDATE_FIELDS:
                    reject(task_id, key, "unknown field")
                elif key == "lifecycle" and value not in LIFECYCLES:
                    reject(task_id, key, f"lifecycle must be one of {', '.join(LIFECYCLES)}")
                elif key in _TEXT_FIELDS and not isinstance(value, str):
                    reject(task_id, key, "must be a string")
                elif key in _LIST_FIELDS and not _is_str_list(value):
                    reject(task_id, key, "must be a list of strings")
                else:
                    upd[key] = value
            clean.append(upd)

        if base < self.version:
            for upd in clean:
                changed_at = self._changed.get(upd["taskId"])
                if changed_at is not None and changed_at > base:
                    return drop(
                        f"task {upd['taskId']!r} changed at version {changed_at}, after baseVersion {base}"
                    )
            report.rebased = True

        changed: dict[str, None] = {}
        resumed: set[str] = set()
        fresh_evidence: set[str] = set()
        owners = self.turn_owners()

        # Phase 1: create tasks, assign turns, merge fields.
        for upd in clean:
            task_id = upd["taskId"]
            task = self._tasks.get(task_id)
            covered: list[str] = []
            for tid in upd.get("coveredTurnAbsIds", []):
                if tid not in self._pos:
                    reject(task_id, f"turn {tid}", "unknown turn id")
                    continue
                gone = [o for o in owners.get(tid, []) if o != task_id and not self._tasks[o].live]
                if gone:
                    reject(task_id, f"turn {tid}", f"turn belongs to evictable task {gone[0]!r}")
                    continue
                if task is not None and tid in task.turn_ids:
                    continue
                covered.append(tid)
            if task is None:
                if not covered:
                    reject(task_id, "update", "unknown task; creating one needs coveredTurnAbsIds")
                    continue
                title = upd.get("title") or upd.get("objective") or task_id
                task = Task(task_id, title[:120], upd.get("objective", title))
                self._tasks[task_id] = task
                changed[task_id] = None
                report.applied.append(f"created task {task_id}")
            elif covered and task.lifecycle == "evictable":
                last = self.last_turn_position(task)
                later = [t for t in covered if self._pos[t] > last]
                for tid in covered:
                    if tid not in later:
                        reject(
                            task_id, f"turn {tid}", "an evictable task only takes later turns (resumption)"
                        )
                covered = later
                if covered:
                    resumed.add(task_id)
            if covered:
                task.turn_ids = sorted(set(task.turn_ids) | set(covered), key=self._pos.__getitem__)
                for tid in covered:
                    owners.setdefault(tid, []).append(task_id)
                changed[task_id] = None
                report.applied.append(f"task {task_id} covers {len(covered)} more turn(s)")
            for key, attr in _TEXT_FIELDS.items():
                if key in upd and upd[key] != getattr(task, attr):
                    if key == "objective" and not upd[key].strip():
                        continue
                    setattr(task, attr, upd[key])
                    changed[task_id] = None
            new_ev = [
                e
                for e in upd.get("completionEvidence", [])
                if e.strip() and e not in task.completion_evidence
            ]
            if new_ev:
                task.completion_evidence.extend(new_ev)
                changed[task_id] = None
            if upd.get("completionEvidence"):
                fresh_evidence.add(task_id)
            if "unresolvedQuestions" in upd:
                questions = [q for q in upd["unresolvedQuestions"] if q.strip()]
                if questions != task.unresolved_questions:
                    task.unresolved_questions = questions
                    changed[task_id] = None

        # Phase 2: lifecycle transitions, evictions last so they see the whole delta.
        order = sorted(
            (u for u in clean if u["taskId"] in self._tasks and "lifecycle" in u),
            key=lambda u: u["lifecycle"] == "evictable",
        )
        for upd in order:
            task = self._tasks[upd["taskId"]]
            target = upd["lifecycle"]
            why = self._transition_problem(
                task, target, upd["taskId"] in resumed, upd["taskId"] in fresh_evidence
            )
            if why:
                reject(task.task_id, f"lifecycle {task.lifecycle}->{target}", why)
                if task.task_id in resumed and task.lifecycle == "evictable":
                    task.lifecycle = "active"  # it took a later turn: it is live again
                    changed[task.task_id] = None
                continue
            if target != task.lifecycle:
                report.applied.append(f"task {task.task_id}: {task.lifecycle} -> {target}")
                task.lifecycle = target
                changed[task.task_id] = None
        for task_id in resumed:
            task = self._tasks[task_id]
            if task.lifecycle == "evictable":
                task.lifecycle = "active"
                report.applied.append(f"task {task_id}: resumed")
                changed[task_id] = None

        if changed:
            self.version += 1
            for task_id in changed:
                self._changed[task_id] = self.version
        report.version_after = self.version
        report.changed_tasks = list(changed)
        return report

    def _transition_problem(self, task: Task, target: str, resumed: bool, fresh_evidence: bool) -> str:
        """Why `task` may not move to `target` now ('' when it may)."""
        current = task.lifecycle
        if current == "evictable" and target in ("active", "blocked") and not resumed:
            return "an evictable task becomes active again only when a later turn is assigned to it"
        if current == "evictable" and target == "evictable" and resumed:
            return "a task that just took a later turn is not evictable"
        if target == "completed" and not task.completion_evidence:
            return "completed needs completion evidence"
        if target == "evictable" and target != current:
            if not task.completion_evidence:
                return "evictable needs completion evidence"
            if current in ("active", "blocked") and not fresh_evidence:
                return f"an {current} task becomes evictable only with completion evidence in the same update"
            if task.unresolved_questions:
                return "evictable needs no unresolved questions"
            if not self.moved_on(task):
                return "the session has not moved on from this task"
        return ""

    def moved_on(self, task: Task) -> bool:
        """Another task owns a later turn, or a task newer than this one exists."""
        last = self.last_turn_position(task)
        newer = False
        for other in self._tasks.values():
            if other is task:
                newer = True
                continue
            if newer or self.last_turn_position(other) > last:
                return True
        return False

    # -- persistence ---------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state; `from_dict` restores an identical registry."""
        with self._lock:
            return {
                "version": self.version,
                "turns": list(self._turns),
                "tasks": [t.to_dict() for t in self._tasks.values()],
                "changed": {k: v for k, v in self._changed.items()},
            }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskRegistry:
        reg = cls()
        reg.version = int(d.get("version", 0))
        reg.note_turns(str(t) for t in d.get("turns", []))
        for td in d.get("tasks", []):
            task = Task.from_dict(td)
            reg._tasks[task.task_id] = task
        reg._changed = {str(k): int(v) for k, v in dict(d.get("changed", {})).items()}
        return reg
