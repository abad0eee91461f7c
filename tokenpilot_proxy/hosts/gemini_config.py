"""Gemini CLI's own files, as `tokenpilot enable gemini-cli` writes them and doctor reads them.

- `~/.gemini/.env` (`$GEMINI_CLI_HOME/.gemini` where set): `GOOGLE_GEMINI_BASE_URL=<proxy>`.
  Gemini CLI takes the first env file it finds walking up from the working folder
  (`.gemini/.env`, then `.env`, in each), ending with `~/.gemini/.env` and `~/.env`; in a
  folder the user has not trusted it takes only API keys from any of them; a variable
  already exported wins over every file. `nearer_env_files` and `trusted` say where the
  file is not read.
- `~/.gemini/settings.json`: TokenPilot's MCP server under `mcpServers` (Gemini CLI calls its
  tool `mcp_tokenpilot_recall_artifact`); without systemd, a `SessionStart` hook that
  starts the proxy; and, where the user chose no sign-in, `security.auth.selectedType`
  "gemini-api-key" (with `GOOGLE_GEMINI_BASE_URL` set and no choice made, Gemini CLI 0.61
  picks its "gateway" sign-in, which `gemini -p` refuses as invalid).

The proxy is reached only with a Gemini API key: signing in with Google (Code Assist) or
Vertex AI sends requests elsewhere (`AUTH_BYPASSING`).

Standard library only: `enable` and `doctor` mount on a base install.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from tokenpilot_proxy.hosts.mcp_config import SERVER_NAME, json_object, server_command

ENV_VAR = "GOOGLE_GEMINI_BASE_URL"
API_KEY_AUTH = "gemini-api-key"
DEFAULT_UPSTREAM = "https://generativelanguage.googleapis.com"
# `security.auth.selectedType` values whose requests never use GOOGLE_GEMINI_BASE_URL
AUTH_BYPASSING = {
    "oauth-personal": "Login with Google (Code Assist)",
    "vertex-ai": "Vertex AI",
    "cloud-shell": "Cloud Shell",
    "compute-default-credentials": "Compute Engine credentials",
}
_LINE = re.compile(rf"^\s*(?:export\s+)?{ENV_VAR}\s*=\s*(.*?)\s*$")


def gemini_home() -> Path:
    """Where Gemini CLI keeps `.gemini`: `$GEMINI_CLI_HOME`, else the home folder."""
    base = os.environ.get("GEMINI_CLI_HOME")
    return Path(base).expanduser() if base else Path.home()


def settings_path(explicit: str | None = None) -> Path:
    return Path(explicit).expanduser() if explicit else gemini_home() / ".gemini" / "settings.json"


def env_path() -> Path:
    return gemini_home() / ".gemini" / ".env"


def env_text(text: str | None, url: str) -> str:
    """The env file with `GOOGLE_GEMINI_BASE_URL=url`: its line replaced where there is one
    (the first; later ones go, dotenv would read the last), else appended."""
    lines = (text or "").splitlines(keepends=True)
    out: list[str] = []
    done = False
    for line in lines:
        if _LINE.match(line):
            if not done:
                out.append(f"{ENV_VAR}={url}\n")
                done = True
            continue
        out.append(line)
    if not done:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out.append(f"{ENV_VAR}={url}\n")
    return "".join(out)


def env_value(text: str) -> str | None:
    """The `GOOGLE_GEMINI_BASE_URL` an env file sets (the last line wins, as in dotenv)."""
    value = None
    for line in text.splitlines():
        if m := _LINE.match(line):
            raw = m.group(1)
            value = (
                raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'" else raw.split(" #")[0]
            )
    return value


def mcp_entry() -> dict[str, Any]:
    command, args = server_command()
    return {"command": command, "args": args}


def selected_auth(data: dict[str, Any]) -> Any:
    security = data.get("security") if isinstance(data.get("security"), dict) else {}
    auth = security.get("auth") if isinstance(security.get("auth"), dict) else {}
    return auth.get("selectedType")


def settings_text(text: str | None, path: Path, *, mcp: bool, hook: str | None) -> str:
    """Gemini CLI's settings with the API-key sign-in where none was chosen, and our MCP
    server and/or `SessionStart` hook."""
    data = json_object(text, path, "mcpServers")
    if selected_auth(data) is None:
        security = data.setdefault("security", {})
        if not isinstance(security, dict) or not isinstance(security.setdefault("auth", {}), dict):
            raise ValueError(f"{path}: expected `security.auth` to be an object")
        security["auth"]["selectedType"] = API_KEY_AUTH
    if mcp:
        data.setdefault("mcpServers", {})[SERVER_NAME] = mcp_entry()
    if hook is not None:
        hooks = data.setdefault("hooks", {})
        if not isinstance(hooks, dict) or not isinstance(hooks.get("SessionStart", []), list):
            raise ValueError(f"{path}: expected `hooks` to be an object of lists")
        entry = {"hooks": [{"type": "command", "command": hook, "name": "tokenpilot-proxy"}]}
        if entry not in hooks.setdefault("SessionStart", []):
            hooks["SessionStart"].append(entry)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def nearer_env_files(cwd: Path) -> list[Path]:
    """Env files Gemini CLI would read instead of `~/.gemini/.env`, started in `cwd`."""
    home = gemini_home().resolve()
    found = []
    d = cwd.resolve()
    while True:
        if d == home:
            break  # at home, ~/.gemini/.env comes first
        for f in (d / ".gemini" / ".env", d / ".env"):
            if f.is_file():
                found.append(f)
        if d.parent == d:
            break
        d = d.parent
    return found


def trusted(cwd: Path, settings: dict[str, Any]) -> bool | None:
    """Whether Gemini CLI trusts `cwd` (True where folder trust is off); None: not decided,
    so Gemini CLI asks (interactive) or treats it as untrusted."""
    if os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") in ("true", "false"):
        return os.environ["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    sec = settings.get("security") if isinstance(settings.get("security"), dict) else {}
    trust = sec.get("folderTrust") if isinstance(sec.get("folderTrust"), dict) else {}
    if trust.get("enabled", True) is False:
        return True
    path = gemini_home() / ".gemini" / "trustedFolders.json"
    try:
        rules = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError):
        return None
    best: tuple[int, bool] | None = None
    here = cwd.resolve()
    for folder, rule in rules.items() if isinstance(rules, dict) else ():
        target = Path(folder).expanduser().resolve()
        if rule == "TRUST_PARENT":
            target = target.parent
        if here == target or target in here.parents:
            depth = len(target.parts)
            if best is None or depth > best[0]:
                best = (depth, rule != "DO_NOT_TRUST")
    return None if best is None else best[1]
