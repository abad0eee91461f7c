"""Small builders shared by the lifecycle tests: OpenAI-format sessions and an in-memory archive."""

from __future__ import annotations

import json

from tokenpilot._canonical import artifact_id_for


class Session:
    """Builds an OpenAI-format history; `points` are where the agent calls the model."""

    def __init__(self) -> None:
        self.msgs: list[dict] = [{"role": "system", "content": "You are a helpful agent."}]
        self.points: list[int] = []
        self.k = 0

    def user(self, text: str) -> Session:
        self.msgs.append({"role": "user", "content": text})
        self.points.append(len(self.msgs))
        return self

    def call(self, name: str, args: dict, result: str, text: str | None = None) -> Session:
        self.k += 1
        cid = f"call_{self.k}"
        fn = {"name": name, "arguments": json.dumps(args)}
        self.msgs.append(
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [{"id": cid, "type": "function", "function": fn}],
            }
        )
        self.msgs.append({"role": "tool", "tool_call_id": cid, "content": result})
        self.points.append(len(self.msgs))
        return self

    def final(self, text: str) -> Session:
        self.msgs.append({"role": "assistant", "content": text})
        return self


class DictArchive:
    """`archive(text) -> artifact_id` kept in a dict, for planners that store evicted segments."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        aid = artifact_id_for(text)
        self.data[aid] = text
        return aid


def claude_code_assistant(
    mid: str, block: dict, *, read: int, uuid: str, session: str, timestamp: str
) -> dict:
    """A Claude Code assistant line (one content block of API call `mid`), whose usage
    is 3 new tokens, 100 written to the 5-minute cache and `read` read from it."""
    usage = {
        "input_tokens": 3,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": read,
        "output_tokens": 5,
        "cache_creation": {"ephemeral_5m_input_tokens": 100},
    }
    return {
        "type": "assistant",
        "uuid": uuid,
        "sessionId": session,
        "timestamp": timestamp,
        "message": {
            "id": mid,
            "model": "claude-opus-4-6",
            "role": "assistant",
            "content": [block],
            "usage": usage,
        },
    }
