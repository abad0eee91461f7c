"""`tokenpilot openclaw doctor`: is TokenPilot wired into OpenClaw, and is it paying off?

Checks, in order: the config has our provider, default model, pruning off and the
plugin; OpenClaw accepts the config; the proxy answers; and the provider's cached
tokens come back (from the proxy's per-session stats). Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import PLUGIN_ID
from .openclaw_config import (
    MODEL_COMPAT,
    PROVIDER_ID,
    ConfigFileError,
    config_path,
    find_openclaw,
    get_path,
    load_config,
    run_openclaw,
)

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True, slots=True)
class Check:
    status: str
    what: str
    detail: str = ""

    def line(self) -> str:
        return f"[{self.status:>4}] {self.what}" + (f": {self.detail}" if self.detail else "")


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
            OK if api == "openai-completions" else FAIL,
            "provider api",
            f"{api!r} (the proxy serves openai-completions)",
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
    out = []
    res = run_openclaw(binary, ["config", "validate"], config=path)
    out.append(
        Check(
            OK if res.ok else FAIL,
            "openclaw config validate",
            res.output.splitlines()[-1] if res.output else "",
        )
    )
    res = run_openclaw(binary, ["plugins", "inspect", PLUGIN_ID, "--runtime", "--json"], config=path)
    try:
        info = json.loads(res.output[res.output.index("{") :]).get("plugin", {})
    except ValueError:
        info = {}
    loaded = info.get("status") == "loaded" and "recall_artifact" in (info.get("toolNames") or [])
    detail = (
        f"status {info.get('status')}, tools {info.get('toolNames')}, engines {info.get('contextEngineIds')}"
    )
    out.append(Check(OK if loaded else FAIL, "plugin loads", detail if info else res.output[-300:]))
    return out


def _get_json(url: str, token: str | None, timeout_s: float = 3.0) -> Any:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def check_proxy(proxy_url: str, auth_env: str | None) -> list[Check]:
    token = os.environ.get(auth_env) if auth_env else None
    try:
        _get_json(f"{proxy_url}/health", None)
    except (OSError, ValueError) as exc:
        return [
            Check(
                WARN,
                "proxy",
                f"{proxy_url} not answering ({exc}); OpenClaw starts it on its first model call",
            )
        ]
    out = [Check(OK, "proxy", f"{proxy_url} healthy")]
    try:
        stats = _get_json(f"{proxy_url}/tokenpilot/stats", token)
    except urllib.error.HTTPError as exc:
        hint = f" (set {auth_env})" if exc.code == 401 and auth_env else ""
        return [*out, Check(FAIL, "proxy stats", f"HTTP {exc.code}{hint}")]
    except (OSError, ValueError) as exc:
        return [*out, Check(FAIL, "proxy stats", str(exc))]
    return out + check_stats(stats)


def check_stats(stats: dict[str, Any]) -> list[Check]:
    """Are cached tokens coming back? Judged on sessions with at least two reported calls."""
    sessions = stats.get("sessions") or {}
    if not sessions:
        return [Check(WARN, "cache hits", "no sessions yet: run an OpenClaw turn, then doctor again")]
    out = []
    t = stats.get("totals") or {}
    out.append(
        Check(
            OK,
            "usage",
            f"{len(sessions)} session(s), {t.get('calls', 0)} calls, {t.get('prompt_tokens', 0):,} prompt tokens, "
            f"{t.get('cached_tokens', 0):,} cached ({100 * t.get('hit_rate', 0):.1f}%), {t.get('tokens_saved', 0):,} tokens saved",
        )
    )
    warm = {sid: s for sid, s in sessions.items() if s.get("usage_reports", 0) >= 2}
    if not warm:
        out.append(Check(WARN, "cache hits", "no session has two reported calls yet"))
    elif not any(s.get("cached_tokens", 0) for s in warm.values()):
        out.append(
            Check(
                FAIL,
                "cache hits",
                "none reported: the upstream may not return prompt_tokens_details.cached_tokens, or prompts are shorter than its cache minimum",
            )
        )
    else:
        out.append(
            Check(
                OK,
                "cache hits",
                f"{sum(1 for s in warm.values() if s.get('cached_tokens'))}/{len(warm)} multi-call sessions hit the cache",
            )
        )
    breaks = {sid: s.get("last_prefix_break") for sid, s in sessions.items() if s.get("prefix_breaks")}
    if breaks:
        out.append(
            Check(
                WARN, "prefix breaks", "; ".join(f"{sid}: {cause}" for sid, cause in list(breaks.items())[:5])
            )
        )
    if t.get("errors"):
        out.append(Check(WARN, "upstream errors", f"{t['errors']} (see the proxy's log)"))
    return out


def run_doctor(args: argparse.Namespace) -> int:
    path = config_path(args.config)
    checks: list[Check] = []
    proxy_url, auth_env = args.proxy_url, None
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
        if data and not args.skip_openclaw:
            checks += check_openclaw(path)
    if proxy_url:
        checks += check_proxy(proxy_url.rstrip("/"), auth_env)
    if args.json:
        print(
            json.dumps([{"status": c.status, "check": c.what, "detail": c.detail} for c in checks], indent=2)
        )
    else:
        for c in checks:
            print(c.line())
    return 1 if any(c.status == FAIL for c in checks) else 0
