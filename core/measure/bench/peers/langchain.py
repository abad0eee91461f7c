"""LangChain's own context middleware, driven through its real hooks.

- `ContextEditingMiddleware` + `ClearToolUsesEdit` runs through `wrap_model_call`, as
  `create_agent` calls it: each call edits a deep copy of the request, never the state,
  and counts tokens its own way (chars/4 over the messages, not the system prompt or
  tools). At its 100k default and at one tighter trigger.
- `SummarizationMiddleware` runs through `before_model`, whose update replaces the
  agent's state, so the summary and the cut persist across calls, as in a LangGraph
  agent. Its model is a deterministic offline summariser; each summary it writes is
  priced as a call of its own (`SideCall`).

LangChain decides what changes; the rest of each message keeps the bytes the agent
sent (edits are mapped back onto the original messages by position), so any cost
difference is the middleware's, not a conversion's.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ....messages.model import content_text
from ....tokens import count_tokens
from ..method import Message, Method, MethodSession, Rendered, SideCall, Stateless, split_system

SUMMARY_TRIGGER_TOKENS = 80_000  # 40% of a 200k window, as keep_last_n; the middleware has no default
SUMMARY_NAMESPACE = "langchain-summariser"
# a message in LangChain's summary prompt (get_buffer_string(format="xml")): kind, first line
_MESSAGE_START = re.compile(r'<message type="(\w+)"[^>]*>\s*([^\n<]*)')


# This module is a peer: the bench finds it by these names (`peers.__init__`), no list to edit.
METHOD_NAMES = ("langchain_clear_tool_uses", "langchain_clear_30k", "langchain_summarization")
REPORT_ORDER = 10  # where its rows go among the peers'


def missing() -> str | None:
    if importlib.util.find_spec("langchain") is None or importlib.util.find_spec("langchain_core") is None:
        return "langchain is not installed (pip install 'tokenpilot[peers]')"
    return None


def methods() -> list[Method]:
    return [
        LangChainClearToolUses(),
        LangChainClearToolUses(trigger=30_000, name="langchain_clear_30k"),
        LangChainSummarization(),
    ]


# ---------------------------------------------------------------------------
# conversion: neutral (OpenAI chat) dicts <-> LangChain messages
# ---------------------------------------------------------------------------
class _Converter:
    """LangChain messages of the agent's messages, made once per message (the same
    history is sent again on every call)."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Message, Any]] = {}

    def __call__(self, msgs: Sequence[Message]) -> list[Any]:
        from langchain_core.messages import convert_to_messages

        out = []
        for m in msgs:
            hit = self._memo.get(id(m))
            if hit is None or hit[0] is not m:
                hit = (m, convert_to_messages([_for_langchain(m)])[0])
                self._memo[id(m)] = hit  # holds `m`, so its id is not reused
            out.append(hit[1])
        return out


def _for_langchain(m: Message) -> Message:
    """The message as LangChain's OpenAI-format reader takes it (a tool result without a
    call id, which LangChain refuses, gets an empty one)."""
    if m.get("role") == "tool" and not m.get("tool_call_id"):
        return {**m, "tool_call_id": ""}
    if m.get("role") not in ("user", "assistant", "tool", "system", "developer"):
        return {"role": "user", "content": content_text(m.get("content"))}
    return m


def _mapped_back(original: Message, before: Any, after: Any) -> Message:
    """The agent's message with what the middleware changed, and nothing else."""
    calls = getattr(after, "tool_calls", None)
    same_calls = calls == getattr(before, "tool_calls", None)
    if after is before or (after.content == before.content and same_calls):
        return original  # the middleware works on a deep copy: unchanged is equal, not identical
    out = dict(original)
    if after.content != before.content:
        out["content"] = after.content
    if not same_calls and original.get("tool_calls"):
        cleared = {c.get("id") for c in calls if c.get("args") == {}}
        out["tool_calls"] = [
            {**c, "function": {**c.get("function", {}), "arguments": "{}"}} if c.get("id") in cleared else c
            for c in original["tool_calls"]
        ]
    return out


class _NoModel:
    """A model for `ModelRequest` that must never be called: the bench prices the
    recorded output instead."""

    def invoke(self, *_a: Any, **_k: Any) -> Any:
        raise AssertionError("the bench never calls the agent's model")


# ---------------------------------------------------------------------------
# ContextEditingMiddleware
# ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LangChainClearToolUses:
    """`ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger, keep)])`, LangChain's
    defaults otherwise (approximate token count, "[cleared]" placeholder)."""

    trigger: int = 100_000
    keep: int = 3
    name: str = "langchain_clear_tool_uses"
    kind: ClassVar[str] = "peer"

    def session(self, session_id: str) -> MethodSession:
        from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware

        mw = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=self.trigger, keep=self.keep)])
        return _ContextEditingSession(mw)


class _ContextEditingSession(Stateless):
    def __init__(self, middleware: Any) -> None:
        self.mw = middleware
        self.convert = _Converter()

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        from langchain.agents.middleware.types import ModelRequest, ModelResponse
        from langchain_core.messages import AIMessage, SystemMessage

        system, history = split_system(prompt)
        lc = self.convert(history)
        sent: list[Any] = []

        def handler(request: Any) -> Any:
            sent[:] = request.messages
            return ModelResponse(result=[AIMessage(content="")])

        text = "\n\n".join(content_text(m.get("content")) for m in system)
        system_message = SystemMessage(content=text) if system else None
        request = ModelRequest(model=_NoModel(), messages=lc, system_message=system_message, tools=tools)
        self.mw.wrap_model_call(request, handler)
        if len(sent) != len(history):  # ClearToolUsesEdit edits in place; anything else is a new peer
            raise RuntimeError(
                f"{type(self.mw).__name__} changed the message count: {len(history)} -> {len(sent)}"
            )
        out = [*system, *(_mapped_back(o, b, a) for o, b, a in zip(history, lc, sent))]
        return Rendered(out, tools, len(out))


# ---------------------------------------------------------------------------
# SummarizationMiddleware
# ---------------------------------------------------------------------------
def _summariser_model() -> Any:
    """A chat model that writes a deterministic extract in place of an LLM summary: the
    first line of each message LangChain's prompt lays out (`<message type="human">...`,
    300 chars each), capped at `max_chars`. It keeps every prompt it
    was sent, so the bench can price those calls."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ExtractiveSummariser(BaseChatModel):
        max_chars: int = 4000
        prompts: list = []  # pydantic copies mutable defaults per instance
        outputs: list = []

        @property
        def _llm_type(self) -> str:
            return "tokenpilot-extractive-summariser"

        def _generate(self, messages: list[Any], stop: Any = None, **_: Any) -> ChatResult:
            text = "\n".join(content_text(m.content) for m in messages)
            self.prompts.append(text)
            lines = [
                f"{kind}: {' '.join(first.split())[:300]}"
                for kind, first in _MESSAGE_START.findall(text)
                if first.strip()
            ]
            summary = "\n".join(lines)[: self.max_chars] or "Nothing to summarise."
            self.outputs.append(summary)
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=summary))])

    return ExtractiveSummariser()


@dataclass(frozen=True, slots=True)
class LangChainSummarization:
    """`SummarizationMiddleware(model, trigger=("tokens", trigger))`, LangChain's defaults
    otherwise (keep the last 20 messages, summarise at most 4,000 tokens of the rest)."""

    trigger: int = SUMMARY_TRIGGER_TOKENS
    name: str = "langchain_summarization"
    kind: ClassVar[str] = "peer"
    keep_messages: int = field(default=20)

    def session(self, session_id: str) -> MethodSession:
        from langchain.agents.middleware import SummarizationMiddleware

        model = _summariser_model()
        mw = SummarizationMiddleware(
            model=model, trigger=("tokens", self.trigger), keep=("messages", self.keep_messages)
        )
        return _SummarizationSession(mw, model)


class _SummarizationSession(Stateless):
    """The agent's state as LangGraph would hold it: messages appended as the recorded
    agent produced them, replaced by the middleware's update when it summarises."""

    def __init__(self, middleware: Any, model: Any) -> None:
        self.mw = middleware
        self.model = model
        self.convert = _Converter()
        self.state: list[Any] = []  # LangChain messages, as the middleware sees them
        self.sent: list[Message] = []  # the same messages as the agent's dicts
        self.consumed: list[Message] = []  # the recorded history the state was built from

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        from langchain_core.messages import RemoveMessage

        system, history = split_system(prompt)
        n = len(self.consumed)
        if n > len(history) or any(a is not b and a != b for a, b in zip(history[:n], self.consumed)):
            self.state, self.sent, self.consumed, n = [], [], [], 0  # the agent restarted its history
        new = history[n:]
        self.consumed.extend(new)
        self.state.extend(self.convert(new))
        self.sent.extend(new)
        asked = len(self.model.prompts)
        update = self.mw.before_model({"messages": self.state}, None)
        side: tuple[SideCall, ...] = ()
        if update is not None:
            head, *rest = update["messages"]
            assert isinstance(head, RemoveMessage)
            summary, preserved = rest[0], rest[1:]
            keep_from = len(self.state) - len(preserved)
            assert all(a is b for a, b in zip(preserved, self.state[keep_from:]))
            self.state = [summary, *preserved]
            self.sent = [{"role": "user", "content": content_text(summary.content)}, *self.sent[keep_from:]]
            side = tuple(
                SideCall(({"role": "user", "content": p},), count_tokens(o), SUMMARY_NAMESPACE)
                for p, o in zip(self.model.prompts[asked:], self.model.outputs[asked:])
            )
        out = [*system, *self.sent]
        return Rendered(out, tools, len(out), side_calls=side)
