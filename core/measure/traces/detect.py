"""Reading trace files and recognising their format from content, never from the name.

A file is read once: `read(path)` returns the parsed payload with the format, so the
importer does not parse a 5 MB file a second time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import gemini_cli, openhands
from .model import TraceFormatError, UnrecognizedTrace

SQLITE_MAGIC = b"SQLite format 3\x00"
_CODEX_LINE_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})

# Names that are never data, whatever they contain.
_NON_DATA_PREFIXES = ("license", "readme", "copying", "notice", "upstream_readme", "changelog")
_NON_DATA_SUFFIXES = (".md", ".txt", ".rst", ".py", ".sh", ".yaml", ".yml", ".toml", ".cfg", ".csv", ".html")


@dataclass(slots=True)
class Payload:
    """A parsed trace file: `kind` is json, jsonl or sqlite; `data` the parsed content.

    For JSONL, `data` is a list of (line number, record) pairs.
    """

    path: Path
    fmt: str
    kind: str
    data: Any


def is_candidate(path: Path) -> bool:
    """Whether a folder walk should try this file (skips licenses, READMEs, text)."""
    name = path.name.lower()
    if name.startswith(".") or name.startswith(_NON_DATA_PREFIXES) or name.endswith(_NON_DATA_SUFFIXES):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except OSError:
        return False
    if head.startswith(SQLITE_MAGIC):
        return True
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return stripped[:1] in (b"{", b"[")


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace")


def _parse(path: Path) -> tuple[str, Any]:
    raw = path.read_bytes()
    if raw.startswith(SQLITE_MAGIC):
        return "sqlite", None
    text = _decode(raw)
    if not text.strip():
        raise TraceFormatError(path, "empty file", 1)
    try:
        return "json", json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            line = min(exc.lineno, text.rstrip().count("\n") + 1)  # EOF errors: the last real line
            raise TraceFormatError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", line) from None
    records: list[tuple[int, Any]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise TraceFormatError(
                path, f"invalid JSON line: {exc.msg} (column {exc.colno})", lineno
            ) from None
    return "jsonl", records


def _is_message(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("role"), str)


def _looks_mini_text_actions(messages: list[dict[str, Any]]) -> bool:
    """mini-swe-agent's old format: a bare message list with bash blocks and <returncode> outputs."""
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str):
            continue
        if m.get("role") == "assistant" and "```mswea_bash_command" in content:
            return True
        if m.get("role") == "user" and content.startswith("<returncode>"):
            return True
    return False


def classify_json(path: Path, obj: Any) -> str:
    if isinstance(obj, dict):
        info = obj.get("info") if isinstance(obj.get("info"), dict) else {}
        if str(obj.get("trajectory_format", "")).startswith("mini-swe-agent") or (
            isinstance(obj.get("messages"), list) and "mini_version" in info
        ):
            return "mini_swe_agent"
        if isinstance(obj.get("history"), list) or (
            isinstance(obj.get("trajectory"), list) and ("environment" in obj or "info" in obj)
        ):
            return "swe_agent"
        if isinstance(obj.get("simulations"), list):
            return "tau2"
        tasks = obj.get("tasks")
        if isinstance(tasks, list) and any(
            isinstance(t, dict) and ("transcript" in t or "llm_calls" in t) for t in tasks
        ):
            return "openclaw_pinchbench"
        if gemini_cli.looks_like(obj):
            return "gemini_cli"
        if isinstance(obj.get("messages"), list) and all(_is_message(m) for m in obj["messages"]):
            return "openai_chat"
        raise UnrecognizedTrace(path, "JSON object of no known trace format")
    if isinstance(obj, list):
        if not obj:
            raise UnrecognizedTrace(path, "empty list")
        first = obj[0]
        if isinstance(first, dict) and "traj" in first and "task_id" in first:
            return "tau_bench"
        if (
            isinstance(first, dict)
            and isinstance(first.get("messages"), list)
            and ("termination_reason" in first or "task_id" in first)
        ):
            return "tau2"
        if all(_is_message(m) for m in obj):
            return "mini_swe_agent" if _looks_mini_text_actions(obj) else "openai_chat"
        if openhands.looks_like(obj):
            return "openhands"
        raise UnrecognizedTrace(path, "JSON list of no known trace format")
    raise UnrecognizedTrace(path, f"JSON {type(obj).__name__} is not a trace")


def _is_codex_rollout(dicts: list[dict[str, Any]]) -> bool:
    """Codex CLI rollout lines: `{"timestamp", "type": session_meta | turn_context |
    response_item | event_msg | compacted, "payload": {…}}`, with a session or history line."""
    if dicts[0].get("type") not in _CODEX_LINE_TYPES or not isinstance(dicts[0].get("payload"), dict):
        return False
    return any(
        r.get("type") in ("session_meta", "response_item") and isinstance(r.get("payload"), dict)
        for r in dicts[:50]
    )


def classify_jsonl(path: Path, records: list[tuple[int, Any]]) -> str:
    dicts = [r for _, r in records if isinstance(r, dict)]
    if not dicts:
        raise UnrecognizedTrace(path, "no JSON objects", 1)
    if _is_codex_rollout(dicts):
        return "codex_cli"
    if gemini_cli.looks_like_lines(dicts):
        return "gemini_cli"
    for r in dicts:
        if (
            r.get("type") in ("user", "assistant")
            and isinstance(r.get("message"), dict)
            and ("uuid" in r or "sessionId" in r)
        ):
            return "claude_code"
    for r in dicts:
        msg = r.get("message")
        if r.get("type") == "session" or (
            r.get("type") == "message"
            and isinstance(msg, dict)
            and msg.get("role") in ("user", "assistant", "toolResult")
        ):
            return "openclaw"
    if all(_is_message(r) for r in dicts):
        return "openai_chat_jsonl"
    if all(
        isinstance(r.get("messages"), list) or isinstance((r.get("body") or {}).get("messages"), list)
        for r in dicts
    ):
        return "openai_chat_jsonl"
    raise UnrecognizedTrace(path, "JSON lines of no known trace format", records[0][0])


def read(path: str | Path) -> Payload:
    """Parse a file and recognise its format; raises TraceFormatError (file and line)."""
    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(p, "not a file")
    kind, data = _parse(p)
    if kind == "sqlite":
        return Payload(p, "openclaw_sqlite", kind, None)
    if kind == "json":
        return Payload(p, classify_json(p, data), kind, data)
    return Payload(p, classify_jsonl(p, data), kind, data)
