"""`tokenpilot enable HOST` / `tokenpilot disable HOST` (options in `hosts/__init__.py`).

Per host, one plan: the files to write (with their new bytes, computed from what is
there, so a second enable writes nothing new) and how the proxy starts. Every file is
backed up (`backups.Backups`) before its first change; disable stops the service, if
any, and restores the backups byte for byte.

- claude-code: `env.ANTHROPIC_BASE_URL` in `~/.claude/settings.json` (or
  `$CLAUDE_CONFIG_DIR`); without systemd, a `SessionStart` hook runs the launcher,
  which Claude Code runs before a session's first request, without a trust prompt.
- codex: the `tokenpilot` provider in `$CODEX_HOME/config.toml` (`codex_toml`).
  Codex runs user hooks only once the user has trusted them, so without systemd the
  launcher command is printed, to run before `codex` (or from a login script).
- openclaw: `tokenpilot openclaw install` (OpenClaw starts the proxy itself).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenpilot_proxy.hosts import DEFAULT_PORTS, DEFAULT_UPSTREAMS
from tokenpilot_proxy.hosts.backups import Backups
from tokenpilot_proxy.hosts.codex_toml import TomlEditError, enable_text
from tokenpilot_proxy.hosts.service import (
    launcher_command,
    systemctl_user,
    systemd_user_available,
    unit_name,
    unit_path,
    unit_text,
)


class EnableError(Exception):
    """A host's settings cannot be changed safely; nothing was written."""


@dataclass
class Plan:
    """What enabling a host writes: path -> new bytes, and what to say about it."""

    writes: dict[Path, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unit: str | None = None  # the systemd user unit to enable and start


def claude_settings_path(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(base).expanduser() if base else Path.home() / ".claude") / "settings.json"


def codex_config_path(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("CODEX_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".codex") / "config.toml"


def log_path(host: str) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser() / "tokenpilot" / f"serve-{host}.log"


def serve_args(upstream: str, port: int) -> list[str]:
    return ["--upstream", upstream, "--port", str(port)]


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


def _start_mode(requested: str) -> str:
    if requested != "auto":
        return requested
    return "systemd" if systemd_user_available() else "launcher"


def _service(plan: Plan, host: str, args: list[str], mode: str) -> None:
    if mode == "systemd":
        plan.writes[unit_path(host)] = unit_text(host, args).encode()
        plan.unit = unit_name(host)
        plan.notes.append(f"systemd user service {unit_name(host)} starts the proxy at login")


def plan_claude_code(ns: argparse.Namespace, mode: str) -> Plan:
    path = claude_settings_path(ns.config)
    port = ns.port or DEFAULT_PORTS["claude-code"]
    url = f"http://127.0.0.1:{port}"
    args = serve_args(ns.upstream or DEFAULT_UPSTREAMS["claude-code"], port)
    text = _read(path)
    try:
        data: Any = json.loads(text) if text and text.strip() else {}
    except json.JSONDecodeError as exc:
        raise EnableError(f"{path} is not valid JSON ({exc}); fix it first") from exc
    if not isinstance(data, dict) or not isinstance(data.get("env", {}), dict):
        raise EnableError(f"{path}: expected a JSON object with an object `env`")
    data.setdefault("env", {})["ANTHROPIC_BASE_URL"] = url
    plan = Plan(notes=[f"Claude Code sends its requests to {url} (env.ANTHROPIC_BASE_URL)"])
    if mode == "launcher":
        command = launcher_command(url, log_path("claude-code"), args)
        hooks = data.setdefault("hooks", {})
        if not isinstance(hooks, dict) or not isinstance(hooks.get("SessionStart", []), list):
            raise EnableError(f"{path}: expected `hooks` to be an object of lists")
        groups = hooks.setdefault("SessionStart", [])
        entry = {"hooks": [{"type": "command", "command": command}]}
        if entry not in groups:
            groups.append(entry)
        plan.notes.append("a SessionStart hook starts the proxy when it is not running")
    plan.writes[path] = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()
    _service(plan, "claude-code", args, mode)
    return plan


def plan_codex(ns: argparse.Namespace, mode: str) -> Plan:
    path = codex_config_path(ns.config)
    port = ns.port or DEFAULT_PORTS["codex"]
    url = f"http://127.0.0.1:{port}"
    args = serve_args(ns.upstream or DEFAULT_UPSTREAMS["codex"], port)
    try:
        text = enable_text(_read(path) or "", f"{url}/v1")
    except TomlEditError as exc:
        raise EnableError(f"{path}: {exc}") from exc
    plan = Plan({path: text.encode()}, [f'Codex uses model_provider = "tokenpilot" ({url}/v1)'])
    if mode == "launcher":
        plan.notes.append(
            "no systemd user service here, and Codex runs hooks only once trusted: start the proxy "
            f"before codex (e.g. from your shell's rc file) with\n    {launcher_command(url, log_path('codex'), args)}"
        )
    _service(plan, "codex", args, mode)
    return plan


PLANNERS: dict[str, Callable[[argparse.Namespace, str], Plan]] = {
    "claude-code": plan_claude_code,
    "codex": plan_codex,
}


def apply(host: str, plan: Plan, backups: Backups) -> list[str]:
    """Back up, then write what changed; returns one line per file written."""
    backups.keep(list(plan.writes))
    done = []
    for path, data in plan.writes.items():
        if path.exists() and path.read_bytes() == data:
            continue  # enabling twice changes nothing
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tokenpilot.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        done.append(f"wrote {path}")
    if plan.unit is not None:
        for cmd in (("daemon-reload",), ("enable", "--now", plan.unit)):
            ok, out = systemctl_user(*cmd)
            if not ok:
                done.append(f"systemctl --user {' '.join(cmd)} failed: {out}")
    return done


def _enable_openclaw(ns: argparse.Namespace, backups: Backups) -> int:
    """`tokenpilot openclaw install`, with its files backed up for `disable`."""
    from tokenpilot_openclaw.install import run_install  # the `openclaw` extra (json5), imported only here
    from tokenpilot_openclaw.openclaw_config import config_path

    if not ns.upstream or not ns.model:
        print("tokenpilot enable openclaw: --upstream and --model are required", file=sys.stderr)
        return 2
    path = config_path(ns.config)
    backups.keep([path, path.with_name(path.name + ".tokenpilot.bak")])
    argv = ["--upstream", ns.upstream, "--port", str(ns.port or DEFAULT_PORTS["openclaw"])]
    argv += [x for m in ns.model for x in ("--model", m)] + (["--config", ns.config] if ns.config else [])
    from tokenpilot_openclaw.install import add_install_arguments

    p = argparse.ArgumentParser(prog="tokenpilot enable openclaw")
    add_install_arguments(p)
    return run_install(p.parse_args(argv))


def run_enable(ns: argparse.Namespace) -> int:
    backups = Backups(ns.host)
    if ns.host == "openclaw":
        return _enable_openclaw(ns, backups)
    try:
        plan = PLANNERS[ns.host](ns, _start_mode(ns.start))
    except EnableError as exc:
        print(f"tokenpilot enable {ns.host}: {exc}", file=sys.stderr)
        return 1
    done = apply(ns.host, plan, backups)
    print(f"tokenpilot enabled for {ns.host}" + ("" if done else " (already: nothing changed)"))
    for line in [*done, *plan.notes]:
        print(f"  - {line}")
    print(f"  undo with: tokenpilot disable {ns.host}")
    return 0


def run_disable(ns: argparse.Namespace) -> int:
    backups = Backups(ns.host)
    manifest = backups.load()
    if manifest is None:
        print(f"tokenpilot is not enabled for {ns.host} (no backup in {backups.dir})")
        return 0
    unit = unit_path(ns.host)
    stop = str(unit.absolute()) in manifest.paths() and unit.exists()
    if stop:
        systemctl_user("disable", "--now", unit_name(ns.host))
    for line in backups.restore():
        print(f"  - {line}")
    if stop:
        systemctl_user("daemon-reload")
    print(f"tokenpilot disabled for {ns.host}: its files are as they were before `enable`")
    return 0
