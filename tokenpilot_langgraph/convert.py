"""LangChain messages <-> the core's wire format (OpenAI Chat Completions dicts).

The core sees OpenAI dicts; the model gets LangChain messages back. A message the
core left untouched is handed to the model as the *original* object from state, so
provider-specific fields (reasoning blocks, signatures, names) survive; only what the
core changed (reduced tool results, stubs, the stabilised system prompt, the per-call
tail) is built anew.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.utils.function_calling import convert_to_openai_tool

from tokenpilot import RECALL_TOOL_NAME
from tokenpilot._canonical import canonical_json
from tokenpilot.ingest.stabilize import RECALL_TOOL

OpenAIMessage = dict[str, Any]


def to_openai(messages: Sequence[BaseMessage]) -> list[OpenAIMessage]:
    """One OpenAI dict per LangChain message (tool calls as JSON argument strings)."""
    return [_one(m) for m in messages]


def _one(message: BaseMessage) -> OpenAIMessage:
    out = convert_to_openai_messages(message)
    return out if isinstance(out, dict) else out[0]


def prompt_messages(prompt: str | SystemMessage | None) -> list[OpenAIMessage]:
    """The agent's system prompt as leading OpenAI messages (none when absent)."""
    if prompt is None:
        return []
    if isinstance(prompt, str):
        return [{"role": "system", "content": prompt}]
    return [_one(prompt)]


def from_openai(msg: Mapping[str, Any]) -> BaseMessage:
    """A LangChain message for an OpenAI dict the core produced (stub, reduced result, ...)."""
    role = msg.get("role")
    content = msg.get("content")
    if content is None:
        content = ""
    if role in ("system", "developer"):
        extra = {"__openai_role__": "developer"} if role == "developer" else {}
        return SystemMessage(content=content, additional_kwargs=extra)
    if role == "assistant":
        calls = []
        for c in msg.get("tool_calls") or []:
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {}
            calls.append(
                {
                    "name": fn.get("name", ""),
                    "args": args if isinstance(args, dict) else {},
                    "id": c.get("id"),
                    "type": "tool_call",
                }
            )
        return AIMessage(content=content, tool_calls=calls, name=msg.get("name"))
    if role == "tool":
        return ToolMessage(content=content, tool_call_id=str(msg.get("tool_call_id")), name=msg.get("name"))
    return HumanMessage(content=content, name=msg.get("name"))


def to_langchain(
    rendered: Sequence[Mapping[str, Any]],
    originals: Sequence[BaseMessage],
    converted: Sequence[Mapping[str, Any]],
) -> list[BaseMessage]:
    """The model's view as LangChain messages; `converted[i]` is `to_openai(originals)[i]`."""
    by_key: dict[str, list[int]] = {}
    by_call: dict[str, int] = {}
    for i, d in enumerate(converted):
        by_key.setdefault(canonical_json(d), []).append(i)
        if d.get("role") == "tool":
            by_call[str(d.get("tool_call_id"))] = i
    out: list[BaseMessage] = []
    for r in rendered:
        same = by_key.get(canonical_json(r))
        if same:
            out.append(originals[same.pop(0)])
            continue
        i = by_call.get(str(r.get("tool_call_id"))) if r.get("role") == "tool" else None
        if i is not None and isinstance(originals[i], ToolMessage):
            out.append(originals[i].model_copy(update={"content": r.get("content") or ""}))
            continue
        out.append(from_openai(r))
    return out


def tool_specs(tools: Sequence[Any], *, include_recall: bool = False) -> list[dict[str, Any]]:
    """OpenAI tool dicts for the core. `include_recall`: the caller's own `recall_artifact`
    spec is kept as given; otherwise it is replaced by the core's canonical spec. Either
    way the model sees it from the first call: the graph's tool node executes it, and a
    tool added later would break the cached prefix (the core alone would add it only
    once there is something to recall)."""
    specs = [convert_to_openai_tool(t) for t in tools]
    if include_recall:
        return specs
    own = [s for s in specs if (s.get("function") or {}).get("name") != RECALL_TOOL_NAME]
    return [*own, dict(RECALL_TOOL)]
