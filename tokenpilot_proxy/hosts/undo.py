"""`disable` after the user edited a file `enable` changed: take back only what enable added.

`enable` wrote a file; if it is still exactly what enable wrote, `disable` restores the
backup byte for byte. If the user changed it since (another setting, another hook), a
restore would throw their edit away. Then only enable's own change is taken back:

- Claude Code's `settings.json`, structurally: `env.ANTHROPIC_BASE_URL` back to what it was
  (or gone), our `SessionStart` hook entry removed, and containers enable created removed
  when they are empty again; Gemini CLI's `settings.json` the same way (our MCP server
  and hook);
- any other file (Codex's `config.toml`, a systemd unit), by lines: each hunk enable changed
  is turned back where the user's edits left it untouched.

Where that is not possible (the user edited the very lines enable wrote, or the file is no
longer JSON), the answer is None and `disable` changes nothing and shows the user's edits.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from tokenpilot.ingest.stabilize import MCP_SERVER_NAME

LAUNCHER = "tokenpilot_proxy.hosts.launch"  # what our hook's command runs
OLD_LAUNCHER = "tokenpilot_openclaw.hosts.launch"  # written by enable before 0.2


def unapply_lines(before: str, written: str, current: str) -> str | None:
    """`current` with enable's change (`before` -> `written`) taken back hunk by hunk; None
    when a hunk's lines were edited since (a three-way merge that refuses conflicts)."""
    b, w, c = (s.splitlines(keepends=True) for s in (before, written, current))
    at: dict[int, int] = {}  # a line of what enable wrote -> the same line in the current file
    for tag, i1, i2, j1, _j2 in difflib.SequenceMatcher(None, w, c, autojunk=False).get_opcodes():
        if tag == "equal":
            at.update({i1 + k: j1 + k for k in range(i2 - i1)})
    out = list(c)
    hunks = [
        op for op in difflib.SequenceMatcher(None, w, b, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    for _tag, i1, i2, j1, j2 in reversed(hunks):  # from the end: earlier positions stay valid
        if i2 > i1:  # enable wrote w[i1:i2]: it must still be there, whole and untouched
            idx = [at.get(k) for k in range(i1, i2)]
            if any(i is None for i in idx) or idx != list(range(idx[0], idx[0] + len(idx))):  # type: ignore[operator]
                return None
            start, end = idx[0], idx[-1] + 1  # type: ignore[operator]
        elif i1 > 0 and (i1 - 1) in at:  # enable removed lines after w[i1-1]
            start = end = at[i1 - 1] + 1
        elif i1 < len(w) and i1 in at:
            start = end = at[i1]
        elif not w:
            start = end = 0
        else:
            return None
        out[start:end] = b[j1:j2]
    return "".join(out)


def _ours(entry: Any) -> bool:
    hooks = entry.get("hooks") if isinstance(entry, dict) else None
    return isinstance(hooks, list) and any(
        isinstance(h, dict) and (LAUNCHER in str(h.get("command")) or OLD_LAUNCHER in str(h.get("command")))
        for h in hooks
    )


def _objects(before: str | None, current: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(current, before) as JSON objects; None when either is not one."""
    try:
        now = json.loads(current) if current.strip() else {}
        old = json.loads(before) if before and before.strip() else {}
    except json.JSONDecodeError:
        return None
    return (now, old) if isinstance(now, dict) and isinstance(old, dict) else None


def unapply_claude_settings(before: str | None, current: str) -> str | None:
    """Claude Code's settings with enable's keys taken out, the user's other edits kept."""
    got = _objects(before, current)
    if got is None:
        return None
    now, old = got
    env, old_env = now.get("env"), old.get("env") if isinstance(old.get("env"), dict) else {}
    if isinstance(env, dict):
        if "ANTHROPIC_BASE_URL" in old_env:
            env["ANTHROPIC_BASE_URL"] = old_env["ANTHROPIC_BASE_URL"]
        else:
            env.pop("ANTHROPIC_BASE_URL", None)
        if not env and "env" not in old:
            del now["env"]
    _drop_hooks(now, old)
    return json.dumps(now, indent=2, ensure_ascii=False) + "\n"


def _drop_hooks(now: dict[str, Any], old: dict[str, Any]) -> None:
    """Our `SessionStart` hook entries out of `now`, and the containers enable made if empty."""
    hooks = now.get("hooks")
    if isinstance(hooks, dict) and isinstance(hooks.get("SessionStart"), list):
        hooks["SessionStart"] = [g for g in hooks["SessionStart"] if not _ours(g)]
        old_hooks = old.get("hooks") if isinstance(old.get("hooks"), dict) else {}
        if not hooks["SessionStart"] and "SessionStart" not in old_hooks:
            del hooks["SessionStart"]
        if not hooks and "hooks" not in old:
            del now["hooks"]


def _drop_server(now: dict[str, Any], old: dict[str, Any], ours: Any) -> bool:
    """Our MCP server out of `now` (or back as it was before enable); False when the user
    changed our entry (it is theirs now)."""
    servers = now.get("mcpServers")
    old_servers = old.get("mcpServers") if isinstance(old.get("mcpServers"), dict) else {}
    if isinstance(servers, dict) and MCP_SERVER_NAME in servers:
        if servers[MCP_SERVER_NAME] != ours:
            return False
        if MCP_SERVER_NAME in old_servers:
            servers[MCP_SERVER_NAME] = old_servers[MCP_SERVER_NAME]
        else:
            del servers[MCP_SERVER_NAME]
        if not servers and "mcpServers" not in old:
            del now["mcpServers"]
    return True


def _unapply_json(before: str | None, current: str, ours: Any, *, hooks: bool, auth: bool) -> str | None:
    """A client's JSON settings with enable's keys taken out (our MCP server `ours`, when
    given; our hook and sign-in where asked), the user's other edits kept; None when the
    file is no JSON object or the user changed our server entry."""
    got = _objects(before, current)
    if got is None:
        return None
    now, old = got
    if ours is not None and not _drop_server(now, old, ours):
        return None
    if hooks:
        _drop_hooks(now, old)
    if auth:
        _drop_auth(now, old)
    return json.dumps(now, indent=2, ensure_ascii=False) + "\n"


def unapply_gemini_settings(before: str | None, current: str, ours: Any) -> str | None:
    """Gemini CLI's settings.json with our MCP server (`ours`), `SessionStart` hook and the
    sign-in enable chose taken out."""
    return _unapply_json(before, current, ours, hooks=True, auth=True)


def _drop_auth(now: dict[str, Any], old: dict[str, Any]) -> None:
    """The API-key sign-in enable chose where the user had none, unless they chose since."""
    security, old_security = now.get("security"), old.get("security")
    auth = security.get("auth") if isinstance(security, dict) else None
    old_auth = old_security.get("auth") if isinstance(old_security, dict) else None
    if not isinstance(auth, dict) or auth.get("selectedType") != "gemini-api-key":
        return
    if isinstance(old_auth, dict) and "selectedType" in old_auth:
        return  # the user's own choice, before enable
    del auth["selectedType"]
    if not auth and not isinstance(old_auth, dict):
        del security["auth"]
    if not security and not isinstance(old_security, dict):
        del now["security"]


def unapply_claude_mcp(before: str | None, current: str, ours: dict[str, Any]) -> str | None:
    """Claude Code's global config with our MCP server (`ours`, under `mcpServers.tokenpilot`)
    taken out, or put back as it was before enable; the rest as Claude Code and the user
    left it. None when the user changed our entry (it is theirs now)."""
    return _unapply_json(before, current, ours, hooks=False, auth=False)


def user_edits(written: str, current: str, name: str) -> str:
    """The user's edits since enable, as a unified diff, to show when nothing is changed."""
    return "".join(
        difflib.unified_diff(
            written.splitlines(keepends=True),
            current.splitlines(keepends=True),
            f"{name} (as enable wrote it)",
            f"{name} (now)",
        )
    )
