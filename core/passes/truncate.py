"""truncate: cap one tool output by a per-tool-family character limit.

A shell command can print megabytes; a file read is what the agent asked for, so it is
never cut here (its size is the caller's choice via offset/limit). Limits therefore
depend on the tool *family*: `Bash`, `functions.bash` and `mcp__ci__bash` are all
shells. Above the limit the output keeps its first `head` and last `tail` characters
(where errors and summaries live) around a marker naming the stored original.

Pure and deterministic; never raises; returns its input object when it does not apply.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

from ..messages.call_kinds import call_kind
from .base import ALL_KINDS, PREVIEW_HEAD, PREVIEW_TAIL, PassContext, preview

__all__ = ["DEFAULT_LIMITS", "Truncation", "tool_family"]


def _family(limit: int | None, *names: str) -> dict[str, int | None]:
    return dict.fromkeys(names, limit)


DEFAULT_LIMITS: Mapping[str, int | None] = MappingProxyType(
    {
        # Shells print build logs and test runs: long, repetitive, the end matters most.
        **_family(
            30_000,
            "bash",
            "shell",
            "powershell",
            "exec",
            "run_command",
            "terminal",
            "exec_command",
            "local_shell",
            "run_shell_command",  # Gemini CLI's
        ),
        # Search results are a list; the first hits are the useful ones.
        **_family(20_000, "grep", "rg", "search_files", "search_file_content"),
        # Auth flows should say little; a long answer is an error page.
        **_family(10_000, "mcp_auth"),
        # Writes and edits echo what the agent itself sent: rarely long, keep nearly all.
        **_family(100_000, "glob", "write", "edit", "write_file", "edit_file", "apply_patch"),
        # A read is exactly what was asked for: never cut (use offset/limit to read less).
        **_family(None, "read", "file_read", "read_file", "read_many_files", "view", "cat"),
        # A fetch of a named page or document is the web's read: what was asked for.
        **_family(None, "webfetch", "web_fetch", "fetch"),
    }
)
"""Characters allowed per tool family (lower-case, `_` for `-`); None means unlimited."""

# `functions.bash`, `mcp__server__tool`, `server/tool`, `server:tool`: the family is the last part.
_NAMESPACE_SEP = re.compile(r"__|[./:]")


def _norm(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def tool_family(tool_name: str) -> str:
    """The last segment of a namespaced tool name, normalised (`mcp__gh__Search-Files` -> `search_files`)."""
    parts = [p for p in _NAMESPACE_SEP.split(_norm(tool_name)) if p]
    return parts[-1] if parts else ""


@dataclass(frozen=True, slots=True)
class Truncation:
    """Keep head and tail of an output that is longer than its tool family allows."""

    name: ClassVar[str] = "truncate"
    accepts: ClassVar[frozenset[str]] = ALL_KINDS  # the last resort for any content

    limits: Mapping[str, int | None] = field(default_factory=lambda: DEFAULT_LIMITS)
    """Character limit per tool name or family (case-insensitive); None means never truncate."""
    default_limit: int = 50_000
    """Limit for tools no entry in `limits` matches (unknown and MCP tools)."""
    head: int = PREVIEW_HEAD
    """Characters kept from the start: the command, its first lines, early errors."""
    tail: int = PREVIEW_TAIL
    """Characters kept from the end: exit status, summaries and the last error."""

    def limit_for(self, tool_name: str) -> int | None:
        """The limit for this tool: an exact (normalised) name first, then its family, else the default."""
        try:
            table = {_norm(k): v for k, v in self.limits.items()}
            full = _norm(tool_name)
            if full in table:
                return table[full]
            family = tool_family(tool_name)
            if family in table:
                return table[family]
        except Exception:  # a bad limits table or a non-str name: fall back rather than fail
            pass
        return self.default_limit

    def apply(self, text: str, ctx: PassContext) -> str:
        """`preview(...)` of the text when it is longer than the tool's limit, else the text itself."""
        try:
            limit = self.limit_for(ctx.tool_name)
            if limit is not None and call_kind(ctx.tool_name, ctx.arguments) == "read":
                # a shell's whole read of a file (`cat SKILL.md`) is a read: what was asked for
                limit = self.limit_for("read")
            if limit is None or not isinstance(text, str) or len(text) <= limit:
                return text
            return preview(
                text,
                head=max(0, self.head),
                tail=max(0, self.tail),
                artifact_id=ctx.artifact_id,
                what="output truncated",
                line_range=True,
            )
        except Exception:
            return text
