"""References: what ties one task's content to later work (residual utility).

Files, paths, URLs, artifact ids and distinctive identifiers, pulled out of a turn's
words, tool-call arguments and output excerpts; the estimators compare them across
tasks, the segment rules across bundles.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

EXCERPT_CHARS = 400
# Caps on the refs a model estimator reads (prompt size). The offline estimator and the
# registry always use every ref: a cap there once dropped "transcript.md" from a task
# with many refs (alphabetical order), and the task that read it was evicted while the
# current request named it (invariant I6).
MAX_REFS_PER_TURN = 64
MAX_REFS_PER_TASK = 128


def prompt_refs(refs: Iterable[str], limit: int) -> list[str]:
    """At most `limit` refs for a prompt: files, paths and URLs first, then identifiers."""
    return sorted(refs, key=lambda r: (not ("/" in r or "." in r), r))[:limit]


# ---------------------------------------------------------------------------
# References: what ties one task's content to later work (residual utility).
# ---------------------------------------------------------------------------
_EXTENSIONS = (
    "md|markdown|txt|rst|py|pyi|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|"
    "csv|tsv|xml|html|htm|css|scss|sh|bash|zsh|ps1|rs|go|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|sql|"
    "log|lock|pdf|docx|xlsx|pptx|png|jpe?g|gif|svg|webp|zip|gz|tar|parquet|db|sqlite"
)
_URL_RE = re.compile(r"https?://[^\s\"'<>()\[\]{}`]+")
_ART_RE = re.compile(r"\bart_[0-9a-f]{8,64}\b")
_ABS_PATH_RE = re.compile(r"(?<![\w/.])(?:~|\.{1,2})?/(?:[\w.-]+/)*[\w.-]+")
_REL_PATH_RE = re.compile(r"\b[\w.-]+(?:/[\w.-]+)+")
_FILE_RE = re.compile(r"\b[\w-]+(?:\.[\w-]+)*\.(?:" + _EXTENSIONS + r")\b", re.IGNORECASE)
_CAMEL_RE = re.compile(r"\b[A-Za-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b")
_SNAKE_RE = re.compile(r"\b[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+\b")
_NUMBER_RE = re.compile(r"(?<![\w.])\d{4,}(?![\w])")
_TRAILING = ".,;:!?)'\"`"


# Names every task of an agent touches: the workspace files injected into its system
# prompt (OpenClaw, Claude Code) and tool-chain folders. Sharing them says nothing about
# one task needing another's content, so they never count as residual use.
AMBIENT_NAMES = frozenset(
    {
        "AGENTS.md",
        "SOUL.md",
        "USER.md",
        "IDENTITY.md",
        "BOOTSTRAP.md",
        "MEMORY.md",
        "TOOLS.md",
        "HEARTBEAT.md",
        "SKILL.md",
        "CLAUDE.md",
        "node_modules",
        ".git",
        "__pycache__",
        ".venv",
    }
)
_YEAR_RE = re.compile(r"^(?:19|20)\d\d$")


def _ambient(ref: str) -> bool:
    return ref.rstrip("/").rsplit("/", 1)[-1] in AMBIENT_NAMES or bool(_YEAR_RE.match(ref))


def json_strings(args: str) -> str:
    """The string values of tool-call arguments (not their keys: `oldText` is no reference)."""
    try:
        value = json.loads(args)
    except (ValueError, RecursionError):  # not JSON, or nested past what Python reads
        return args
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return "\n".join(out)


def extract_refs(text: str, *, identifiers: bool = True) -> set[str]:
    """Files, paths, URLs, artifact ids and (optionally) distinctive identifiers.

    Identifiers are CamelCase or snake_case names of 6+ chars and numbers of 4+
    digits. Open-world tool output is scanned with `identifiers=False`: there,
    such tokens are mostly noise (dates, ids of unrelated records) and would keep
    unrelated tasks alive.
    """
    if not text:
        return set()
    refs: set[str] = set()
    for rx in (_URL_RE, _ART_RE):
        refs.update(m.group(0).rstrip(_TRAILING) for m in rx.finditer(text))
    stripped = _URL_RE.sub(" ", text)
    for m in _ABS_PATH_RE.finditer(stripped):
        p = m.group(0).rstrip(_TRAILING)
        if len(p) > 2 and p.strip("/.~"):
            refs.add(p)
    for m in _REL_PATH_RE.finditer(stripped):
        p = m.group(0).rstrip(_TRAILING)
        if "." in p.rsplit("/", 1)[-1]:  # a/b/c.ext, not and/or
            refs.add(p)
    refs.update(m.group(0) for m in _FILE_RE.finditer(stripped))
    if identifiers:
        for rx in (_CAMEL_RE, _SNAKE_RE):
            refs.update(w for w in (m.group(0) for m in rx.finditer(stripped)) if len(w) >= 6)
        refs.update(m.group(0) for m in _NUMBER_RE.finditer(stripped))
    return {r for r in refs if not _ambient(r)}


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """At most `limit` chars: head and tail around an ellipsis."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = int(limit * 0.6)
    tail = limit - head - 3
    return text[:head] + " … " + text[len(text) - tail :]
