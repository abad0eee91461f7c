"""OpenClaw's config file: where it is, reading it (JSON5), writing it, and our blocks in it.

OpenClaw validates the file strictly (an unknown key stops the gateway), so the
blocks built here use only keys checked against OpenClaw 2026.9.6 with
`openclaw config validate`. OpenClaw itself rewrites the file as plain JSON when it
edits it (`plugins install`, `config set`); we do the same, after a backup.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenpilot_openclaw import PLUGIN_DIR, PLUGIN_ID

PROVIDER_ID = "tokenpilot"
MODEL_COMPAT = {"supportsPromptCacheKey": True, "sendSessionAffinityHeaders": True}


class ConfigFileError(RuntimeError):
    """The OpenClaw config cannot be read or written; the message says which file and why."""


def config_path(explicit: str | Path | None = None) -> Path:
    """`--config`, else `$OPENCLAW_CONFIG_PATH`, else `$HOME/.openclaw/openclaw.json`."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("OPENCLAW_CONFIG_PATH")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".openclaw" / "openclaw.json"


def state_dir(config: Path) -> Path:
    """OpenClaw's state directory: `$OPENCLAW_STATE_DIR`, else the config file's folder
    (`~/.openclaw`, where OpenClaw keeps `openclaw.json` and its logs)."""
    env = os.environ.get("OPENCLAW_STATE_DIR")
    return Path(env).expanduser() if env else config.expanduser().absolute().parent


def default_log_file(config: Path) -> Path:
    """Where `install` points the proxy's log: OpenClaw keeps only a short tail of a
    local service's output, and `doctor` reads this file."""
    return state_dir(config) / "logs" / "tokenpilot-serve.log"


def serve_option(args: Sequence[Any], name: str) -> str | None:
    """The value of `name` (e.g. "--log-file") in a `tokenpilot serve` argument list."""
    items = [str(a) for a in args]
    for i, a in enumerate(items[:-1]):
        if a == name:
            return items[i + 1]
    return None


def load_config(path: Path) -> dict[str, Any]:
    """The parsed config; `{}` when the file does not exist yet."""
    if not path.exists():
        return {}
    try:
        import json5  # the `openclaw` extra; imported here so `tokenpilot --help` works without it
    except ImportError as exc:
        raise ConfigFileError(
            "reading OpenClaw's JSON5 config needs: pip install 'tokenpilot[openclaw]'"
        ) from exc
    try:
        data = json5.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigFileError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path} does not hold a JSON5 object")
    return data


def backup_config(path: Path) -> Path | None:
    """Keep the user's file as it was before TokenPilot first touched it (once)."""
    if not path.exists():
        return None
    backup = path.with_name(path.name + ".tokenpilot.bak")
    if not backup.exists():
        shutil.copy2(path, backup)
    return backup


def save_config(path: Path, data: Mapping[str, Any], *, backup: bool = True) -> Path | None:
    """Write the config (after `backup_config` unless told not to); returns the backup path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    backup_path = backup_config(path) if backup else None
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return backup_path


def get_path(data: Mapping[str, Any], *keys: str) -> Any:
    cur: Any = data
    for k in keys:
        if not isinstance(cur, Mapping) or k not in cur:
            return None
        cur = cur[k]
    return cur


def ensure_dict(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The nested dict at `keys`, created (or replaced, if not a dict) on the way."""
    cur = data
    for k in keys:
        nxt = cur.get(k)
        if not isinstance(nxt, dict):
            nxt = cur[k] = {}
        cur = nxt
    return cur


# ---------------------------------------------------------------------------
# Our blocks
# ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class InstallPlan:
    """What `tokenpilot openclaw install` writes. Secrets appear only as `${VAR}` references."""

    upstream: str
    models: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 8787
    upstream_key_env: str = "TOKENPILOT_UPSTREAM_API_KEY"
    upstream_password_env: str | None = None
    auth_token_env: str | None = None
    store_dir: Path | None = None
    state_dir: Path | None = None
    log_file: Path | None = None
    context_window: int = 128_000
    max_tokens: int = 8192
    timeout_s: int = 300
    python: str = field(default_factory=lambda: sys.executable)
    plugin_dir: Path = PLUGIN_DIR
    keep: str = "balanced"  # the retention dial, passed to `tokenpilot serve --keep`

    @property
    def proxy_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def serve_args(self) -> list[str]:
        args = [
            "-m",
            "tokenpilot_proxy",
            "serve",
            "--upstream",
            self.upstream,
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        args += ["--upstream-key-env", self.upstream_key_env]
        if self.upstream_password_env:
            args += ["--upstream-password-env", self.upstream_password_env]
        if self.auth_token_env:
            args += ["--auth-token-env", self.auth_token_env]
        if self.store_dir:
            args += ["--store-dir", str(self.store_dir)]
        if self.state_dir:
            args += ["--state-dir", str(self.state_dir)]
        if self.log_file:
            args += ["--log-file", str(self.log_file)]
        if self.keep != "balanced":
            args += ["--keep", self.keep]
        return args

    def provider(self) -> dict[str, Any]:
        """`models.providers.tokenpilot`: OpenClaw starts `tokenpilot serve` itself (localService)."""
        return {
            "baseUrl": f"{self.proxy_url}/v1",
            # Sent to the proxy as its bearer token; the upstream key stays in the proxy's environment.
            "apiKey": f"${{{self.auth_token_env}}}" if self.auth_token_env else "tokenpilot-local",
            "api": "openai-completions",
            "timeoutSeconds": self.timeout_s,
            "localService": {
                "command": str(Path(self.python).absolute()),
                "args": self.serve_args(),
                "env": {"PYTHONUNBUFFERED": "1"},
                "healthUrl": f"{self.proxy_url}/health",
                "readyTimeoutMs": 60000,
            },
            "models": [
                {
                    "id": m,
                    "name": f"{m} (TokenPilot)",
                    "contextWindow": self.context_window,
                    "maxTokens": self.max_tokens,
                    "compat": dict(MODEL_COMPAT),
                }
                for m in self.models
            ],
        }

    def plugin_entry(self) -> dict[str, Any]:
        config: dict[str, Any] = {"proxyUrl": self.proxy_url}
        if self.auth_token_env:
            config["authToken"] = f"${{{self.auth_token_env}}}"
        return {"enabled": True, "config": config}

    @property
    def primary(self) -> str:
        return f"{PROVIDER_ID}/{self.models[0]}"


def apply_plan(
    data: dict[str, Any], plan: InstallPlan, *, set_default: bool, plugin_paths: bool
) -> list[str]:
    """Merge our blocks into `data` in place; returns one line per change, for the user."""
    changes = []
    ensure_dict(data, "models", "providers")[PROVIDER_ID] = plan.provider()
    changes.append(
        f"models.providers.{PROVIDER_ID}: proxy {plan.proxy_url} -> {plan.upstream}, started by OpenClaw (localService)"
    )
    defaults = ensure_dict(data, "agents", "defaults")
    if set_default:
        model = defaults.get("model")
        previous = model.get("primary") if isinstance(model, dict) else model
        if isinstance(model, dict):
            model["primary"] = plan.primary
        else:
            defaults["model"] = {"primary": plan.primary}
        changes.append(f"agents.defaults.model.primary: {previous or '(unset)'} -> {plan.primary}")
    pruning = defaults.get("contextPruning")
    if not isinstance(pruning, dict) or pruning.get("mode") != "off":
        defaults["contextPruning"] = {**(pruning if isinstance(pruning, dict) else {}), "mode": "off"}
        changes.append(
            "agents.defaults.contextPruning.mode: off (TokenPilot reduces tool results without breaking the cache)"
        )
    plugins = ensure_dict(data, "plugins")
    entry = ensure_dict(plugins, "entries", PLUGIN_ID)
    entry.update(plan.plugin_entry())
    ensure_dict(plugins, "slots")["contextEngine"] = PLUGIN_ID
    if plugin_paths:
        load = ensure_dict(plugins, "load")
        paths = load.get("paths") if isinstance(load.get("paths"), list) else []
        if str(plan.plugin_dir) not in paths:
            paths.append(str(plan.plugin_dir))
        load["paths"] = paths
    changes.append(
        f"plugins: {PLUGIN_ID} enabled (recall_artifact, context engine), proxyUrl {plan.proxy_url}"
    )
    return changes


def snippet(plan: InstallPlan, *, set_default: bool) -> str:
    """The JSON5 to paste into openclaw.json when we cannot run OpenClaw to do it."""
    data: dict[str, Any] = {}
    apply_plan(data, plan, set_default=set_default, plugin_paths=True)
    return json.dumps(data, indent=2, ensure_ascii=False)


# ---------------------------------------------------------------------------
# The openclaw binary
# ---------------------------------------------------------------------------
def find_openclaw() -> str | None:
    return shutil.which("openclaw")


@dataclass(frozen=True, slots=True)
class RunResult:
    command: tuple[str, ...]
    returncode: int
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_openclaw(binary: str, args: Sequence[str], *, config: Path, timeout_s: float = 120.0) -> RunResult:
    """Run `openclaw ...` on this config file (OPENCLAW_CONFIG_PATH), never updating itself."""
    env = {**os.environ, "OPENCLAW_CONFIG_PATH": str(config), "OPENCLAW_NO_AUTO_UPDATE": "1"}
    cmd = (binary, *args)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return RunResult(cmd, 127, str(exc))
    return RunResult(cmd, proc.returncode, (proc.stdout + proc.stderr).strip())
