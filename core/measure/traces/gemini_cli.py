"""Gemini CLI saved chats: `~/.gemini/tmp/<project>/chats/session-*.json` (and `.jsonl`).

One JSON document per session: `{"sessionId", "projectHash", "startTime", "messages": [...]}`;
Gemini CLI 0.61 writes the same document as JSON lines instead (`from_lines`): a header,
then each message as it is written (a message written again, by `id`, replaces the
earlier one: a reply gets its `toolCalls` once they ran) and `{"$set": {...}}` updates
of the document's keys. It also writes each tool result as a `user` message of
`functionResponse` parts, which its call's `result` already holds: read once.
A message is `{"type": "user" | "gemini" | "info" | "error", "content", ...}`. Each
`gemini` message is one model call: its `tokens {input, output, cached, thoughts, tool,
total}` are that call's `usageMetadata` (`input` is `promptTokenCount`, which includes the
implicit-cache hit `cached`). The tool calls a reply issued are stored on that reply, each
with its own `result` (a list of Gemini parts, usually one `functionResponse`); the next
`gemini` message is the call that saw them. `info` and `error` lines are the CLI's own
notices and never reach the model. The CLI stores neither its system prompt nor its tool
schemas, so the hidden prefix is estimated from the first call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .build import Builder, called_tools, message, parse_time, tool_call
from .model import Session, Usage

FMT = "gemini_cli"
_TYPES = frozenset({"user", "gemini", "info", "error"})


def looks_like(obj: dict[str, Any]) -> bool:
    """A Gemini CLI session: a session id and messages typed user / gemini / info / error."""
    messages = obj.get("messages")
    if "sessionId" not in obj or not isinstance(messages, list) or not messages:
        return False
    return all(isinstance(m, dict) and m.get("type") in _TYPES for m in messages) and any(
        m.get("type") == "gemini" for m in messages
    )


def looks_like_lines(dicts: list[dict[str, Any]]) -> bool:
    """Gemini CLI's JSON lines: a header with a session id, then typed messages or `$set`s."""
    head = dicts[0]
    if "sessionId" not in head or "type" in head:
        return False
    rest = dicts[1:]
    return bool(rest) and all("$set" in r or "$unset" in r or r.get("type") in _TYPES for r in rest)


def from_lines(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    """The session document the lines build up, as the `.json` form holds it."""
    doc: dict[str, Any] = {k: v for k, v in dicts[0].items()}
    messages: list[dict[str, Any]] = []
    at: dict[Any, int] = {}
    for r in dicts[1:]:
        if isinstance(r.get("$set"), dict):
            for key, value in r["$set"].items():
                if key == "messages" and isinstance(value, list):
                    messages = [m for m in value if isinstance(m, dict)]
                    at = {m.get("id"): i for i, m in enumerate(messages) if m.get("id") is not None}
                else:
                    doc[key] = value
        elif "$unset" in r:
            keys = r["$unset"]
            for key in keys if isinstance(keys, (list, dict)) else [keys]:
                doc.pop(key, None)
        elif r.get("type") in _TYPES:
            rid = r.get("id")
            if rid is not None and rid in at:
                messages[at[rid]] = r
            else:
                if rid is not None:
                    at[rid] = len(messages)
                messages.append(r)
    doc["messages"] = messages
    return doc


def _unanswered(content: Any, answered: set[Any]) -> Any:
    """A user message's content less the tool results its calls already hold."""
    if not isinstance(content, list):
        return content
    return [
        p
        for p in content
        if not (isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)
                and p["functionResponse"].get("id") in answered)
    ]  # fmt: skip


def _text(content: Any) -> str:
    """A message's text: a string, or a list of Gemini parts (`{"text": …}`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        return "\n".join(
            p if isinstance(p, str) else str(p.get("text") or "")
            for p in content
            if isinstance(p, (str, dict))
        )
    return ""


def _result_text(result: Any) -> str:
    """What the model saw of one tool call: each part's response output (or error) in order."""
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    parts = result if isinstance(result, list) else [result]
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        fr = part.get("functionResponse")
        if isinstance(fr, dict):
            response = fr.get("response")
            if isinstance(response, dict) and set(response) <= {"output", "error"}:
                value = response.get("output", response.get("error"))
                texts.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
            else:
                texts.append(json.dumps(response, ensure_ascii=False))
        elif "text" in part:
            texts.append(str(part.get("text") or ""))
        elif isinstance(part.get("inlineData"), dict):
            mime = part["inlineData"].get("mimeType", "application/octet-stream")
            texts.append(f"[inline data: {mime}]")
    return "\n".join(texts)


def _usage(tokens: Any) -> Usage | None:
    """The call's usage; thoughts are billed as output. All zero (a cancelled call): none."""
    if not isinstance(tokens, dict):
        return None
    prompt = int(tokens.get("input") or 0)
    cached = min(int(tokens.get("cached") or 0), prompt)
    output = int(tokens.get("output") or 0) + int(tokens.get("thoughts") or 0)
    if prompt == 0 and output == 0:
        return None
    return Usage(prompt, cached, None, output)


def load(path: Path, data: dict[str, Any]) -> list[Session]:
    b = Builder()
    meta: dict[str, Any] = {"project_hash": data.get("projectHash"), "start_time": data.get("startTime")}
    answered: set[Any] = set()  # ids of the tool calls whose results were read
    for rec in data["messages"]:
        kind = rec.get("type")
        if kind == "user":
            content = _unanswered(rec.get("content"), answered)
            if isinstance(content, list) and not content:
                continue  # only results the calls already gave
            b.task_start(b.add(message("user", _text(content))))
        elif kind == "gemini":
            calls = [tc for tc in rec.get("toolCalls") or [] if isinstance(tc, dict)]
            out = b.add(
                message(
                    "assistant",
                    _text(rec.get("content")),
                    tool_calls=[
                        tool_call(tc.get("id"), str(tc.get("name") or ""), tc.get("args")) for tc in calls
                    ],
                )
            )
            b.call(out, _usage(rec.get("tokens")), parse_time(rec.get("timestamp")), rec.get("model"))
            for tc in calls:
                b.add(message("tool", _result_text(tc.get("result")), tool_call_id=tc.get("id")))
                answered.add(tc.get("id"))
        else:
            meta.setdefault("notices", 0)
            meta["notices"] += 1
    session_id = str(data.get("sessionId") or path.stem)
    tools = called_tools(b.messages)
    return [b.finish(session_id=session_id, source=str(path), fmt=FMT, tools=tools, meta=meta)]
