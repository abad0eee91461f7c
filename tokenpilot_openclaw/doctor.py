"""`tokenpilot openclaw doctor`: is TokenPilot wired into OpenClaw, and is it paying off?

Checks, in order: the config has our provider, default model, pruning off and the
plugin; OpenClaw accepts the config; the proxy answers (OpenClaw starts it only for a
turn, so when it is down doctor starts it from the config's `localService` and stops it
again); the provider's cached tokens come back and the prefix breaks, with the first
differing message (from the proxy's per-session stats, which its saved state carries
across restarts); and the proxy's log file. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tokenpilot_openclaw import PLUGIN_ID
from tokenpilot_openclaw.openclaw_config import (
    MODEL_COMPAT,
    PROVIDER_ID,
    ConfigFileError,
    config_path,
    find_openclaw,
    get_path,
    load_config,
    run_openclaw,
    serve_option,
)
from tokenpilot_proxy.checks import FAIL, OK, WARN, Check, check_log, check_proxy, check_stats, saved_stats
from tokenpilot_proxy.serve_options import default_state_dir

# OpenClaw provider `api` values the proxy answers: /v1/chat/completions, /v1/responses, /v1/messages
SERVED_APIS = ("openai-completions", "openai-responses", "anthropic-messages")


def add_doctor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="PATH",
        help="OpenClaw config (default $OPENCLAW_CONFIG_PATH or ~/.openclaw/openclaw.json)",
    )
    p.add_argument("--proxy-url", help="proxy base URL (default: from the config's tokenpilot provider)")
    p.add_argument(
        "--skip-openclaw",
        action="store_true",
        help="do not run `openclaw config validate` / `plugins inspect`",
    )
    p.add_argument(
        "--no-start",
        action="store_true",
        help="when the proxy is down, do not start it from the config's localService to check it",
    )
    p.add_argument("--json", action="store_true", help="print the checks as JSON")


def check_config(data: dict[str, Any]) -> tuple[list[Check], str | None, str | None]:
    """Config checks; also the proxy URL and the auth-token variable the config names."""
    out: list[Check] = []
    provider = get_path(data, "models", "providers", PROVIDER_ID)
    if not isinstance(provider, dict):
        out.append(
            Check(
                FAIL,
                f"models.providers.{PROVIDER_ID}",
                "missing: run `tokenpilot openclaw install --upstream URL --model ID`",
            )
        )
        return out, None, None
    base = str(provider.get("baseUrl", ""))
    proxy_url = base[:-3] if base.endswith("/v1") else base or None
    api = provider.get("api")
    out.append(
        Check(
            OK if api in SERVED_APIS else FAIL,
            "provider api",
            f"{api!r} (the proxy serves {', '.join(SERVED_APIS)})",
        )
    )
    models = provider.get("models") if isinstance(provider.get("models"), list) else []
    missing = [
        m.get("id")
        for m in models
        if isinstance(m, dict) and any((m.get("compat") or {}).get(k) is not True for k in MODEL_COMPAT)
    ]
    if not models:
        out.append(Check(FAIL, "provider models", "none listed"))
    elif missing:
        out.append(
            Check(
                WARN,
                "model compat",
                f"{missing} lack supportsPromptCacheKey/sendSessionAffinityHeaders: sessions cannot be told apart",
            )
        )
    else:
        out.append(Check(OK, "provider models", ", ".join(str(m.get("id")) for m in models)))
    service = provider.get("localService")
    auth_env = None
    if isinstance(service, dict):
        cmd = Path(str(service.get("command", "")))
        args = [str(a) for a in service.get("args") or []]
        if "--auth-token-env" in args[:-1]:
            auth_env = args[args.index("--auth-token-env") + 1]
        good = cmd.is_absolute() and cmd.exists()
        out.append(
            Check(
                OK if good else FAIL,
                "localService command",
                f"{cmd}" + ("" if good else " does not exist (reinstall?)"),
            )
        )
    else:
        out.append(Check(WARN, "localService", "absent: start `tokenpilot serve` yourself"))
    primary = get_path(data, "agents", "defaults", "model")
    primary = primary.get("primary") if isinstance(primary, dict) else primary
    uses = isinstance(primary, str) and primary.startswith(PROVIDER_ID + "/")
    out.append(
        Check(
            OK if uses else WARN,
            "default model",
            f"{primary!r}" + ("" if uses else f" does not go through {PROVIDER_ID}/"),
        )
    )
    mode = get_path(data, "agents", "defaults", "contextPruning", "mode")
    out.append(
        Check(
            OK if mode in (None, "off") else WARN,
            "contextPruning",
            f"mode {mode or 'off (default)'}"
            + ("" if mode in (None, "off") else ": rewrites old tool results, breaks the cache"),
        )
    )
    entry = get_path(data, "plugins", "entries", PLUGIN_ID)
    enabled = isinstance(entry, dict) and entry.get("enabled") is True
    out.append(
        Check(
            OK if enabled else FAIL,
            f"plugin {PLUGIN_ID}",
            "enabled" if enabled else "not enabled: recall_artifact is missing",
        )
    )
    slot = get_path(data, "plugins", "slots", "contextEngine")
    out.append(Check(OK if slot == PLUGIN_ID else WARN, "context engine slot", f"{slot or 'legacy'}"))
    if isinstance(entry, dict) and isinstance(entry.get("config"), dict) and entry["config"].get("proxyUrl"):
        plugin_url = str(entry["config"]["proxyUrl"]).rstrip("/")
        if proxy_url and plugin_url != proxy_url.rstrip("/"):
            out.append(
                Check(WARN, "plugin proxyUrl", f"{plugin_url} differs from the provider's {proxy_url}")
            )
    return out, proxy_url, auth_env


def check_openclaw(path: Path) -> list[Check]:
    binary = find_openclaw()
    if not binary:
        return [Check(WARN, "openclaw", "not on PATH: config not validated")]
    with ThreadPoolExecutor(2) as pool:  # each is a Node start-up: run them side by side
        validating = pool.submit(run_openclaw, binary, ["config", "validate"], config=path)
        inspecting = pool.submit(
            run_openclaw, binary, ["plugins", "inspect", PLUGIN_ID, "--runtime", "--json"], config=path
        )
        res, inspected = validating.result(), inspecting.result()
    out = [
        Check(
            OK if res.ok else FAIL,
            "openclaw config validate",
            res.output.splitlines()[-1] if res.output else "",
        )
    ]
    try:
        info = json.loads(inspected.output[inspected.output.index("{") :]).get("plugin", {})
    except ValueError:
        info = {}
    loaded = info.get("status") == "loaded" and "recall_artifact" in (info.get("toolNames") or [])
    detail = (
        f"status {info.get('status')}, tools {info.get('toolNames')}, engines {info.get('contextEngineIds')}"
    )
    out.append(Check(OK if loaded else FAIL, "plugin loads", detail if info else inspected.output[-300:]))
    return out


def state_dir_of(service: Mapping[str, Any]) -> Path | None:
    """Where the `tokenpilot serve` of `service` keeps its session state (None: Redis or none)."""
    args = service.get("args") or []
    if "--no-state" in [str(a) for a in args] or serve_option(args, "--store"):
        return None
    state = serve_option(args, "--state-dir")
    return Path(state).expanduser() if state else default_state_dir()


def run_doctor(args: argparse.Namespace) -> int:
    checks = openclaw_checks(args)
    if args.json:
        print(
            json.dumps([{"status": c.status, "check": c.what, "detail": c.detail} for c in checks], indent=2)
        )
    else:
        for c in checks:
            print(c.line())
    return 1 if any(c.status == FAIL for c in checks) else 0


def openclaw_checks(args: argparse.Namespace) -> list[Check]:
    """Every check of `tokenpilot openclaw doctor` (also `tokenpilot doctor --host openclaw`)."""
    path = config_path(args.config)
    checks: list[Check] = []
    proxy_url, auth_env, service = args.proxy_url, None, None
    try:
        data = load_config(path)
    except ConfigFileError as exc:
        data = None
        checks.append(Check(FAIL, "config", str(exc)))
    if data is not None:
        checks.append(
            Check(OK if data else FAIL, "config", f"{path}" + ("" if data else " missing or empty"))
        )
        found, url, auth_env = check_config(data)
        checks += found
        proxy_url = proxy_url or url
        service = get_path(data, "models", "providers", PROVIDER_ID, "localService")
        service = service if isinstance(service, dict) else None
    with ThreadPoolExecutor(1) as pool:  # OpenClaw's own checks (Node) run beside the proxy's
        openclaw = pool.submit(check_openclaw, path) if data and not args.skip_openclaw else None
        proxy_checks: list[Check] = []
        if proxy_url:
            state_dir = state_dir_of(service) if service else None
            proxy_checks = check_proxy(
                proxy_url.rstrip("/"), auth_env, service, start=not args.no_start, state_dir=state_dir
            )
            down = proxy_checks and proxy_checks[0].status == WARN
            if down and state_dir:  # and not started: its saved state tells
                proxy_checks += check_stats(saved_stats(state_dir))
        checks += openclaw.result() if openclaw is not None else []
    checks += proxy_checks
    if service is not None:
        log_file = serve_option(service.get("args") or [], "--log-file")
        checks += check_log(Path(log_file) if log_file else None)
    return checks
