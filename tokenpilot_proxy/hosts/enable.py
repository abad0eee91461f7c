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
- gemini-cli: `GOOGLE_GEMINI_BASE_URL` in `~/.gemini/.env`, the MCP server and (without
  systemd) a `SessionStart` hook in `~/.gemini/settings.json` (`gemini_config`).
- openclaw: `tokenpilot openclaw install` (OpenClaw starts the proxy itself).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tokenpilot_proxy.hosts import DEFAULT_PORTS, DEFAULT_UPSTREAMS, gemini_config
from tokenpilot_proxy.hosts.backups import Backups, Manifest
from tokenpilot_proxy.hosts.codex_toml import TomlEditError, enable_text
from tokenpilot_proxy.hosts.mcp_config import (
    SERVER_NAME,
    claude_json_path,
    claude_mcp_text,
    is_claude_json,
    json_object,
    mcp_available,
    server_command,
)
from tokenpilot_proxy.hosts.service import (
    launcher_command,
    systemctl_user,
    systemd_user_available,
    unit_name,
    unit_path,
    unit_text,
)
from tokenpilot_proxy.hosts.undo import (
    unapply_claude_mcp,
    unapply_claude_settings,
    unapply_gemini_settings,
    unapply_lines,
    user_edits,
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


def serve_args(upstream: str, port: int, keep: str = "balanced") -> list[str]:
    return ["--upstream", upstream, "--port", str(port)] + (["--keep", keep] if keep != "balanced" else [])


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
    args = serve_args(ns.upstream or DEFAULT_UPSTREAMS["claude-code"], port, getattr(ns, "keep", "balanced"))
    try:
        data = json_object(_read(path), path, "env")
    except ValueError as exc:
        raise EnableError(str(exc)) from exc
    data.setdefault("env", {})["ANTHROPIC_BASE_URL"] = url
    plan = Plan(notes=[f"Claude Code sends its requests to {url} (env.ANTHROPIC_BASE_URL)"])
    if _with_mcp(ns, plan):
        global_config = claude_json_path()
        try:
            plan.writes[global_config] = claude_mcp_text(_read(global_config), global_config).encode()
        except ValueError as exc:
            raise EnableError(str(exc)) from exc
        plan.notes.append(
            f"Claude Code lists recall_artifact from TokenPilot's MCP server (mcpServers.{SERVER_NAME} "
            f"in {global_config}); allow mcp__{SERVER_NAME}__recall_artifact in its permissions"
        )
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
    args = serve_args(ns.upstream or DEFAULT_UPSTREAMS["codex"], port, getattr(ns, "keep", "balanced"))
    plan = Plan(notes=[f'Codex uses model_provider = "tokenpilot" ({url}/v1)'])
    mcp = server_command() if _with_mcp(ns, plan) else None
    try:
        text = enable_text(_read(path) or "", f"{url}/v1", mcp=mcp)
    except TomlEditError as exc:
        raise EnableError(f"{path}: {exc}") from exc
    plan.writes[path] = text.encode()
    if mcp is not None:
        plan.notes.append(
            f"Codex lists recall_artifact from TokenPilot's MCP server ([mcp_servers.{SERVER_NAME}])"
        )
    if mode == "launcher":
        plan.notes.append(
            "no systemd user service here, and Codex runs hooks only once trusted: start the proxy "
            f"before codex (e.g. from your shell's rc file) with\n    {launcher_command(url, log_path('codex'), args)}"
        )
    _service(plan, "codex", args, mode)
    return plan


def plan_gemini_cli(ns: argparse.Namespace, mode: str) -> Plan:
    port = ns.port or DEFAULT_PORTS["gemini-cli"]
    url = f"http://127.0.0.1:{port}"
    args = serve_args(ns.upstream or DEFAULT_UPSTREAMS["gemini-cli"], port, getattr(ns, "keep", "balanced"))
    env_file = gemini_config.env_path()
    plan = Plan(notes=[f"Gemini CLI sends its requests to {url} ({gemini_config.ENV_VAR} in {env_file})"])
    plan.writes[env_file] = gemini_config.env_text(_read(env_file), url).encode()
    mcp = _with_mcp(ns, plan)
    hook = launcher_command(url, log_path("gemini-cli"), args) if mode == "launcher" else None
    path = gemini_config.settings_path(ns.config)
    try:
        plan.writes[path] = gemini_config.settings_text(_read(path), path, mcp=mcp, hook=hook).encode()
    except ValueError as exc:
        raise EnableError(str(exc)) from exc
    if mcp:
        plan.notes.append(f"Gemini CLI lists recall_artifact from TokenPilot's MCP server "
                          f"(mcpServers.{SERVER_NAME} in {path})")  # fmt: skip
    if hook is not None:
        plan.notes.append("a SessionStart hook starts the proxy when it is not running")
    plan.notes.append(
        f"Gemini CLI reads {env_file} only in folders you trust and that have no .env of their own; "
        f"to cover every folder, also put `export {gemini_config.ENV_VAR}={url}` in your shell profile. "
        "It needs a Gemini API key (GEMINI_API_KEY): Login with Google and Vertex AI bypass the proxy"
    )
    _service(plan, "gemini-cli", args, mode)
    return plan


def _with_mcp(ns: argparse.Namespace, plan: Plan) -> bool:
    """Whether to register the MCP server: unless `--no-mcp`, where it can run."""
    if getattr(ns, "no_mcp", False):
        plan.notes.append("no MCP server (--no-mcp): the proxy adds recall_artifact and answers it")
        return False
    if not mcp_available():
        plan.notes.append(
            "no MCP server registered: pip install 'tokenpilot[mcp]' and enable again to list "
            "recall_artifact in the client; meanwhile the proxy adds it and answers it"
        )
        return False
    return True


PLANNERS: dict[str, Callable[[argparse.Namespace, str], Plan]] = {
    "claude-code": plan_claude_code,
    "codex": plan_codex,
    "gemini-cli": plan_gemini_cli,
}


def apply(host: str, plan: Plan, backups: Backups) -> list[str]:
    """Back up, then write what changed; returns one line per file written."""
    backups.keep(list(plan.writes))
    done = []
    for path, data in plan.writes.items():
        backups.note_written(path, data)
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
    argv += ["--keep", getattr(ns, "keep", "balanced")]
    from tokenpilot_openclaw.install import add_install_arguments

    p = argparse.ArgumentParser(prog="tokenpilot enable openclaw")
    add_install_arguments(p)
    return run_install(p.parse_args(argv))


# what `tokenpilot serve` needs (the `proxy` extra), by the module that brings it
PROXY_MODULES = ("aiohttp", "prometheus_client")


def missing_proxy_extra() -> list[str]:
    """The modules of the `proxy` extra this environment lacks."""
    return [m for m in PROXY_MODULES if importlib.util.find_spec(m) is None]


def port_holder(port: int, host: str = "127.0.0.1") -> str | None:
    """Who answers on the port: None (free), "tokenpilot" (a proxy of ours), or "other"."""
    with socket.socket() as s:
        s.settimeout(0.5)
        if s.connect_ex((host, port)) != 0:
            return None
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as resp:  # noqa: S310
            body = json.loads(resp.read(4096) or b"{}")
        ours = isinstance(body, dict) and body.get("status") == "ok" and "in_memory" in body
        return "tokenpilot" if ours else "other"
    except (urllib.error.URLError, OSError, ValueError):
        return "other"


def preflight(host: str, port: int) -> str | None:
    """Why enabling `host` would leave it unable to run, with the one command to fix it;
    None when it can run: the proxy's extra is installed, the port is free or a TokenPilot
    proxy's, and the command the host will run (this interpreter, the launcher) exists."""
    missing = missing_proxy_extra()
    if missing:
        return (
            f"the proxy {host} would use needs the proxy extra ({', '.join(missing)} missing): "
            "pip install 'tokenpilot[proxy]'"
        )
    if port_holder(port) == "other":
        return f"port {port} is taken by another program: choose a free one with --port"
    if not Path(sys.executable).exists() or importlib.util.find_spec("tokenpilot_proxy.hosts.launch") is None:
        return f"{sys.executable} cannot run the proxy's launcher: reinstall with pip install 'tokenpilot[proxy]'"
    return None


def run_enable(ns: argparse.Namespace) -> int:
    backups = Backups(ns.host)
    if ns.host == "openclaw":
        return _enable_openclaw(ns, backups)
    problem = preflight(ns.host, ns.port or DEFAULT_PORTS[ns.host])
    if problem is not None:
        print(f"tokenpilot enable {ns.host}: nothing changed: {problem}", file=sys.stderr)
        return 2
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


def _kept_edits(host: str, manifest: Manifest) -> tuple[dict[str, bytes], list[str]]:
    """For each file the user edited after enable: the file with only enable's change taken
    out (path -> bytes); and the user's edits where that is not possible (diffs)."""
    merged: dict[str, bytes] = {}
    conflicts: list[str] = []
    for e in manifest.entries:
        path = Path(e.path)
        if e.written is None or not path.exists() or not Path(e.written).exists():
            continue  # written before this was kept, or removed by the user: restore
        wrote, now = Path(e.written).read_bytes(), path.read_bytes()
        if now == wrote:
            continue  # as enable left it: the backup goes back byte for byte
        before = Path(e.backup).read_text(encoding="utf-8") if e.backup else None
        try:
            now_text, wrote_text = now.decode("utf-8"), wrote.decode("utf-8")
        except UnicodeDecodeError:
            conflicts.append(f"{path}: changed since enable and not text")
            continue
        if host == "claude-code" and is_claude_json(path):
            ours = json.loads(wrote_text).get("mcpServers", {}).get(SERVER_NAME)  # what enable wrote
            undone = unapply_claude_mcp(before, now_text, ours)
            if undone is not None and before is None and json.loads(undone) == {}:
                continue  # nothing left but what enable wrote: remove the file
        elif host == "claude-code" and path.name.endswith(".json"):
            undone = unapply_claude_settings(before, now_text)
        elif host == "gemini-cli" and path.name.endswith(".json"):
            ours = json.loads(wrote_text).get("mcpServers", {}).get(SERVER_NAME)  # what enable wrote
            undone = unapply_gemini_settings(before, now_text, ours)
        else:
            undone = unapply_lines(before or "", wrote_text, now_text)
        if undone is None:
            conflicts.append(user_edits(wrote_text, now_text, str(path)))
        else:
            merged[e.path] = undone.encode("utf-8")
    return merged, conflicts


def _stop_launched(host: str) -> list[str]:
    """The launcher's files for this host (log, lock, pid), and the proxy it started, if it
    is still running: nothing of enable's is left behind."""
    done = []
    log_file = log_path(host)
    pid_file = log_file.with_suffix(".pid")
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"tokenpilot" in cmdline and b"serve" in cmdline:
            os.kill(pid, signal.SIGTERM)
            done.append(f"stopped the proxy the launcher started (pid {pid})")
    except (OSError, ValueError):
        pass
    for f in (pid_file, log_file.with_suffix(".lock"), log_file):
        if f.exists():
            f.unlink()
            done.append(f"removed {f}")
    return done


def run_disable(ns: argparse.Namespace) -> int:
    backups = Backups(ns.host)
    manifest = backups.load()
    if manifest is None:
        print(f"tokenpilot is not enabled for {ns.host} (no backup in {backups.dir})")
        return 0
    merged, conflicts = _kept_edits(ns.host, manifest)
    if conflicts:
        print(
            f"tokenpilot disable {ns.host}: nothing changed. You edited what enable wrote, so taking it "
            "back would lose your edits; undo the lines below (or remove TokenPilot's settings by "
            "hand), then run disable again:",
            file=sys.stderr,
        )
        for c in conflicts:
            print(c, file=sys.stderr)
        return 1
    unit = unit_path(ns.host)
    stop = str(unit.absolute()) in manifest.paths() and unit.exists()
    if stop:
        systemctl_user("disable", "--now", unit_name(ns.host))
    for line in [*backups.restore(merged), *_stop_launched(ns.host)]:
        print(f"  - {line}")
    if stop:
        systemctl_user("daemon-reload")
    kept = " (your later edits kept)" if merged else ""
    print(f"tokenpilot disabled for {ns.host}: its files are as they were before `enable`{kept}")
    return 0
