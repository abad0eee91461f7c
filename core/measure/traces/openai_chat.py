"""OpenAI Chat Completions logs: a JSON message list or `{"messages", "tools"}` object, or JSONL.

JSONL holds either one message per line, or one request per line (`{"messages",
"tools"?, "response"?|"usage"?}`, possibly wrapped as `{"t", "body": {…}}` by a
capturing proxy). Requests are stitched into one message list: a request that extends
the current thread appends to it; one that does not (a trailing volatile message
removed, a compaction) opens a new thread whose calls start there. Each request is a
call; its output is the recorded response, else the assistant message the next
request carries at that position, else an empty placeholder (counted in meta).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenpilot._canonical import canonical_json

from .build import Builder, clean_openai_message, parse_time
from .model import Session, Usage

FMT = "openai_chat"
FMT_JSONL = "openai_chat_jsonl"


def _usage(raw: Any) -> Usage | None:
    return Usage.from_openai(raw) if isinstance(raw, dict) else None


def load_messages(path: Path, raw_messages: list[Any], tools: list[Any], fmt: str) -> Session:
    """A plain conversation: every assistant message is a call over everything before it."""
    b = Builder()
    first_user = True
    for raw in raw_messages:
        if not isinstance(raw, dict):
            continue
        msg = b.add(clean_openai_message(raw))
        if msg["role"] == "assistant":
            b.call(msg, _usage(raw.get("usage")), parse_time(raw.get("timestamp")), raw.get("model"))
        elif msg["role"] == "user" and first_user:
            b.task_start(msg)
            first_user = False
    return b.finish(
        session_id=path.stem, source=str(path), fmt=fmt, tools=[t for t in tools if isinstance(t, dict)]
    )


def load(path: Path, data: Any) -> list[Session]:
    if isinstance(data, dict):
        return [load_messages(path, data.get("messages") or [], data.get("tools") or [], FMT)]
    return [load_messages(path, data, [], FMT)]


def load_jsonl(path: Path, records: list[tuple[int, Any]]) -> list[Session]:
    dicts = [r for _, r in records if isinstance(r, dict)]
    if all(isinstance(r.get("role"), str) for r in dicts):
        return [load_messages(path, dicts, [], FMT_JSONL)]
    return [_load_requests(path, dicts)]


def _response_message(req: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
    resp = req.get("response")
    if not isinstance(resp, dict):
        return None, req.get("usage")
    choice = (resp.get("choices") or [{}])[0]
    msg = choice.get("message") if isinstance(choice, dict) else None
    return (clean_openai_message(msg) if isinstance(msg, dict) else None), resp.get("usage") or req.get(
        "usage"
    )


def _load_requests(path: Path, requests: list[dict[str, Any]]) -> Session:
    b = Builder()
    keys: list[str] = []  # canonical JSON of each message in b.messages (stitching by content)
    tools: list[Any] = []
    thread = 0  # index in b.messages where the current thread starts
    pending: list[tuple[int, int, Usage | None, float | None, Any]] = []  # start, end, usage, ts, model
    outputs: dict[int, dict[str, Any]] = {}
    placeholders = 0
    for req in requests:
        body = req.get("body") if isinstance(req.get("body"), dict) else req
        msgs = [clean_openai_message(m) for m in body.get("messages") or [] if isinstance(m, dict)]
        mk = [canonical_json(m) for m in msgs]
        tools = body.get("tools") or tools
        current = keys[thread:]
        if mk[: len(current)] == current:
            for m, k in zip(msgs[len(current) :], mk[len(current) :]):
                b.add(m)
                keys.append(k)
        else:
            thread = len(keys)
            for m, k in zip(msgs, mk):
                b.add(m)
                keys.append(k)
        end = len(keys)
        out, usage = _response_message(req)
        if out is not None:
            b.add(out)
            keys.append(canonical_json(out))
            outputs[end] = out
        pending.append(
            (thread, end, _usage(usage), parse_time(req.get("t") or req.get("timestamp")), body.get("model"))
        )
    # Resolve objects before inserting placeholders: insertions shift indices.
    thread_users = {s: next((m for m in b.messages[s:] if m["role"] == "user"), None) for s, *_ in pending}
    resolved = []
    for start, end, usage, ts, model in pending:
        out = outputs.get(end)
        if out is None and end < len(b.messages) and b.messages[end]["role"] == "assistant":
            out = b.messages[end]
        resolved.append([b.messages[start] if start < len(b.messages) else None, out, end, usage, ts, model])
    made: dict[int, dict[str, Any]] = {}
    for item in sorted((r for r in resolved if r[1] is None), key=lambda r: -r[2]):
        if item[2] not in made:
            made[item[2]] = {"role": "assistant", "content": ""}
            b.messages.insert(item[2], made[item[2]])
            placeholders += 1
        item[1] = made[item[2]]
    for start_obj, out, _, usage, ts, model in resolved:
        b.call(out, usage, ts, model, start=start_obj)
    for user in thread_users.values():
        if user is not None:
            b.task_start(user)
    starts = thread_users
    meta = {"requests": len(requests), "threads": len(starts), "placeholder_outputs": placeholders}
    return b.finish(session_id=path.stem, source=str(path), fmt=FMT_JSONL, tools=tools, meta=meta)
