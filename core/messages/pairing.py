"""Tool-call pairing rules that OpenAI Chat Completions and Anthropic Messages enforce.

Any edit to a message list (eviction, trimming) must leave it acceptable to both
providers (invariant I4); `validate_pairing` lists what would be rejected.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_PREAMBLE = frozenset({"system", "developer"})


def _check_call(i: int, call: Any, seen: set[str], problems: list[str]) -> str | None:
    if not isinstance(call, Mapping):
        problems.append(f"message {i}: a tool call is not an object")
        return None
    cid = call.get("id")
    if not isinstance(cid, str) or not cid:
        problems.append(f"message {i}: a tool call has no id")
        cid = None
    elif cid in seen:
        problems.append(f"message {i}: tool call id {cid!r} is used twice in the conversation")
    else:
        seen.add(cid)
    fn = call.get("function")
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn.get("name"):
        problems.append(f"message {i}: tool call {cid!r} has no function name")
        return cid
    args = fn.get("arguments")
    try:
        parsed = json.loads(args) if isinstance(args, str) else None
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        problems.append(f"message {i}: tool call {cid!r} arguments are not a JSON object string")
    return cid


def validate_pairing(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems that OpenAI or Anthropic would reject; an empty list means valid.

    Rules: every assistant tool call has a unique id, a name and JSON-object
    arguments, and exactly one result among the tool messages that immediately
    follow it (Anthropic needs the results in the very next user turn); no tool
    message answers anything else; the first message after the system preamble is
    a user message (Anthropic).
    """
    problems: list[str] = []
    seen_ids: set[str] = set()
    n = len(messages)
    first = next((m for m in messages if m.get("role") not in _PREAMBLE), None)
    if first is not None and first.get("role") != "user":
        problems.append(f"the first message after the system prompt is {first.get('role')!r}, not 'user'")
    i = 0
    while i < n:
        m = messages[i]
        role = m.get("role")
        if role not in _ROLES:
            problems.append(f"message {i}: unknown role {role!r}")
        if role == "assistant":
            calls = m.get("tool_calls")
            if calls is not None and not isinstance(calls, list):
                problems.append(f"message {i}: tool_calls is not a list")
                calls = []
            ids = [cid for c in calls or [] if (cid := _check_call(i, c, seen_ids, problems))]
            answered: set[str] = set()
            j = i + 1
            while j < n and messages[j].get("role") == "tool":
                tid = messages[j].get("tool_call_id")
                if tid not in ids:
                    problems.append(f"message {j}: tool result {tid!r} answers no call of message {i}")
                elif tid in answered:
                    problems.append(f"message {j}: second result for tool call {tid!r}")
                answered.add(tid)
                j += 1
            for cid in ids:
                if cid not in answered:
                    problems.append(f"message {i}: tool call {cid!r} has no result right after it")
            i = j
            continue
        if role == "tool":
            problems.append(
                f"message {i}: tool result {m.get('tool_call_id')!r} does not follow an assistant tool call"
            )
        i += 1
    return problems
