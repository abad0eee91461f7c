"""The `recall_artifact` tool: its arguments, checked (`args`), and a recall scoped to a
session (`tool`).

Imports the foundation, `ingest`, `store` and `history`.
"""

from __future__ import annotations

from .._room import front_door

OFFERS = {
    "answer_recall_call": "tool",
    "recall_answer": "tool",
    "RecallAnswer": "tool",
    "recall_in_session": "tool",
    "resolve_session": "tool",
    "recall_arguments": "args",
}
__all__ = sorted(OFFERS)
__getattr__ = front_door(__name__, OFFERS)
