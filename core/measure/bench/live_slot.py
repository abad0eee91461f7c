"""What a llama.cpp slot sees and reuses: requests rendered as the engine gets them, and
`SlotSimulator`, which predicts the reused tokens of each one.

The engine keeps the last prompt of its one slot, so the reused tokens are the longest
common prefix with the previous request (of any session). The client sends the same
`plain_messages` the simulator renders; both take them from here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ...tokens import encoding

Message = dict[str, Any]
Tokenize = Callable[[str], Sequence[int]]
Render = Callable[[list[Message], list[dict[str, Any]]], str]


def plain_messages(messages: Sequence[Message]) -> list[Message]:
    """Messages with only system/user/assistant roles and string content, for engines whose chat
    template knows no tools: tool calls become text, tool results become user messages."""
    out: list[Message] = []
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False) if content is not None else ""
        if role == "assistant" and m.get("tool_calls"):
            calls = "\n".join(
                f"<tool_call>{tc['function']['name']} {tc['function'].get('arguments', '')}</tool_call>"
                for tc in m["tool_calls"]
            )
            content = f"{content}\n{calls}" if content else calls
        if role == "tool":
            out.append({"role": "user", "content": f"[tool result {m.get('tool_call_id', '')}]\n{content}"})
        elif role in ("system", "developer"):
            out.append({"role": "system", "content": content})
        else:
            out.append({"role": role or "user", "content": content})
    return out


def chatml(messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> str:
    """A ChatML rendering (the tool list as JSON first): what most templates send, near enough."""
    parts = [f"<|im_start|>tools\n{json.dumps(list(tools), sort_keys=True)}<|im_end|>\n"] if tools else []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, sort_keys=True)
        extra = json.dumps(m["tool_calls"], sort_keys=True) if m.get("tool_calls") else ""
        parts.append(f"<|im_start|>{m.get('role')}\n{content}{extra}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _our_tokenize(text: str) -> list[int]:
    return encoding().encode(text, disallowed_special=())


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class SlotSimulator:
    """llama.cpp's prompt cache with one slot: reuse = longest common prefix with the previous
    request, less one token when the whole prompt matches (the engine re-evaluates the last
    token to get logits). Token counts are in `tokenize`'s tokens (the engine's, when given)."""

    def __init__(self, tokenize: Tokenize | None = None, render: Render | None = None) -> None:
        self.tokenize = tokenize or _our_tokenize
        self.render = render or chatml
        self.prev: Sequence[int] = ()

    def predict(self, messages: list[Message], tools: list[dict[str, Any]]) -> tuple[int, int]:
        """(prompt tokens, reused tokens) for the next request."""
        toks = list(self.tokenize(self.render(messages, tools)))
        reuse = common_prefix(self.prev, toks)
        if reuse >= len(toks):
            reuse = max(0, len(toks) - 1)
        self.prev = toks
        return len(toks), reuse
