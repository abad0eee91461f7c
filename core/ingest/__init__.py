"""The ingestion gate: each new message is reduced once, by the passes a `Config` enables
(`pipeline`, over `tokenpilot.passes`), and its reduced form frozen (`gate`, `intent` for the
agent's and the user's own words); the system prompt's volatile fields become placeholders
(`stabilize`); lines a tool output shows again are pointed at (`reshown`, `reshown_moves`);
the caller's own elisions (`elision`) and outputs the store could not keep (`unstored`).

Imports the foundation, `config`, `messages` and `passes`.
"""

from __future__ import annotations

from .._room import front_door

OFFERS = {
    "ingest_tool_result": "gate",
    "ingest_assistant": "gate",
    "ingest_user": "gate",
    "IngestState": "gate",
    "Ingested": "gate",
    "ToolCallInfo": "gate",
    "Pipeline": "gate",
    "DEDUP_NOTE": "gate",
    "stabilize_text": "stabilize",
    "merge_tools": "stabilize",
    "Stabilized": "stabilize",
    "RECALL_TOOL": "stabilize",
    "RECALL_TOOL_NAME": "stabilize",
    "is_recall_tool": "stabilize",
    "MCP_SERVER_NAME": "stabilize",
    "ShownLines": "reshown",
    "HeldElisions": "elision",
    "unstored_form": "unstored",
}
__all__ = sorted(OFFERS)
__getattr__ = front_door(__name__, OFFERS, old_face="gate")
