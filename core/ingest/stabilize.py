"""Prefix stabilisation: volatile fields become placeholders, tools become canonical.

A system prompt that carries today's date, a workspace path or a session id differs
between sessions (and on every date rollover), so the provider's prefix cache misses
from its first changed byte. We replace each such field with a placeholder that names
its kind and its rank (`{{TP_DATE_1}}`), and deliver the real values after the stable
part: values constant for the session once, values that change per call at the very
end of the request, never persisted. All functions here are pure.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .._canonical import canonical_json
from ..config import VolatilePattern as VolatilePattern  # declared with the settings
from ..messages.model import tool_name

# Kinds whose values change while a session runs: delivered per call, at the end.
PER_CALL_KINDS = frozenset({"DATE", "TIME", "DATETIME"})

_MONTHS = r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
_DAYS = r"(?:Mon(?:day)?|Tue(?:s(?:day)?)?|Wed(?:nesday)?|Thu(?:rs(?:day)?)?|Fri(?:day)?|Sat(?:urday)?|Sun(?:day)?)"
_TZ = r"(?:[ \t]?(?:UTC|GMT|Z|[A-Z]{2,5}|[+-]\d{2}:?\d{2})\b)?"
_TIME = r"\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:\s?[AaPp][Mm])?"

# (kind, regex). Order matters: longer, more specific forms first. When a regex has a
# group named `v`, only that group is the volatile value (the label stays visible).
_IDKEYS = r"(?:session|agent|request|run|conversation|thread|trace|user)[ _-]?id"
_BUILTIN: tuple[tuple[str, str], ...] = (
    ("RUNTIME", r"(?m)Runtime: (?P<v>[^\n]*\|[^\n]*)"),
    ("RUNTIME", r"(?m)^(?P<v>(?:[ \t]*[\w.-]+=[^\s|,;]+[ \t]*[|,;][ \t]*){2,}[\w.-]+=[^\s|,;]+)[ \t]*$"),
    ("DATETIME", rf"\[{_DAYS}\s+\d{{4}}-\d{{2}}-\d{{2}}\s+{_TIME}{_TZ}\]"),
    ("DATETIME", rf"\b\d{{4}}-\d{{2}}-\d{{2}}[T ]{_TIME}{_TZ}"),
    ("DATETIME", rf"\b{_DAYS},?\s+\d{{1,2}}\s+{_MONTHS}\s+\d{{4}}\s+{_TIME}{_TZ}"),
    ("DATETIME", rf"\b{_DAYS}\s+{_MONTHS}\s+\d{{1,2}}\s+{_TIME}(?:\s+[A-Z]{{2,5}})?\s+\d{{4}}"),
    ("DATE", rf"\b(?:{_DAYS},?\s+)?{_MONTHS}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"),
    ("DATE", rf"\b(?:{_DAYS},?\s+)?\d{{1,2}}\s+{_MONTHS},?\s+\d{{4}}"),
    ("DATE", r"\b\d{4}-\d{2}-\d{2}\b"),
    ("DATE", r"\b\d{1,2}/\d{1,2}/\d{4}\b"),
    ("TIME", rf"(?i:current time):[ \t]*(?P<v>{_TIME}{_TZ})"),
    ("TIME", r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"),
    ("UUID", r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
    ("ID", rf"(?i)\b{_IDKEYS}\s*[=:]\s*[`'\"]?(?P<v>[^\s,;|`'\"]+)"),
    ("HOST", r"(?i)\bhost(?:name)?\s*[=:]\s*[`'\"]?(?P<v>[^\s,;|`'\"]+)"),
    ("TZ", r"(?m)^Time zone: (?P<v>[^\n]+)"),
    ("MODEL", r"(?m)^Current model identity: (?P<v>\S+?)(?=\.?(?:\s|$))"),
)

# Absolute paths under per-user or per-run locations.
_PATH_RE = re.compile(
    r"(?:(?<![\w./~-])(?:/home/[^/\s`'\"<>)\]]+|/Users/[^/\s`'\"<>)\]]+|/root|/tmp|/private/tmp|/var/folders"
    r"|/workspaces?|/mnt/[^/\s`'\"<>)\]]+|/run/user/\d+)(?:/[^\s`'\"<>)\](,;]*)?"
    r"|\b[A-Za-z]:\\Users\\[^\s`'\"<>]+)"
)


@dataclass(frozen=True, slots=True)
class Stabilized:
    """A system text with placeholders, and the values they stand for."""

    text: str
    session_values: tuple[tuple[str, str], ...] = ()  # (placeholder, value) constant for the session
    call_values: tuple[tuple[str, str], ...] = ()  # (placeholder, value) that may change per call

    @property
    def values(self) -> dict[str, str]:
        return dict(self.session_values + self.call_values)


@dataclass(slots=True)
class _Namer:
    """Numbers distinct values per kind in order of first appearance: deterministic."""

    seen: dict[tuple[str, str], str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def name(self, kind: str, value: str) -> str:
        key = (kind, value)
        if key not in self.seen:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.seen[key] = f"{{{{TP_{kind}_{self.counts[kind]}}}}}"
        return self.seen[key]


def _compile(extra: Sequence[VolatilePattern]) -> list[tuple[str, re.Pattern[str], bool]]:
    out = [(p.kind.upper(), re.compile(p.regex), p.per_call) for p in extra]
    out += [(kind, re.compile(rx), kind in PER_CALL_KINDS) for kind, rx in _BUILTIN]
    return out


_COMPILED_CACHE: dict[tuple[VolatilePattern, ...], list[tuple[str, re.Pattern[str], bool]]] = {}


def _patterns(extra: Sequence[VolatilePattern]) -> list[tuple[str, re.Pattern[str], bool]]:
    key = tuple(extra)
    if key not in _COMPILED_CACHE:
        _COMPILED_CACHE[key] = _compile(key)
    return _COMPILED_CACHE[key]


def _path_roots(paths: Iterable[str]) -> dict[str, str]:
    """Map each volatile path to its root: the longest other path it lies under.

    `/home/alice/ws/AGENTS.md` with `/home/alice/ws` also present has that root, so the
    placeholder stands for the workspace and the file name stays visible and stable.
    """
    uniq = sorted(set(p.rstrip("/\\") or p for p in paths), key=len)
    roots: dict[str, str] = {}
    for p in uniq:
        best = p
        for q in uniq:
            if len(q) >= len(p):
                break
            if p.startswith(q) and p[len(q)] in "/\\" and len(q) > 1:
                best = roots.get(q, q)
                break
        roots[p] = best
    # prefer the shortest ancestor chain root
    for p, r in list(roots.items()):
        while roots.get(r, r) != r:
            r = roots[r]
        roots[p] = r
    return roots


def stabilize_text(text: str, extra: Sequence[VolatilePattern] = ()) -> Stabilized:
    """Replace volatile fields in a system/developer text by placeholders.

    Pure: the same text gives the same output; two texts that differ only in volatile
    values give the same `text`. Memoised: an agent's sessions mostly share one prompt
    (a 48 KB OpenClaw prompt takes ~25 ms to scan).
    """
    return _stabilize_cached(text, tuple(extra))


@lru_cache(maxsize=256)
def _stabilize_cached(text: str, extra: tuple[VolatilePattern, ...]) -> Stabilized:
    spans: list[tuple[int, int, str, bool]] = []  # start, end, kind, per_call
    taken = bytearray(len(text))

    def claim(start: int, end: int, kind: str, per_call: bool) -> None:
        if start >= end or any(taken[start:end]):
            return
        taken[start:end] = b"\x01" * (end - start)
        spans.append((start, end, kind, per_call))

    for kind, rx, per_call in _patterns(extra):
        has_v = "v" in rx.groupindex
        for m in rx.finditer(text):
            if has_v:
                claim(m.start("v"), m.end("v"), kind, per_call)
            else:
                claim(m.start(), m.end(), kind, per_call)

    path_matches = [m for m in _PATH_RE.finditer(text) if not any(taken[m.start() : m.end()])]
    roots = _path_roots(m.group(0) for m in path_matches)
    for m in path_matches:
        value = m.group(0).rstrip("/\\") or m.group(0)
        root = roots.get(value, value)
        claim(m.start(), m.start() + len(root), "PATH", False)

    if not spans:
        return Stabilized(text)
    spans.sort()
    namer = _Namer()
    out: list[str] = []
    session_vals: dict[str, str] = {}
    call_vals: dict[str, str] = {}
    pos = 0
    for start, end, kind, per_call in spans:
        value = text[start:end]
        ph = namer.name(kind, value)
        (call_vals if per_call else session_vals).setdefault(ph, value)
        out.append(text[pos:start])
        out.append(ph)
        pos = end
    out.append(text[pos:])
    return Stabilized("".join(out), tuple(session_vals.items()), tuple(call_vals.items()))


def values_block(values: Sequence[tuple[str, str]], *, title: str) -> str:
    """The text that tells the model what each placeholder stands for."""
    lines = [f"{ph} = {val}" for ph, val in values]
    return f"<tokenpilot-values>\n{title}\n" + "\n".join(lines) + "\n</tokenpilot-values>"


# ---------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------
RECALL_TOOL_NAME = "recall_artifact"
# What a recall's result shows once the agent has answered it (`lifecycle.tail`, and a
# summary request's render): the call above it names what it returns, and returns it again.
RECALLED_MARKER = (
    "[tokenpilot: recalled and read; cut at the tail: the same recall_artifact call returns it again]"
)
MCP_SEPARATOR = "__"  # what MCP clients put between a server's name and its tool's
MCP_SERVER_NAME = "tokenpilot"  # what `tokenpilot enable` registers our MCP server as


def is_recall_tool(name: object) -> bool:
    """`recall_artifact` as TokenPilot lists it, or as an MCP client lists the one our MCP
    server offers (`tokenpilot mcp`): Claude Code and Codex name a server's tool
    `mcp__<server>__<tool>` (older Codex `<server>__<tool>`; a namespace's child
    `<namespace>.<tool>`; Gemini CLI `mcp_<server>_<tool>`). Either way it is a recall."""
    return isinstance(name, str) and (
        name == RECALL_TOOL_NAME
        or name.endswith((MCP_SEPARATOR + RECALL_TOOL_NAME, "." + RECALL_TOOL_NAME))
        or (name.startswith("mcp_") and name.endswith("_" + RECALL_TOOL_NAME))
    )


def served_elsewhere(name: object) -> bool:
    """A recall tool that TokenPilot neither answers nor counts itself (an MCP client runs
    it against the store): its answers are counted when they reach the history."""
    return is_recall_tool(name) and name != RECALL_TOOL_NAME


_CODE_RECALL = re.compile(r"\w" + MCP_SEPARATOR + RECALL_TOOL_NAME + r"\s*\(")
_ARTIFACT_ID = re.compile(r"art_[0-9a-f]{8,64}")


def recalled_by_client(name: object, arguments: object) -> list[str] | None:
    """The artifact ids of a recall the client ran itself, else None: our MCP server's
    tool called directly, or from code (Codex's code mode runs `exec` JavaScript that
    calls `tools.mcp__tokenpilot__recall_artifact(...)`); its answer is what the agent
    asked to get back, and must not be reduced again."""
    text = arguments if isinstance(arguments, str) else ""
    if served_elsewhere(name):
        try:
            args = json.loads(text) if text.strip() else {}
        except (ValueError, RecursionError):
            args = {}
        aid = args.get("artifact_id") if isinstance(args, Mapping) else None
        return [aid.strip()] if isinstance(aid, str) else []
    if _CODE_RECALL.search(text):
        return _ARTIFACT_ID.findall(text)
    return None


# Short on purpose: it sits in every request of every session, cached or not.
RECALL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": RECALL_TOOL_NAME,
        "description": (
            "Get back the full original of content marked as shortened or evicted, by the art_ id "
            "quoted there; optionally only lines start_line..end_line or lines matching a regex pattern."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "artifact_id": {"type": "string"},
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"},
                "pattern": {"type": "string"},
            },
            "required": ["artifact_id"],
        },
    },
}


def canonical_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool entry with recursively sorted keys: one byte form per definition."""
    return json.loads(canonical_json(tool))


class _ParsedTools:
    """Canonical tool texts and their parse, to compare a request's tools with the session's:
    the same tools come with every call, and parsing each again cost more than encoding it.
    A parse here is only ever compared with, never handed out (a session's tool is its own
    `json.loads`), so nothing can change it. Bounded by the chars it holds."""

    def __init__(self, max_chars: int = 4 * 1024 * 1024) -> None:
        self.max_chars = max_chars
        self._parsed: dict[str, Any] = {}
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, text: str) -> Any:
        hit = self._parsed.get(text)
        if hit is not None:
            return hit
        parsed = json.loads(text)
        with self._lock:
            if self._chars + len(text) > self.max_chars:
                self._parsed.clear()
                self._chars = 0
            if len(text) <= self.max_chars and text not in self._parsed:
                self._parsed[text] = parsed
                self._chars += len(text)
        return parsed


_PARSED_TOOLS = _ParsedTools()


def merge_tools(
    known: Sequence[dict[str, Any]], incoming: Sequence[Mapping[str, Any]] | None, *, include_recall: bool
) -> tuple[list[dict[str, Any]], bool]:
    """The session's tool list after seeing `incoming`; and whether it changed.

    Append-only: tools already advertised keep their place and bytes (a tool that
    disappears from a request stays listed, so the prefix is not broken); new tools
    are appended, sorted by name among themselves. The first list is fully sorted.
    A tool whose definition changes replaces its entry in place (unavoidable break).
    """
    result = list(known)
    index = {tool_name(t): i for i, t in enumerate(result)}
    new: list[dict[str, Any]] = []
    changed = False
    wanted = list(incoming or [])
    if (
        include_recall
        and not any(is_recall_tool(name) for name in index)
        and not any(is_recall_tool(tool_name(t)) for t in wanted)
    ):  # a client that lists our MCP server's recall tool gets no second one
        wanted.append(RECALL_TOOL)
    for t in wanted:
        name = tool_name(t)
        text = canonical_json(t)  # `canonical_tool(t)` is json.loads(text)
        if name in index:
            if result[index[name]] != _PARSED_TOOLS.get(text):
                result[index[name]] = json.loads(text)
                changed = True
        elif not any(tool_name(x) == name for x in new):
            new.append(json.loads(text))
    if new:
        new.sort(key=tool_name)
        result.extend(new)
        changed = True
    return result, changed
