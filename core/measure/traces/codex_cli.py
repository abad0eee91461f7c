"""Codex CLI rollout files (`~/.codex/sessions/…/rollout-*.jsonl`, written by codex-rs).

Every line is `{"timestamp", "type", "payload"}` (codex-rs `RolloutLine`/`RolloutItem`):

* `session_meta` (first line): `id`, `cli_version`, `originator`, `source`; newer CLIs
  (0.125+) record the system prompt as `base_instructions.text`, which Codex sends as the
  Responses API `instructions`: it becomes the system message at messages[0]. 0.77 records
  only `instructions`, the user instructions (AGENTS.md), which Codex sends as a user
  message that is in the history anyway: it is left out (kept as a size in `meta`), and
  the unrecorded base prompt counts towards the hidden prefix. `dynamic_tools` (app tool
  schemas) become `tools`; the built-in tools' schemas are never recorded.
* `turn_context`: settings of the next turn; its `model` names the calls that follow.
* `response_item`: the model-visible history, Responses API items, replayed in order:
  `message` (developer/user/assistant; `input_text`, `output_text`, `input_image`
  parts), `reasoning`, `function_call` (`name`, `namespace`?, `arguments` JSON string,
  `call_id`), `function_call_output` (`output`: a string, sent verbatim, which in 0.77
  is itself JSON `{"output", "metadata"}`, or a list of `input_text`/`input_image`
  items), `custom_tool_call` (`input`, e.g. apply_patch) with `custom_tool_call_output`,
  `local_shell_call`, `web_search_call` (hosted: no output item), `ghost_snapshot` and
  `compaction` (not sent / opaque, skipped).
* `event_msg`: UI and telemetry events, never sent to the model and never messages.
  `exec_command_end` holds the UI copy of a command's output, not the tool result the
  model saw (that is the `function_call_output`). `token_count` carries usage:
  `info.last_token_usage = {input_tokens (the whole prompt, cached_input_tokens
  included), cached_input_tokens, output_tokens (reasoning_output_tokens included:
  total_tokens = input + output, as `TokenUsage::blended_total` assumes),
  reasoning_output_tokens}`. It follows each response's output items; 0.77 writes it
  twice, and an `info: null` one carries only rate limits. One call per event whose
  `info` is set and whose `total_token_usage` changed from the previous one.
* `compacted` `{message, replacement_history?}`: Codex replaced the history. The new
  history is `replacement_history` when recorded, else a user message with the summary
  `message` (the initial context and recent user messages Codex re-adds are not
  recorded there); later prompts restart at its first message. A usage event with no
  output items right before it was the summarisation call: its output is the summary.
  (Neither shared rollout compacts; this follows codex-rs `compact.rs`.)

Model-output items between two usage events (or, in a rollout without usage, a run of
them up to the next input item) form one assistant message and one call, timed by its
first item. `reasoning` items are dropped (counted in meta): `encrypted_content` is
ciphertext whose size says nothing of the reasoning tokens the provider decrypts, and
methods cannot shorten it; the summary is a UI copy. Their tokens are billed as output;
those re-sent within a turn are in later recorded prompts but not in our count.

Rollouts that keep no user `message` items (the Codex Desktop fixture keeps only
`session_meta`, `response_item` and `user_message` lines) take their `user_message`
events as the user messages the model saw; otherwise those events are ignored. Tasks:
the first user message opens the first (with the AGENTS.md/`<environment_context>`
preamble, so an isolated replay keeps it); a later typed prompt after model output opens
the next.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .build import Builder, called_tools, message, parse_time, tool_call
from .model import Session, TraceFormatError, Usage

FMT = "codex_cli"

_OUTPUT_ITEMS = frozenset(
    {"reasoning", "function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
)
_TOOL_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
# Text Codex injects as a user message rather than a prompt the user typed.
_PREAMBLE = re.compile(r"\s*(# AGENTS\.md instructions|<[A-Za-z_][\w-]*[ >])")


def _text(parts: Any, path: Path, lineno: int) -> str | list[dict[str, Any]]:
    """Responses content parts (or a plain string) as neutral content."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise TraceFormatError(path, "message content is neither a string nor a list of parts", lineno)
    out: list[dict[str, Any]] = []
    for p in parts:
        if not isinstance(p, dict):
            raise TraceFormatError(path, "a content part is not an object", lineno)
        kind = p.get("type")
        if kind in ("input_text", "output_text", "text"):
            out.append({"type": "text", "text": str(p.get("text") or "")})
        elif kind == "input_image":
            url = p.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            out.append({"type": "image_url", "image_url": {"url": str(url or "")}})
    if all(p["type"] == "text" for p in out):
        return "\n".join(p["text"] for p in out)
    return out


def _tool_output(output: Any, path: Path, lineno: int) -> str | list[dict[str, Any]]:
    """A tool output as the model got it: a string verbatim, content items as parts."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _text(output, path, lineno)
    if isinstance(output, dict):  # the failure shape {content, success} some versions write
        if isinstance(output.get("content"), (str, list)):
            return _tool_output(output["content"], path, lineno)
        return json.dumps(output, ensure_ascii=False)
    if output is None:
        return ""
    raise TraceFormatError(path, f"tool output of type {type(output).__name__}", lineno)


def _name(item: dict[str, Any]) -> str:
    name = str(item.get("name") or "")
    ns = item.get("namespace")
    if isinstance(ns, str) and ns:
        return f"{ns}{name}" if ns.endswith("_") else f"{ns}__{name}"
    return name


class _Rollout:
    """The state of one rollout's replay into a Builder."""

    def __init__(self, path: Path, users_from_events: bool) -> None:
        self.path = path
        self.b = Builder()
        self.users_from_events = users_from_events
        self.open: dict[str, Any] | None = None  # assistant message receiving output items
        self.pieces: dict[int, list[str]] = {}
        # assistant messages awaiting their usage event: (message, timestamp, model, start)
        self.pending: list[tuple[dict[str, Any], float | None, str | None, dict[str, Any] | None]] = []
        self.orphan: tuple[Usage, float | None, str | None] | None = None  # usage without output
        self.restart: dict[str, Any] | None = None
        self.model: str | None = None
        self.prev_total: Any = None
        self.had_output = False
        self.replaying = False  # adding a compaction's replacement history: no calls, no tasks
        self.meta: dict[str, Any] = {
            "reasoning_items": 0,
            "compactions": 0,
            "repeated_token_counts": 0,
            "web_search_calls": 0,
            "placeholder_outputs": 0,
        }
        self.skipped: dict[str, int] = {}

    # -- messages -----------------------------------------------------------------------

    def _close(self) -> None:
        if self.open is not None:
            self.open["content"] = "\n\n".join(p for p in self.pieces.pop(id(self.open), []) if p)
            self.open = None

    def _input(self, msg: dict[str, Any]) -> dict[str, Any]:
        self._close()
        return self.b.add(msg)

    def _output(self, ts: float | None) -> tuple[dict[str, Any], list[str]]:
        if self.open is None:
            self.open = self.b.add({"role": "assistant", "content": ""})
            self.pieces[id(self.open)] = []
            self.pending.append((self.open, ts, self.model, self.restart))
            self.had_output = True
        return self.open, self.pieces[id(self.open)]

    def user(self, content: Any) -> None:
        msg = self._input(message("user", content))
        text = content if isinstance(content, str) else ""
        if self.had_output and not self.replaying and not _PREAMBLE.match(text):
            self.b.task_start(msg)

    def item(self, item: dict[str, Any], ts: float | None, lineno: int) -> None:
        """One response item into the history (and the open call, for model output)."""
        self.resolve_orphan()
        kind = item.get("type")
        path = self.path
        if kind == "message":
            role = item.get("role")
            content = _text(item.get("content"), path, lineno)
            if role == "assistant":
                _, pieces = self._output(ts)
                pieces.append(content if isinstance(content, str) else "")
            elif role == "user":
                self.user(content)
            elif role in ("developer", "system"):
                self._input(message(str(role), content))
            else:
                raise TraceFormatError(path, f"message with role {role!r}", lineno)
        elif kind in _OUTPUT_ITEMS:
            msg, pieces = self._output(ts)
            if kind == "reasoning":
                self.meta["reasoning_items"] += 1
            elif kind == "web_search_call":  # hosted: results stay with the provider
                self.meta["web_search_calls"] += 1
                pieces.append(f"[web search: {json.dumps(item.get('action') or {}, ensure_ascii=False)}]")
            else:
                msg.setdefault("tool_calls", []).append(self._call(item, kind, lineno))
        elif kind in _TOOL_OUTPUTS:
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise TraceFormatError(path, f"{kind} without a call_id", lineno)
            content = _tool_output(item.get("output"), path, lineno)
            self._input(message("tool", content, tool_call_id=call_id))
        else:
            self.skipped[str(kind)] = self.skipped.get(str(kind), 0) + 1

    def _call(self, item: dict[str, Any], kind: str, lineno: int) -> dict[str, Any]:
        call_id = item.get("call_id") or item.get("id")
        if kind == "function_call":
            args = item.get("arguments")
            if not isinstance(args, (str, dict)) and args is not None:
                raise TraceFormatError(self.path, "function_call arguments are not a string", lineno)
            return tool_call(call_id, _name(item), args)
        if kind == "custom_tool_call":
            return tool_call(call_id, _name(item), {"input": item.get("input") or ""})
        return tool_call(call_id, "local_shell", item.get("action") or {})  # local_shell_call

    # -- calls --------------------------------------------------------------------------

    def usage(self, info: Any, ts: float | None, lineno: int) -> None:
        if info is None:
            return
        if not isinstance(info, dict):
            raise TraceFormatError(self.path, "token_count info is not an object", lineno)
        total, last = info.get("total_token_usage"), info.get("last_token_usage")
        key = total if total is not None else last
        if key is not None and key == self.prev_total:
            self.meta["repeated_token_counts"] += 1
            return
        u = last if isinstance(last, dict) else None
        if u is None and isinstance(total, dict):  # no per-call figures: the change of the totals
            prev = self.prev_total if isinstance(self.prev_total, dict) else {}
            u = {
                k: _num(total.get(k)) - _num(prev.get(k))
                for k in ("input_tokens", "cached_input_tokens", "output_tokens")
            }
        if u is None:  # rate limits or a context window only
            return
        self.prev_total = key
        prompt = _num(u.get("input_tokens"))
        usage = Usage(
            prompt, min(_num(u.get("cached_input_tokens")), prompt), None, _num(u.get("output_tokens"))
        )
        self.resolve_orphan()
        self._close()
        if not self.pending:
            self.orphan = (usage, ts, self.model)
            return
        *early, last_call = self.pending
        for msg, t, model, start in early:  # outputs whose own usage event is missing
            self.b.call(msg, None, t, model, start=start)
        msg, t, model, start = last_call
        self.b.call(msg, usage, t, model, start=start)
        self.pending = []

    def resolve_orphan(self) -> None:
        """Usage with no output items and no compaction after it: an empty output."""
        if self.orphan is None:
            return
        usage, ts, model = self.orphan
        self.orphan = None
        self._close()
        out = self.b.add({"role": "assistant", "content": ""})
        self.meta["placeholder_outputs"] += 1
        self.b.call(out, usage, ts, model, start=self.restart)

    def compacted(self, payload: dict[str, Any], ts: float | None, lineno: int) -> None:
        self._close()
        self.meta["compactions"] += 1
        summary = payload.get("message")
        summary = summary if isinstance(summary, str) else ""
        if self.orphan is not None:  # the summarisation call: its output is the summary
            usage, uts, model = self.orphan
            self.orphan = None
            out = self.b.add({"role": "assistant", "content": summary})
            self.b.call(out, usage, uts, model, start=self.restart)
        first = len(self.b.messages)
        history = payload.get("replacement_history")
        if isinstance(history, list) and history:
            pending, self.pending, self.replaying = self.pending, [], True
            for item in history:
                if not isinstance(item, dict):
                    raise TraceFormatError(self.path, "a replacement_history item is not an object", lineno)
                self.item(item, ts, lineno)
            self._close()
            self.pending, self.replaying = pending, False  # history, not calls
        else:
            self._input(message("user", summary))
        self.restart = self.b.messages[first] if len(self.b.messages) > first else None

    def finish(self) -> None:
        self.resolve_orphan()
        self._close()
        for msg, t, model, start in self.pending:
            self.b.call(msg, None, t, model, start=start)
        self.pending = []


def _num(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _check(path: Path, lineno: int, rec: Any) -> tuple[str, dict[str, Any], float | None]:
    if not isinstance(rec, dict):
        raise TraceFormatError(path, "rollout line is not a JSON object", lineno)
    kind, payload = rec.get("type"), rec.get("payload")
    if not isinstance(kind, str):
        raise TraceFormatError(path, "rollout line without a type", lineno)
    if not isinstance(payload, dict):
        raise TraceFormatError(path, f"{kind} line without a payload object", lineno)
    return kind, payload, parse_time(rec.get("timestamp"))


def _tools(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The app tools' schemas (`dynamic_tools`) in the neutral (OpenAI) form."""
    out = []
    for t in meta.get("dynamic_tools") or []:
        if isinstance(t, dict) and t.get("name"):
            fn = {"name": _name(t), "description": str(t.get("description") or "")}
            fn["parameters"] = t.get("inputSchema") or t.get("input_schema") or {"type": "object"}
            out.append({"type": "function", "function": fn})
    return out


def load(path: Path, records: list[tuple[int, Any]]) -> list[Session]:
    checked = [(lineno, *_check(path, lineno, rec)) for lineno, rec in records]
    has_user_items = any(
        kind == "response_item" and p.get("type") == "message" and p.get("role") == "user"
        for _, kind, p, _ in checked
    )
    r = _Rollout(path, users_from_events=not has_user_items)
    session_meta: dict[str, Any] = {}
    from_events = 0
    for lineno, kind, payload, ts in checked:
        if kind == "session_meta":
            if not session_meta:
                session_meta = payload
                base = payload.get("base_instructions")
                text = base.get("text") if isinstance(base, dict) else base
                if isinstance(text, str) and text and not r.b.messages:
                    r.b.add(message("system", text))
        elif kind == "turn_context":
            if isinstance(payload.get("model"), str):
                r.model = payload["model"]
        elif kind == "response_item":
            if not isinstance(payload.get("type"), str):
                raise TraceFormatError(path, "response_item without a type", lineno)
            r.item(payload, ts, lineno)
        elif kind == "compacted":
            r.compacted(payload, ts, lineno)
        elif kind == "event_msg":
            etype = payload.get("type")
            if etype == "token_count":
                r.usage(payload.get("info"), ts, lineno)
            elif etype == "user_message" and r.users_from_events:
                r.resolve_orphan()
                parts: list[dict[str, Any]] = [
                    {"type": "input_text", "text": str(payload.get("message") or "")}
                ]
                parts += [{"type": "input_image", "image_url": u} for u in payload.get("images") or [] if u]
                r.user(_text(parts, path, lineno))
                from_events += 1
        else:
            r.skipped[f"line:{kind}"] = r.skipped.get(f"line:{kind}", 0) + 1
    r.finish()
    if not r.b.specs:
        return []
    meta = dict(r.meta)
    meta.update(
        {
            "cli_version": session_meta.get("cli_version"),
            "originator": session_meta.get("originator"),
            "source": session_meta.get("source"),
            "model_provider": session_meta.get("model_provider"),
            "models": sorted({s.model for s in r.b.specs if s.model}),
            "user_messages_from_events": from_events,
        }
    )
    if isinstance(session_meta.get("instructions"), str):
        meta["user_instructions_chars"] = len(session_meta["instructions"])  # sent as a user message
    if r.skipped:
        meta["skipped"] = dict(sorted(r.skipped.items()))
    session_id = str(session_meta.get("id") or path.stem)
    return [
        r.b.finish(
            session_id=session_id,
            source=str(path),
            fmt=FMT,
            tools=[*(declared := _tools(session_meta)), *called_tools(r.b.messages, declared)],
            meta=meta,
        )
    ]
