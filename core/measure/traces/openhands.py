"""OpenHands trajectories: the event list OpenHands saves (`--save-trajectory-path`, the
GUI's download), each event an action or an observation.

What the model was sent is rebuilt from them as OpenHands' conversation memory builds it:

- a `system` action (recent versions): the system prompt, with the tools in its `args`;
- the person's `message` actions: user messages;
- the agent's actions that carry `tool_call_metadata`: the model response they came from
  (its message, tool calls and usage), one assistant message and one call per response,
  however many actions it gave (`total_calls_in_response`);
- an observation that carries `tool_call_metadata`: the result of that call;
- the agent's `message` actions without one: its words to the person (a call, no usage).

Other events (state changes, OpenHands' own recalls of repository knowledge, null
observations) were not sent as such and are left out, so the first prompts are smaller
than recorded when a repository's instructions were injected; the recorded usage says
what was sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .build import Builder, message, openai_tool_calls, parse_time
from .model import Session, Usage

FMT = "openhands"


def looks_like(events: list[Any]) -> bool:
    """An OpenHands event list: dicts with an `id`, a `source`, and an action or observation."""
    sample = [e for e in events[:20] if isinstance(e, dict)]
    return bool(sample) and all(
        "id" in e and "source" in e and ("action" in e or "observation" in e) for e in sample
    )


def _usage(response: dict[str, Any]) -> Usage | None:
    raw = response.get("usage")
    if not isinstance(raw, dict):
        return None
    model = str(response.get("model") or "")
    if "claude" in model or "anthropic" in model:  # litellm's mapping of Anthropic usage
        return Usage.from_litellm_anthropic(raw)
    return Usage.from_openai(raw)


def _text(event: dict[str, Any]) -> str:
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    content = args.get("content")
    return str(content if isinstance(content, str) else event.get("message") or "")


def load(path: Path, events: list[Any]) -> list[Session]:
    b = Builder()
    tools: list[dict[str, Any]] = []
    answered: set[str] = set()  # model responses already turned into an assistant message
    first_user = True
    for e in events:
        if not isinstance(e, dict):
            continue
        meta = e.get("tool_call_metadata") if isinstance(e.get("tool_call_metadata"), dict) else None
        action, source = e.get("action"), e.get("source")
        if action == "system":
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            tools = [t for t in args.get("tools") or [] if isinstance(t, dict)]
            b.add(message("system", _text(e)))
        elif "observation" in e:
            if meta is not None and meta.get("tool_call_id"):
                b.add(message("tool", str(e.get("content") or ""), tool_call_id=str(meta["tool_call_id"])))
        elif meta is not None and isinstance(meta.get("model_response"), dict):
            response = meta["model_response"]
            rid = str(response.get("id") or id(response))
            if rid in answered:
                continue
            answered.add(rid)
            choices = response.get("choices") or [{}]
            said = choices[0].get("message") if isinstance(choices[0], dict) else None
            said = said if isinstance(said, dict) else {}
            msg = b.add(
                message(
                    "assistant",
                    said.get("content") or "",
                    tool_calls=openai_tool_calls(said.get("tool_calls")),
                )
            )
            b.call(msg, _usage(response), parse_time(e.get("timestamp")), response.get("model"))
        elif action == "message" and source == "user":
            msg = b.add(message("user", _text(e)))
            if first_user:
                b.task_start(msg)
                first_user = False
        elif action == "message" and source == "agent":
            msg = b.add(message("assistant", _text(e)))
            b.call(msg, None, parse_time(e.get("timestamp")))
    meta_out = {"events": len(events), "responses": len(answered)}
    return [b.finish(session_id=path.stem, source=str(path), fmt=FMT, tools=tools, meta=meta_out)]
