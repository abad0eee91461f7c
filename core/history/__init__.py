"""A session's history kept in step with the caller's (`sync`): which messages are new, how
a resent one is recognised (`fingerprint`, `raw_memo`), what is kept of each (`session`),
the system prompt's split (`system_prompt`), `prepare`'s take-in stage (`take`), rendering
the history for one call (`render`) and the session's state as JSON (`session_state`).

Imports the foundation, `config`, `messages`, `ingest` and `store`.
"""

from __future__ import annotations

from .._room import front_door

OFFERS = {
    "History": "sync",
    "Session": "session",
    "SystemPrompts": "system_prompt",
    "take_in": "take",
    "Taken": "take",
    "render_call": "render",
    "Rendered": "render",
    "render_history": "render",
    "first_difference": "render",
    "break_cause": "render",
    "session_to_dict": "session_state",
    "load_session": "session_state",
}
__all__ = sorted(OFFERS)
__getattr__ = front_door(__name__, OFFERS, old_face="sync")
