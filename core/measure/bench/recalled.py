"""What an agent recalled stays in its history, as it would live.

The replay is teacher-forced: the recorded calls never asked `recall_artifact`, so a
recall the bench charges (an agent that needed something it could not see) has to be
put back into the history the method sees, where a live agent's tool result would sit:
after the prompt of the call that needed it, before that call's recorded answer. From
the next call on the method renders it like any tool output (it may evict it again),
and what it holds is visible, so the same text is not charged twice while it is shown.

A recall is one assistant message calling the tool once per artifact and one tool
result per artifact; the round trip the bench prices sends exactly these messages, so
the next call reads them from the cache.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...ingest.stabilize import RECALL_TOOL_NAME


def recall_messages(tag: str, texts: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The messages of one recall: the agent's call (one tool call per artifact id) and
    each result. `tag` makes the call ids unique in their session; `texts` is
    (artifact id, recalled text) per artifact."""
    ids = [f"call_recall_{tag}_{n}" for n in range(len(texts))]
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": RECALL_TOOL_NAME, "arguments": json.dumps({"artifact_id": aid})},
            }
            for cid, (aid, _) in zip(ids, texts, strict=True)
        ],
    }
    results = [
        {"role": "tool", "tool_call_id": cid, "content": text}
        for cid, (_, text) in zip(ids, texts, strict=True)
    ]
    return [call, *results]


@dataclass(slots=True)
class Recalls:
    """The recalls made, per method session: the call (in replay order) that made each,
    where it goes in the recording (the index of the answer it came before) and its
    messages (the same objects at every call, as an agent's history holds them)."""

    by_session: dict[str, list[tuple[int, int, list[dict[str, Any]]]]] = field(default_factory=dict)

    def add(self, session: str, call: int, before: int, messages: list[dict[str, Any]]) -> None:
        self.by_session.setdefault(session, []).append((call, before, messages))

    def count(self, session: str) -> int:
        return len(self.by_session.get(session, ()))

    def into(
        self, session: str, call: int, prompt: list[dict[str, Any]], start: int, end: int
    ) -> list[dict[str, Any]]:
        """`prompt` of call number `call` (whose last `end - start` messages are the
        recording's messages[start:end]) with every recall of the session made by an
        earlier call in place; a recall from before `start` went with the history the
        agent itself dropped."""
        made = [
            (i, n, m)
            for n, (c, i, m) in enumerate(self.by_session.get(session, ()))
            if c < call and start <= i <= end
        ]
        if not made:
            return prompt
        out = list(prompt)
        for i, _, msgs in sorted(made, key=lambda x: (x[0], x[1]), reverse=True):  # from the end
            at = len(prompt) - (end - i)
            out[at:at] = msgs
        return out
