"""`ScriptedChatModel`: a tool-calling chat model that replays a script, for tests and demos.

Each call takes the next scripted reply (an `AIMessage`, or a function of the request
that returns one, e.g. to quote an artifact id the model was shown) and records the
request it received: messages, bound tools and call kwargs. Replies carry a simulated
`usage_metadata` whose `cache_read` is the longest common prefix with the previous
request, as an exact prefix cache would serve it (tokens counted with the core's tokenizer).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, PrivateAttr

from tokenpilot.tokens import count_tokens


@dataclass(slots=True)
class ScriptedRequest:
    """What the model was sent on one call."""

    messages: list[BaseMessage]
    tools: list[dict[str, Any]]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def openai_messages(self) -> list[dict[str, Any]]:
        return [m for m in (convert_to_openai_messages(list(self.messages)) or [])]

    def payload(self) -> str:
        """The request as a provider would serialise it: tools first, then messages."""
        return json.dumps({"tools": self.tools}, ensure_ascii=False) + json.dumps(
            self.openai_messages(), ensure_ascii=False
        )

    def text(self) -> str:
        """All message text (to find ids the model was shown)."""
        return "\n".join(str(m.content) for m in self.messages)


Reply = AIMessage | Callable[[ScriptedRequest], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """Replays `replies` in order; `requests` records every call (shared by bound copies)."""

    replies: list[Any] = Field(default_factory=list)
    requests: list[ScriptedRequest] = Field(default_factory=list)
    simulate_cache: bool = True
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Runnable:
        specs = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=specs, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request = ScriptedRequest(list(messages), list(kwargs.pop("tools", []) or []), dict(kwargs))
        with self._lock:
            n = len(self.requests)
            previous = self.requests[-1] if self.requests else None
            self.requests.append(request)
        if n >= len(self.replies):
            raise IndexError(f"ScriptedChatModel: no reply scripted for call {n + 1}")
        reply = self.replies[n]
        message = reply(request) if callable(reply) else reply
        message = _with_ids(
            message, hashlib.sha256(request.payload().encode("utf-8", "replace")).hexdigest()[:12]
        )
        if self.simulate_cache and message.usage_metadata is None:
            message.usage_metadata = _usage(request, previous, message)
        return ChatResult(generations=[ChatGeneration(message=message)])


def _with_ids(message: AIMessage, key: str) -> AIMessage:
    """Ids from the request's content: unique per call, and the same in a resumed run."""
    calls = [
        {**c, "id": c.get("id") or f"call_{key}_{i + 1}", "type": "tool_call"}
        for i, c in enumerate(message.tool_calls)
    ]
    return message.model_copy(update={"tool_calls": calls, "id": message.id or f"scripted-{key}"}, deep=True)


def _usage(request: ScriptedRequest, previous: ScriptedRequest | None, reply: AIMessage) -> Any:
    """Tokens counted as the core counts them (tiktoken), so `cache_read` never exceeds
    `input_tokens` and compares with `PrepareStats.tokens` (the request's JSON adds a little)."""
    text = request.payload()
    common = _common_prefix(previous.payload(), text) if previous is not None else 0
    prompt = count_tokens(text)
    output = max(count_tokens(str(reply.content)), 1)
    return {
        "input_tokens": prompt,
        "output_tokens": output,
        "total_tokens": prompt + output,
        "input_token_details": {"cache_read": min(count_tokens(text[:common]), prompt)},
    }


def _common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # binary search: each comparison is one C-level slice compare
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def tool_call(name: str, args: dict[str, Any], content: str = "") -> AIMessage:
    """A scripted reply that calls one tool."""
    return AIMessage(
        content=content, tool_calls=[{"name": name, "args": args, "id": None, "type": "tool_call"}]
    )


def answer(text: str) -> AIMessage:
    """A scripted final answer (no tool call)."""
    return AIMessage(content=text)
