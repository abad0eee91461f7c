"""What a conversation is made of, and what its parts mean: the neutral message model
(OpenAI Chat Completions messages plus `tools`), the shape limits `prepare` accepts, turns,
tool-call pairing, what a tool call does to files, observations of text-action agents, and
requests that ask for a summary of everything.

Imports only the foundation (`errors`, `_canonical`). Modules: `model`, `limits`, `turns`,
`pairing`, `call_kinds`, `observations`, `compaction`.
"""

from __future__ import annotations

from .._room import front_door

OFFERS = {
    "check_message": "model",
    "check_messages": "model",
    "check_tools": "model",
    "content_text": "model",
    "parse_arguments": "model",
    "tool_name": "model",
    "from_anthropic": "model",
    "to_anthropic": "model",
    "check_request": "limits",
    "check_count": "limits",
    "check_depth": "limits",
    "nesting_exceeds": "limits",
    "Turn": "turns",
    "TurnSegmenter": "turns",
    "segment_turns": "turns",
    "tool_calls_of": "turns",
    "validate_pairing": "pairing",
    "call_kind": "call_kinds",
    "shell_command": "call_kinds",
    "is_observation": "observations",
    "OBSERVATION_TOOL": "observations",
    "is_compaction_request": "compaction",
    "COMPACTION_MARKERS": "compaction",
}
__all__ = sorted(OFFERS)
__getattr__ = front_door(__name__, OFFERS, old_face="model")
