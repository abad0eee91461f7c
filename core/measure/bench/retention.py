"""Retention: does the managed context still hold what the agent went on to use?

For each recorded call, the identifiers, paths and numbers that the recorded output
uses and that first appeared in an earlier tool output are the call's *needs*. A
method keeps a need visible (retention) or one `recall_artifact` away (recoverable).
A method that saves money by hiding what the agent used shows up here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..._canonical import canonical_json
from ...messages.observations import is_observation

# Things an agent copies from tool output into its next action or answer.
_IDENT = re.compile(
    r"https?://[^\s\"'<>()\]\[,]+"  # URLs
    r"|(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}"  # paths with at least two components
    r"|\b[\w-]+\.(?:py|js|ts|tsx|rs|go|java|rb|ex|exs|md|txt|json|ya?ml|toml|csv|log|html|css|sh|sql|ipynb|c|h|cpp)\b"
    r"|\b(?=[A-Za-z_]*\d?[A-Za-z_])[A-Za-z_][A-Za-z0-9_]*(?:_[A-Za-z0-9]+)+\b"  # snake_case
    r"|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b|\b(?:[A-Z][a-z0-9]+){2,}\b"  # camelCase, CamelCase
    r"|\b[0-9a-f]{7,40}\b"  # hashes, ids
    r"|\b\d[\d,]*\.?\d*\b"  # numbers (filtered by length below)
)
_MIN_NUMBER_DIGITS = 3


def identifiers(text: str) -> set[str]:
    """Distinctive tokens of a text (numbers only with at least 3 digits)."""
    out = set()
    for m in _IDENT.finditer(text):
        tok = m.group(0).rstrip(".,")
        if tok[:1].isdigit() and sum(c.isdigit() for c in tok) < _MIN_NUMBER_DIGITS:
            continue
        if len(tok) >= 3:
            out.add(tok)
            if "/" in tok and not tok.startswith("http"):
                base = tok.rstrip("/").rsplit("/", 1)[-1]
                if len(base) >= 3:
                    out.add(base)  # a file is often named without its directory
    return out


def recalled_identifiers(text: str) -> set[str]:
    """Identifiers of a recalled artifact. An evicted segment comes back as the JSON of
    its messages: read their texts, not the escaped JSON ("\\n1194:" hides 1194)."""
    if text.startswith("[{"):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, list) and all(isinstance(m, dict) for m in value):
            return identifiers("\n".join(message_text(m) for m in value))
    return identifiers(text)


def message_text(msg: Mapping[str, Any]) -> str:
    """Everything model-visible in a message, as text (content and tool-call arguments)."""
    content = msg.get("content")
    text = content if isinstance(content, str) else canonical_json(content) if content is not None else ""
    for c in msg.get("tool_calls") or []:
        fn = c.get("function") or {}
        text += "\n" + str(fn.get("name", "")) + " " + str(fn.get("arguments", ""))
    return text


class NeedIndex:
    """Where each identifier of a session appears, to find each call's needs."""

    def __init__(self, messages: Sequence[Mapping[str, Any]]) -> None:
        self._seen: dict[str, list[tuple[int, bool]]] = {}  # token -> [(message index, from a tool)]
        for i, m in enumerate(messages):
            # text-action agents' observations are tool output too
            tool = m.get("role") == "tool" or (i > 0 and is_observation(m, messages[i - 1]))
            for tok in identifiers(message_text(m)):
                self._seen.setdefault(tok, []).append((i, tool))

    def needs(
        self, output_index: int, output: Mapping[str, Any], window_start: int = 0, *, any_source: bool = False
    ) -> set[str]:
        """Identifiers the output uses whose first appearance in the call's prompt
        (messages `window_start..output_index`) was a tool output. Content the agent
        itself no longer had (before a compaction, another task) is not a need.

        `any_source`: first seen in any earlier message, the agent's own included (what
        it wrote itself, a file it wrote through a heredoc), which the default rule
        never counts, so an eviction may drop it for free."""
        tool_first, any_first = self.both(output_index, output, window_start)
        return any_first if any_source else tool_first

    def both(
        self, output_index: int, output: Mapping[str, Any], window_start: int = 0
    ) -> tuple[set[str], set[str]]:
        """(needs first seen in a tool output, needs first seen in any message), in one pass."""
        tool_first, any_first = set(), set()
        for t in identifiers(message_text(output)):
            first = next((x for x in self._seen.get(t, ()) if x[0] >= window_start), None)
            if first is not None and first[0] < output_index:
                any_first.add(t)
                if first[1]:
                    tool_first.add(t)
        return tool_first, any_first


class Visibility:
    """Identifier sets of rendered messages, memoised by content (requests share most)."""

    def __init__(self) -> None:
        self._cache: dict[str, frozenset[str]] = {}

    def of(self, messages: Iterable[Mapping[str, Any]]) -> set[str]:
        seen: set[str] = set()
        for m in messages:
            text = message_text(m)
            ids = self._cache.get(text)
            if ids is None:
                ids = self._cache[text] = frozenset(identifiers(text))
            seen |= ids
        return seen
