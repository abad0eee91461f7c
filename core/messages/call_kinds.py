"""What one tool call does to the files of a coding agent: read, write, edit, search or
run a command, which file, whether whole, and whether a write carries the file's text.

The segment rules (`segments.py`) read each bundle through these: a file read supersedes
an earlier read of it, a whole write an earlier write, a rerun an earlier run. Tool names
come namespaced (`mcp__fs__read_file`, `functions.bash`), so only their last part counts;
shell commands are classified from their first plain command line, so bash-only agents
(mini-swe-agent, SWE-agent's text actions) get the same rules.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

__all__ = [
    "PATH_KEYS",
    "RANGE_KEYS",
    "SHELL_TOOLS",
    "authored_write",
    "call_kind",
    "norm_tool",
    "path_of",
    "shell_action",
]

_READ_TOOLS = frozenset(
    {"read", "file_read", "read_file", "view", "cat", "notebook_read", "str_replace_editor"}
)
_WRITE_TOOLS = frozenset({"write", "create_file", "write_file", "create"})
_EDIT_TOOLS = frozenset(
    {"edit", "multiedit", "str_replace", "apply_patch", "patch", "notebook_edit", "insert"}
)
_SEARCH_TOOLS = frozenset(
    {
        "grep",
        "glob",
        "ls",
        "find",
        "rg",
        "search",
        "list_dir",
        "list_files",
        "find_file",
        "search_dir",
        "search_file",
    }
)
PATH_KEYS = ("file_path", "path", "filepath", "filename", "file", "notebook_path", "target_file")
RANGE_KEYS = ("offset", "limit", "view_range", "start_line", "end_line", "line_start", "line_end")


def norm_tool(name: str) -> str:
    """A tool's name without its namespace, lower-case (`mcp__fs__Read` -> `read`)."""
    return name.rsplit("__", 1)[-1].rsplit(".", 1)[-1].lower()


def path_of(args: Mapping[str, Any]) -> str | None:
    """The file a call's arguments name, under any of the usual keys."""
    for key in PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


SHELL_TOOLS = frozenset(
    {
        *("bash", "shell", "exec", "sh", "run_shell_command", "terminal", "powershell", "execute_bash"),
        *("cmd_run", "exec_command", "local_shell"),  # Codex CLI's: `{"cmd": "..."}`, argv lists
    }
)
_SHELL_FLAGS = frozenset({"-c", "-lc", "-ic", "-lic", "/c", "-command"})


def shell_command(args: Mapping[str, Any]) -> str | None:
    """The command line a shell call runs: `command` (a string), Codex's `cmd`, or an
    argv list (`["bash", "-lc", "script"]`: the script; any other list: its words)."""
    for key in ("command", "cmd"):
        value = args.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            if len(value) >= 3 and value[-2].lower() in _SHELL_FLAGS:
                return value[-1]
            return " ".join(value)
    return None


# `open`, `goto`: SWE-agent's file viewer (a window of the file); `create`: its new file;
# `search_*`, `find_file`: its searches.
_SHELL_READERS = frozenset({"cat", "sed", "head", "tail", "nl", "less", "more", "open"})
_SHELL_SEARCH = frozenset(
    {"grep", "rg", "find", "ls", "tree", "fd", "ag", "search_dir", "search_file", "find_file"}
)
_LEADING_CD = re.compile(r"^\s*cd\s+\S+\s*&&\s*")
_REDIRECT = re.compile(r"(?:^|[^2&])>>?\s*([^\s|&;<>]+)")


def shell_action(command: str) -> tuple[str, str | None, bool]:
    """(kind, path, whole) of a simple shell command: what a coding agent reads or writes.

    Only plain one-command lines are classified; anything else (pipelines that run
    programs, scripts, installs) is a "command", retired only by an identical rerun.
    """
    cmd = _LEADING_CD.sub("", command.strip(), count=1)
    if not cmd or "\n" in cmd.split("<<", 1)[0]:
        return "command", None, False
    m = _REDIRECT.search(cmd.split("<<", 1)[0]) or _REDIRECT.search(_after_heredoc_word(cmd))
    if m and m.group(1) not in ("/dev/null",):
        return "write", m.group(1), ">>" not in m.group(0)  # an append writes nothing whole
    try:
        words = shlex.split(cmd.split("|", 1)[0])
    except ValueError:
        return "command", None, False
    if not words:
        return "command", None, False
    prog = words[0].rsplit("/", 1)[-1]
    files = [w for w in words[1:] if not w.startswith("-") and ("/" in w or "." in w)]
    if prog == "sed" and "-i" in words:
        return "edit", files[-1] if files else None, False
    if prog == "create" and len(files) == 1:
        return "write", files[0], True
    if prog in _SHELL_READERS and len(files) == 1:
        return "read", files[0], prog == "cat" and len(words) == 2 and "|" not in cmd
    if prog in _SHELL_SEARCH:
        return "search", None, False
    return "command", None, False


# The heredoc's delimiter word (`EOF`, `'EOF'`, `"EOF"`, `-EOF`) right after `<<`.
_HEREDOC_WORD = re.compile(r"^-?\s*(?:'[^'\n]*'|\"[^\"\n]*\"|[^\s;|&<>]+)")


def _after_heredoc_word(cmd: str) -> str:
    """The rest of a heredoc's first line after its delimiter word (`cat <<'EOF' > f`
    redirects there), or "" when the first line opens no heredoc."""
    first = cmd.split("\n", 1)[0]
    if "<<" not in first:
        return ""
    rest = first.split("<<", 1)[1]
    return _HEREDOC_WORD.sub("", rest, count=1)


def authored_write(name: str, args: Mapping[str, Any]) -> bool:
    """Whether a write call carries the file's content in its own arguments: a write tool,
    or a shell write by `cat`/`tee` from a heredoc, or by `echo`/`printf`, with no pipe
    on its first line (not a program's output sent to a file, whose text the arguments do
    not hold: `run > f`, `cat << EOF | python > f`)."""
    command = shell_command(args) if norm_tool(name) in SHELL_TOOLS else None
    if command is None:
        return True
    cmd = _LEADING_CD.sub("", command.strip(), count=1)
    prog = cmd.split(None, 1)[0].rsplit("/", 1)[-1] if cmd else ""
    if "|" in cmd.split("\n", 1)[0]:
        return False
    return prog in ("echo", "printf") or (prog in ("cat", "tee") and "<<" in cmd)


def call_kind(name: str, args: Mapping[str, Any]) -> str:
    """ "read", "write", "edit", "search" or "command": what the call does, by its tool
    (a shell's by its command)."""
    tool = norm_tool(name)
    command = shell_command(args) if tool in SHELL_TOOLS else None
    if command is not None:
        return shell_action(command)[0]
    if tool == "str_replace_editor":  # SWE-agent's and OpenHands' editor: the command says what it does
        cmd = str(args.get("command", ""))
        return {"view": "read", "create": "write"}.get(cmd, "edit")
    if tool in _READ_TOOLS:
        return "read"
    if tool in _WRITE_TOOLS:
        return "write"
    if tool in _EDIT_TOOLS:
        return "edit"
    if tool in _SEARCH_TOOLS:
        return "search"
    return "command"
