"""What the demo's scripted model answers, so that a newcomer sees TokenPilot at work.

It reads the request it was sent (after the proxy) and says what reached it: how many
messages, how long the last tool output was as it arrived. When that output was reduced and
carries an artifact handle, and the proxy offered `recall_artifact`, it asks for the first
lines back once, which shows a recall end to end. Deterministic: the same request, the same
answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tokenpilot._canonical import ARTIFACT_HEX_CHARS, ARTIFACT_PREFIX
from tokenpilot.ingest.stabilize import RECALL_TOOL_NAME
from tokenpilot.messages.model import content_text
from tokenpilot_proxy.demo.base import Reply, ToolCall

HANDLE = re.compile(re.escape(ARTIFACT_PREFIX) + f"[0-9a-f]{{{ARTIFACT_HEX_CHARS}}}")


def _offers_recall(body: Mapping[str, Any]) -> bool:
    for tool in body.get("tools") or []:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        if isinstance(fn, Mapping) and fn.get("name") == RECALL_TOOL_NAME:
            return True
    return False


def demo_reply(body: Mapping[str, Any]) -> Reply:
    """The demo model's answer to one chat request (the Responses API's `input` is read too)."""
    messages = [m for m in body.get("messages") or body.get("input") or [] if isinstance(m, Mapping)]
    last = messages[-1] if messages else {}
    role = last.get("role") or last.get("type") or "?"
    if role in ("tool", "function_call_output"):
        content = last.get("content", last.get("output", ""))
        text = content_text(content) if isinstance(content, (str, list)) else ""
        handle = HANDLE.search(text)
        asked = any(
            RECALL_TOOL_NAME in str(m.get("tool_calls") or m.get("name") or "") for m in messages[-3:]
        )
        if handle and _offers_recall(body) and not asked:
            args = {"artifact_id": handle.group(0), "start_line": 1, "end_line": 5}
            return Reply("", (ToolCall(RECALL_TOOL_NAME, args, id="call_demo_recall"),))
        return Reply(
            f"[demo model] {len(messages)} messages reached me; the last tool output arrived as "
            f"{len(text):,} characters"
            + (f" (reduced: the original is {handle.group(0)})." if handle else ".")
        )
    return Reply(f"[demo model] {len(messages)} messages reached me; no provider was called.")
