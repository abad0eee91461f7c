"""Importers for recorded agent sessions, all producing `Session`s in the neutral format.

`load(path)` takes a file or a folder (walked recursively; licenses, READMEs and other
non-data files are skipped, as are JSON files that are valid but not traces, such as
run reports). The format is recognised from the content, never from the file name.
Broken data raises `TraceFormatError` naming the file and line.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from . import (
    claude_code,
    codex_cli,
    gemini_cli,
    mini_swe_agent,
    openai_chat,
    openclaw,
    openclaw_sqlite,
    openhands,
    pinchbench,
    swe_agent,
    tau2,
    tau_bench,
)
from .build import pairing_problems
from .detect import Payload, is_candidate, read
from .model import RecordedCall, Session, TraceFormatError, UnrecognizedTrace, Usage

log = logging.getLogger("tokenpilot")

__all__ = [
    "RecordedCall",
    "Session",
    "TraceFormatError",
    "UnrecognizedTrace",
    "Usage",
    "detect_format",
    "load",
    "load_file",
    "pairing_problems",
]

FORMATS = (
    "claude_code",
    "openclaw",
    "openclaw_sqlite",
    "openclaw_pinchbench",
    "openai_chat",
    "openai_chat_jsonl",
    "mini_swe_agent",
    "swe_agent",
    "tau_bench",
    "tau2",
    "codex_cli",
    "gemini_cli",
    "openhands",
)


def detect_format(path: str | Path) -> str:
    """The format name of one trace file; raises TraceFormatError if it is none we know."""
    payload = read(path)
    if payload.fmt == "openclaw_sqlite":
        openclaw_sqlite.load(payload.path)  # validates the table; cheap next to a real load
    return payload.fmt


def _import(payload: Payload) -> list[Session]:
    p, fmt, data = payload.path, payload.fmt, payload.data
    if fmt == "claude_code":
        return claude_code.load(p, data)
    if fmt == "openclaw":
        return openclaw.load(p, data)
    if fmt == "openclaw_sqlite":
        return openclaw_sqlite.load(p)
    if fmt == "openclaw_pinchbench":
        return pinchbench.load(p, data)
    if fmt == "openai_chat":
        return openai_chat.load(p, data)
    if fmt == "openai_chat_jsonl":
        return openai_chat.load_jsonl(p, data)
    if fmt == "mini_swe_agent":
        return mini_swe_agent.load(p, data)
    if fmt == "swe_agent":
        return swe_agent.load(p, data)
    if fmt == "tau_bench":
        return tau_bench.load(p, data)
    if fmt == "tau2":
        return tau2.load(p, data)
    if fmt == "codex_cli":
        return codex_cli.load(p, data)
    if fmt == "openhands":
        return openhands.load(p, data)
    if fmt == "gemini_cli":
        if payload.kind == "jsonl":
            data = gemini_cli.from_lines([r for _, r in data if isinstance(r, dict)])
        return gemini_cli.load(p, data)
    raise TraceFormatError(p, f"no importer for format {fmt!r}")


def load_file(path: str | Path) -> list[Session]:
    """Sessions of one file; any problem raises TraceFormatError."""
    payload = read(path)
    try:
        return _import(payload)
    except TraceFormatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TraceFormatError(payload.path, f"unexpected {payload.fmt} content: {exc!r}") from exc


# Folders a search for recordings never enters: packages, version control, environments
# and caches hold thousands of files and no session.
SKIPPED_DIRS = frozenset(
    {
        "node_modules",
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "env",
        ".env",
        "__pycache__",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "site-packages",
    }
)


def _is_environment(folder: Path) -> bool:
    """A Python virtual environment, whatever its name (it holds `pyvenv.cfg`)."""
    return (folder / "pyvenv.cfg").is_file()


def trace_files(root: Path) -> list[Path]:
    """Every file under `root` (sorted by path), skipping `SKIPPED_DIRS` and environments."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not _is_environment(here / d)]
        found.extend(here / f for f in files)
    return sorted(found)


def load(path: str | Path) -> list[Session]:
    """Sessions of a file, or of every trace file under a folder (sorted by path)."""
    root = Path(path)
    if root.is_file():
        return load_file(root)
    if not root.is_dir():
        raise TraceFormatError(root, "no such file or folder")
    sessions: list[Session] = []
    for file in trace_files(root):
        if not is_candidate(file):
            continue
        try:
            sessions.extend(load_file(file))
        except UnrecognizedTrace as exc:
            log.debug("tokenpilot: skipping %s", exc)
    return claude_code.merge_compactions(sessions)
