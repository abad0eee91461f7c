"""`tokenpilot doctor [--host claude-code|codex|gemini-cli|openclaw]`: is each host wired to the proxy,
is the proxy up, do cache hits come back, and why did a session's cached prefix break?

Per host, its own config first:
- Claude Code: `~/.claude/settings.json` `env.ANTHROPIC_BASE_URL` points at the proxy
  (and no `ANTHROPIC_BASE_URL` in this shell overrides it elsewhere);
- Codex: `$CODEX_HOME/config.toml` (default `~/.codex`) selects a `model_provider` whose
  `base_url` is the proxy's `/v1` and whose `wire_api` is "responses" (Codex ignores
  `OPENAI_BASE_URL`, and a top-level `openai_base_url` costs a WebSocket fallback);
- Gemini CLI: `~/.gemini/.env` sets `GOOGLE_GEMINI_BASE_URL` to the proxy, and nothing
  hides it here (an exported variable, a nearer .env, an untrusted folder, a sign-in that
  does not use the Gemini API: `hosts.gemini_config`);
- OpenClaw: everything `tokenpilot openclaw doctor` checks (it stays as an alias).

Then the proxy the config names: `/health`, and the usage it saw per session (hit rate
from the provider's own usage) with each prefix break's first differing message, likely
cause and fix (`breaks.diagnose`, recorded by the proxy). A proxy that lists no session
(no `--auth-token-env` token given, no `--list-sessions`) is read from its state
directory instead, which the user running doctor can read anyway.

Standard library only: the command is registered on a base install.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenpilot_openclaw.doctor import openclaw_checks
from tokenpilot_proxy.checks import FAIL, OK, WARN, Check, check_proxy, check_stats, saved_stats
from tokenpilot_proxy.hosts import gemini_config
from tokenpilot_proxy.hosts.enable import missing_proxy_extra
from tokenpilot_proxy.hosts.mcp_config import MODULE, SERVER_NAME, claude_json_path
from tokenpilot_proxy.serve_options import DEFAULT_PORT, default_state_dir

HOSTS = ("claude-code", "codex", "gemini-cli", "openclaw")
DEFAULT_PROXY = f"http://127.0.0.1:{DEFAULT_PORT}"


def add_host_doctor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        choices=HOSTS,
        action="append",
        help="the host to check (repeatable; default: every host whose config file exists)",
    )
    p.add_argument(
        "--proxy-url", help=f"the proxy's base URL (default: from the host's config, else {DEFAULT_PROXY})"
    )
    p.add_argument(
        "--auth-token-env",
        metavar="VAR",
        help="environment variable holding the proxy's bearer token (its per-session stats need it)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the proxy's session state, read when the proxy lists no sessions or is down "
        f"(default {default_state_dir()})",
    )
    p.add_argument(
        "--claude-settings", type=Path, help="Claude Code settings (default ~/.claude/settings.json)"
    )
    p.add_argument("--codex-home", type=Path, help="Codex home (default $CODEX_HOME or ~/.codex)")
    p.add_argument("--config", metavar="PATH", help="OpenClaw config (default ~/.openclaw/openclaw.json)")
    p.add_argument("--skip-openclaw", action="store_true", help="do not run the openclaw binary's own checks")
    p.add_argument("--no-start", action="store_true", help="never start OpenClaw's localService to check it")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")


# ---------------------------------------------------------------------------
# Host configs
# ---------------------------------------------------------------------------
def claude_settings_path(explicit: Path | None = None) -> Path:
    return explicit.expanduser() if explicit else Path.home() / ".claude" / "settings.json"


def codex_home(explicit: Path | None = None) -> Path:
    if explicit:
        return explicit.expanduser()
    env = os.environ.get("CODEX_HOME")
    return Path(env).expanduser() if env else Path.home() / ".codex"


def _proxy_base(url: str) -> str:
    """A host's base URL (with or without /v1) -> the proxy's base, for /health and stats."""
    url = url.strip().rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def check_claude_code(path: Path) -> tuple[list[Check], str | None]:
    if not path.exists():
        return [
            Check(FAIL, "claude-code settings", f"{path} missing: run `tokenpilot enable claude-code`")
        ], None
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as exc:
        return [Check(FAIL, "claude-code settings", f"{path}: {exc}")], None
    env = data.get("env") if isinstance(data, dict) else None
    base = env.get("ANTHROPIC_BASE_URL") if isinstance(env, dict) else None
    if not isinstance(base, str) or not base.strip():
        return [
            Check(OK, "claude-code settings", str(path)),
            Check(
                FAIL,
                "ANTHROPIC_BASE_URL",
                "not set in env: Claude Code talks to Anthropic directly "
                "(run `tokenpilot enable claude-code`)",
            ),
        ], None
    out = [Check(OK, "claude-code settings", str(path)), Check(OK, "ANTHROPIC_BASE_URL", base)]
    shell = os.environ.get("ANTHROPIC_BASE_URL")
    if shell and _proxy_base(shell) != _proxy_base(base):
        out.append(
            Check(
                WARN, "shell ANTHROPIC_BASE_URL", f"{shell} in this shell differs from the settings' {base}"
            )
        )
    return out, _proxy_base(base)


def read_toml(path: Path) -> dict[str, Any]:
    """`tomllib` where there is one (3.11+); else the flat `key = "value"` lines and
    `[tables]` a Codex config needs, enough to check it."""
    text = path.read_text(encoding="utf-8")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        return _read_simple_toml(text)
    return tomllib.loads(text)


_TABLE = re.compile(r"^\s*\[([^\[\]]+)\]\s*(?:#.*)?$")
_PAIR = re.compile(r"""^\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^#\s]+))""")


def _read_simple_toml(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    table = out
    for line in text.splitlines():
        if m := _TABLE.match(line):
            table = out
            for part in m.group(1).strip().split("."):
                table = table.setdefault(part.strip().strip('"'), {})
        elif m := _PAIR.match(line):
            value = next((g for g in m.group(2, 3, 4) if g is not None), "")
            table[m.group(1)] = value
    return out


def check_codex(home: Path) -> tuple[list[Check], str | None]:
    path = home / "config.toml"
    if not path.exists():
        return [Check(FAIL, "codex config", f"{path} missing: run `tokenpilot enable codex`")], None
    try:
        data = read_toml(path)
    except (OSError, ValueError) as exc:
        return [Check(FAIL, "codex config", f"{path}: {exc}")], None
    out = [Check(OK, "codex config", str(path))]
    if os.environ.get("OPENAI_BASE_URL"):
        out.append(Check(WARN, "OPENAI_BASE_URL", "set in this shell, but Codex ignores it: the provider "
                         "in config.toml is what sends Codex to the proxy"))  # fmt: skip
    if data.get("openai_base_url"):
        out.append(Check(WARN, "openai_base_url", "top-level openai_base_url makes Codex try a WebSocket "
                         "first and fall back after seconds; use the model_provider block"))  # fmt: skip
    name = data.get("model_provider")
    providers = data.get("model_providers") if isinstance(data.get("model_providers"), dict) else {}
    provider = providers.get(name) if isinstance(name, str) else None
    if name is None:
        out.append(Check(FAIL, "model_provider", "not set: Codex uses its built-in OpenAI provider, not "
                         "the proxy (TokenPilot is not enabled for Codex: run `tokenpilot enable codex`)"))  # fmt: skip
        return out, None
    if not isinstance(provider, dict):
        out.append(Check(FAIL, "model_provider", f"{name!r} has no [model_providers.{name}] block: Codex uses "
                         "its built-in OpenAI provider (run `tokenpilot enable codex`)"))  # fmt: skip
        return out, None
    base = provider.get("base_url")
    if not isinstance(base, str) or not base.strip():
        out.append(Check(FAIL, f"model_providers.{name}.base_url", "missing"))
        return out, None
    out.append(Check(OK, f"model_providers.{name}.base_url", base))
    wire = provider.get("wire_api")
    out.append(
        Check(
            OK if wire == "responses" else FAIL,
            f"model_providers.{name}.wire_api",
            f"{wire!r}" + ("" if wire == "responses" else ': must be "responses" (what Codex speaks)'),
        )
    )
    return out, _proxy_base(base)


def check_gemini_cli(settings_file: Path, cwd: Path) -> tuple[list[Check], str | None]:
    env_file = gemini_config.env_path()
    text = env_file.read_text(encoding="utf-8") if env_file.exists() else ""
    base = gemini_config.env_value(text)
    if not base:
        return [Check(FAIL, gemini_config.ENV_VAR, f"not set in {env_file}: Gemini CLI talks to Google "
                      "directly (run `tokenpilot enable gemini-cli`)")], None  # fmt: skip
    out = [Check(OK, gemini_config.ENV_VAR, f"{base} ({env_file})")]
    try:
        settings = (
            json.loads(settings_file.read_text(encoding="utf-8") or "{}") if settings_file.exists() else {}
        )
    except (OSError, ValueError) as exc:
        return [*out, Check(FAIL, "gemini-cli settings", f"{settings_file}: {exc}")], _proxy_base(base)
    settings = settings if isinstance(settings, dict) else {}
    shell = os.environ.get(gemini_config.ENV_VAR)
    if shell and _proxy_base(shell) != _proxy_base(base):
        out.append(
            Check(WARN, f"shell {gemini_config.ENV_VAR}", f"{shell} in this shell wins over {env_file}")
        )
    nearer = gemini_config.nearer_env_files(cwd)
    if nearer and not shell:
        out.append(Check(WARN, "env file", f"in {cwd}, Gemini CLI reads {nearer[0]} instead of {env_file}: "
                         f"add {gemini_config.ENV_VAR} there, or export it in your shell"))  # fmt: skip
    if not shell and gemini_config.trusted(cwd, settings) is not True:
        out.append(Check(WARN, "folder trust", f"{cwd} is not a trusted folder: Gemini CLI reads no "
                         f"{gemini_config.ENV_VAR} from env files there (trust it, or export the variable)"))  # fmt: skip
    auth = ((settings.get("security") or {}).get("auth") or {}).get("selectedType")
    if auth in gemini_config.AUTH_BYPASSING:
        out.append(Check(WARN, "sign-in", f"Gemini CLI signs in with {gemini_config.AUTH_BYPASSING[auth]}, "
                         "whose requests do not go through the proxy: use a Gemini API key (GEMINI_API_KEY)"))  # fmt: skip
    return out, _proxy_base(base)


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------
def hosts_to_check(args: argparse.Namespace) -> list[str]:
    if args.host:
        return list(dict.fromkeys(args.host))
    from tokenpilot_openclaw.openclaw_config import config_path

    found = [
        host
        for host, path in (
            ("claude-code", claude_settings_path(args.claude_settings)),
            ("codex", codex_home(args.codex_home) / "config.toml"),
            ("gemini-cli", gemini_config.env_path()),
            ("openclaw", config_path(args.config)),
        )
        if path.exists()
    ]
    return found


def proxy_checks(proxy_url: str, args: argparse.Namespace) -> list[Check]:
    """Health and usage of the proxy; its state directory when it is down or lists no session."""
    state = (args.state_dir or default_state_dir()).expanduser()
    checks = check_proxy(proxy_url, args.auth_token_env, None, start=False, state_dir=state)
    if checks and checks[0].status == WARN:  # down: start it (`tokenpilot serve`); its saved state tells
        down = checks[0].detail.split(";")[0] + ": start `tokenpilot serve` (or `tokenpilot enable <host>`)"
        checks = [Check(WARN, "proxy", down)]
        if state.is_dir():
            checks += check_stats(saved_stats(state))
    return checks


def host_checks(host: str, args: argparse.Namespace) -> list[Check]:
    if host == "openclaw":
        ns = argparse.Namespace(config=args.config, proxy_url=args.proxy_url,
                                skip_openclaw=args.skip_openclaw, no_start=args.no_start, json=False)  # fmt: skip
        return openclaw_checks(ns)
    if host == "claude-code":
        found, url = check_claude_code(claude_settings_path(args.claude_settings))
    elif host == "gemini-cli":
        found, url = check_gemini_cli(gemini_config.settings_path(), Path.cwd())
    else:
        found, url = check_codex(codex_home(args.codex_home))
    found.append(check_mcp(host, args))
    missing = missing_proxy_extra()
    if missing:  # the host points at a proxy that cannot start here
        found.append(Check(FAIL, "proxy extra", f"{', '.join(missing)} missing: `tokenpilot serve` cannot "
                           "run here; pip install 'tokenpilot[proxy]'"))  # fmt: skip
    url = args.proxy_url or url
    if url is None:
        return found
    return found + proxy_checks(_proxy_base(url), args)


def check_mcp(host: str, args: argparse.Namespace) -> Check:
    """TokenPilot's MCP server in the client's MCP configuration: absent (the proxy's own
    tool then), or registered with a command that can start it here."""
    try:
        if host in ("claude-code", "gemini-cli"):  # a JSON file, key mcpServers
            where = claude_json_path() if host == "claude-code" else gemini_config.settings_path()
            data = json.loads(where.read_text(encoding="utf-8") or "{}") if where.exists() else {}
            entry = (data.get("mcpServers") or {}).get(SERVER_NAME) if isinstance(data, dict) else None
        else:
            where = codex_home(args.codex_home) / "config.toml"
            entry = (read_toml(where).get("mcp_servers") or {}).get(SERVER_NAME) if where.exists() else None
    except (OSError, ValueError, AttributeError) as exc:
        return Check(WARN, "MCP server", f"could not read the client's MCP configuration: {exc}")
    if entry is None:
        return Check(OK, "MCP server", f"not registered in {where}: the proxy adds recall_artifact and "
                     "answers it (`tokenpilot enable` registers the server)")  # fmt: skip
    command = entry.get("command") if isinstance(entry, dict) else None
    args_ = entry.get("args") if isinstance(entry, dict) else None
    if not isinstance(command, str) or not (Path(command).exists() or shutil.which(command)):
        return Check(
            FAIL,
            "MCP server",
            f"{where}: {command!r} cannot be started: run `tokenpilot enable {host}` again",
        )
    if isinstance(args_, list) and args_[:2] == ["-m", MODULE]:
        probe = subprocess.run(
            [command, "-c", f"import {MODULE}.serve"], capture_output=True, text=True, timeout=60
        )
        if probe.returncode != 0:
            return Check(FAIL, "MCP server", f"{command} cannot run it: pip install 'tokenpilot[mcp]' "
                         f"({probe.stderr.strip().splitlines()[-1:] or ['no output']})")  # fmt: skip
    return Check(OK, "MCP server", f"{where}: {command} {' '.join(map(str, args_ or []))}")


def run_host_doctor(args: argparse.Namespace) -> int:
    hosts = hosts_to_check(args)
    report: dict[str, list[Check]] = {}
    if not hosts:
        report["hosts"] = [Check(WARN, "hosts", "no Claude Code, Codex, Gemini CLI or OpenClaw config found: "
                                 "`tokenpilot enable <host>`, or name one with --host")]  # fmt: skip
        if args.proxy_url:
            report["proxy"] = proxy_checks(_proxy_base(args.proxy_url), args)
    for host in hosts:
        report[host] = host_checks(host, args)
    print_report(report, as_json=args.json)
    return 1 if any(c.status == FAIL for cs in report.values() for c in cs) else 0


def print_report(report: Mapping[str, list[Check]], *, as_json: bool = False) -> None:
    if as_json:
        rows = [{"host": h, "status": c.status, "check": c.what, "detail": c.detail}
                for h, cs in report.items() for c in cs]  # fmt: skip
        print(json.dumps(rows, indent=2))
        return
    for host, checks in report.items():
        print(f"== {host}")
        for c in checks:
            print(c.line())
