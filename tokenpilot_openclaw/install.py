"""`tokenpilot openclaw install`: make OpenClaw use TokenPilot, from its own config.

Writes the `tokenpilot` provider (OpenClaw starts `tokenpilot serve` itself through
`localService` and stops it on exit), makes it the default model, turns OpenClaw's
own tool-result pruning off (it rewrites old results and breaks the cached prefix),
and enables the plugin. With the `openclaw` binary on PATH it installs the plugin
the official way and validates the result; without it, it prints the JSON5 to paste.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenpilot_openclaw import PLUGIN_DIR, PLUGIN_ID
from tokenpilot_openclaw.openclaw_config import (
    ConfigFileError,
    InstallPlan,
    apply_plan,
    backup_config,
    config_path,
    default_log_file,
    find_openclaw,
    load_config,
    run_openclaw,
    save_config,
    snippet,
)
from tokenpilot_proxy.serve_options import add_keep_argument


def add_install_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--upstream",
        required=True,
        metavar="URL",
        help="the real provider's OpenAI-compatible base URL, with /v1",
    )
    p.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="ID",
        help="model id at the upstream (repeatable; the first becomes the default)",
    )
    p.add_argument(
        "--config",
        metavar="PATH",
        help="OpenClaw config (default $OPENCLAW_CONFIG_PATH or ~/.openclaw/openclaw.json)",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8787)
    p.add_argument(
        "--upstream-key-env",
        default="TOKENPILOT_UPSTREAM_API_KEY",
        metavar="VAR",
        help="variable holding the upstream API key, read by the proxy from OpenClaw's environment",
    )
    p.add_argument(
        "--upstream-password-env",
        metavar="VAR",
        help="variable holding the upstream's HTTP Basic password, for the user named in --upstream "
        "(http://user@host/v1): neither the config nor the process list then shows it",
    )
    p.add_argument(
        "--auth-token-env",
        metavar="VAR",
        help="protect the proxy with the bearer token in $VAR (written as ${VAR}, never its value)",
    )
    p.add_argument(
        "--store-dir", type=Path, help="artifact store of the proxy (default ~/.cache/tokenpilot/artifacts)"
    )
    p.add_argument(
        "--state-dir", type=Path, help="session state of the proxy (default ~/.cache/tokenpilot/sessions)"
    )
    p.add_argument(
        "--log-file",
        type=Path,
        help="the proxy's log file (default <OpenClaw state dir>/logs/tokenpilot-serve.log; "
        "OpenClaw keeps only a short tail of its output, and `doctor` reads it)",
    )
    add_keep_argument(p)
    p.add_argument("--context-window", type=int, default=128_000)
    p.add_argument("--max-tokens", type=int, default=8192)
    p.add_argument(
        "--no-default", action="store_true", help="do not make the TokenPilot model OpenClaw's default"
    )
    p.add_argument(
        "--print", dest="print_only", action="store_true", help="print the JSON5 snippet, change nothing"
    )


def plan_from_args(args: argparse.Namespace) -> InstallPlan:
    return InstallPlan(
        upstream=args.upstream,
        models=tuple(args.model),
        host=args.host,
        port=args.port,
        upstream_key_env=args.upstream_key_env,
        upstream_password_env=args.upstream_password_env,
        auth_token_env=args.auth_token_env,
        store_dir=args.store_dir.expanduser().absolute() if args.store_dir else None,
        state_dir=args.state_dir.expanduser().absolute() if args.state_dir else None,
        log_file=(args.log_file or default_log_file(config_path(args.config))).expanduser().absolute(),
        context_window=args.context_window,
        max_tokens=args.max_tokens,
        plugin_dir=PLUGIN_DIR,
        keep=args.keep,
    )


def run_install(args: argparse.Namespace) -> int:
    plan = plan_from_args(args)
    set_default = not args.no_default
    if args.print_only:
        print(snippet(plan, set_default=set_default))
        return 0
    path = config_path(args.config)
    binary = find_openclaw()
    try:
        backup = backup_config(path)  # before `openclaw plugins install` rewrites the file
        if binary:
            print(f"installing the plugin with {binary} ...")
            res = run_openclaw(
                binary,
                ["plugins", "install", "--link", str(plan.plugin_dir), "--force", "--accept-capabilities"],
                config=path,
            )
            if not res.ok:
                print(f"openclaw plugins install failed ({res.returncode}):\n{res.output}", file=sys.stderr)
                return 1
        data = load_config(path)  # after `plugins install`, which rewrites the file
        changes = apply_plan(data, plan, set_default=set_default, plugin_paths=binary is None)
        save_config(path, data, backup=False)
    except ConfigFileError as exc:
        print(f"tokenpilot openclaw install: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}" + (f" (original kept as {backup})" if backup else ""))
    for line in changes:
        print(f"  - {line}")
    if binary:
        res = run_openclaw(binary, ["config", "validate"], config=path)
        print(res.output)
        if not res.ok:
            print(
                f"openclaw config validate failed: restore {backup or 'the previous file'} or fix the lines above",
                file=sys.stderr,
            )
            return 1
    else:
        print(
            "\n`openclaw` is not on PATH, so the plugin was enabled by path and nothing was validated.\n"
            "If your OpenClaw config lives elsewhere, paste this JSON5 into it:\n"
        )
        print(snippet(plan, set_default=set_default))
    print(
        f"\nNext: export {plan.upstream_key_env}=<your upstream API key> in OpenClaw's environment "
        f"(the proxy reads it; it is never written to the config)"
        + (f", {plan.upstream_password_env}=<the upstream password>" if plan.upstream_password_env else "")
        + (f", and {plan.auth_token_env}=<a random token>" if plan.auth_token_env else "")
        + f". Then run OpenClaw as usual; `tokenpilot openclaw doctor` checks that cache hits come back. Plugin id: {PLUGIN_ID}."
    )
    return 0
