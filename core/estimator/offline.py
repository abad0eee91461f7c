"""The offline estimator: deterministic heuristics for the paper's task lifecycle, no
model call (the default), and its "immediate" ablation for benchmarks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .refs import excerpt
from .view import EstimatorView, TurnRecord

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
