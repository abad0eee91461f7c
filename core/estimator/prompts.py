"""Prompt text for the model-based task-state estimator.

The system prompts are module constants, never formatted with per-call values, so
their bytes are identical on every call and the estimator's own prefix caches.
Everything that changes (the registry, the new turns) goes in the user message.
"""

from __future__ import annotations

_SCHEMA = """\
Reply with one JSON object and nothing else (no prose, no code fence). Its shape:
{"baseVersion": <integer, copied from the input>,
 "taskUpdates": [
   {"taskId": <string>,
    "title": <string, optional>,
    "objective": <string>,
    "lifecycle": "active" | "blocked" | "completed" | "evictable",
    "coveredTurnAbsIds": [<turn id>, ...]      (optional),
    "completionEvidence": [<string>, ...]      (optional),
    "unresolvedQuestions": [<string>, ...]     (optional; [] clears them),
    "currentSubgoal": <string, optional>,
    "evictableReason": <string, optional>}
 ]}
Use exactly these field names. Any other field (for example status, description,
action, span, transitions, upsertTasks) makes the whole reply invalid.
"""

SYSTEM_PROMPT = (
    """\
You track the tasks of a long-running tool-using agent session, so that the
context of finished work can be dropped from the agent's prompt once nothing
later needs it. You never talk to the agent or the user.

Input (one JSON object):
- baseVersion: the registry version your reply is based on.
- tasks: every known task: id, title, objective, lifecycle, completion evidence,
  open questions, the span of turns it owns (firstTurnSeq..lastTurnSeq), refs
  (files, paths, URLs, artifact ids and identifiers its turns mention) and
  whether its content has already been evicted.
- newTurns: turns not yet assigned, oldest first: turn id, user text, assistant
  text, tool calls, short excerpts of tool results, refs, files written.
- hints: the task that owns the newest assigned turn, and completed tasks that
  may be ready to evict.

Your reply is a delta: only the tasks you change, never a copy of the registry.

Rules:
1. Give every new turn an owner: list its id in coveredTurnAbsIds of exactly one
   task update. Use only turn ids that appear in newTurns. Never invent ids.
2. A new user request starts a new task when its objective differs from the
   current task's. A follow-up, a correction, an answer to the assistant's
   question or a request that refers back ("also ...", "now fix it") continues
   the current task. Name a new task "task_" followed by the hex part of its
   first turn id.
3. active: work is going on. blocked: the agent waits for the user or for
   something outside the session. completed: delivered (files written, final
   answer given, no tool call pending); give completionEvidence.
4. evictable means: completed with evidence, no unresolved questions, the session
   has moved on to another task, AND nothing after it still uses it. If a later
   task mentions the same files, paths, URLs, artifact ids or identifiers (see
   refs), or builds on its results, keep it completed: evicting it would force
   the agent to redo the work. When in doubt, keep it completed.
5. Never mark evictable an active or blocked task unless the same update gives
   its completionEvidence, and never the task that owns the newest turn.
6. An evictable task that the user returns to gets the new turn in
   coveredTurnAbsIds and lifecycle active.
7. Write evictableReason as one short sentence when you mark a task evictable.
8. A task that is evictable but not yet evicted ("evicted": false) goes back to
   completed if a newer turn turns out to need it. Leave evicted tasks alone
   unless the user returns to them (rule 6).

"""
    + _SCHEMA
)

IMMEDIATE_SYSTEM_PROMPT = (
    """\
You classify the tasks of a long-running tool-using agent session. You never
talk to the agent or the user. Input: baseVersion, tasks (the registry), newTurns
(turns not yet assigned, oldest first) and hints.

Your reply is a delta: only the tasks you change, never a copy of the registry.

Rules:
1. Give every new turn an owner via coveredTurnAbsIds; use only turn ids from
   newTurns. Name a new task "task_" followed by the hex part of its first turn id.
2. One task per distinct user request; a follow-up or correction continues the
   current task.
3. active: work is going on. blocked: waiting on the user or something outside.
   completed: delivered, with completionEvidence.
4. Mark a completed task evictable as soon as another task has taken over the
   session; do not judge whether later tasks still need it.

"""
    + _SCHEMA
)

REPAIR_PROMPT = """\
Your previous reply could not be used: {error}
Reply again with only the corrected JSON object, following the schema exactly."""
