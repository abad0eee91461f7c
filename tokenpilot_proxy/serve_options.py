"""The options of `tokenpilot serve`, and the defaults they share with the proxy.

Standard library only: the CLI mounts `serve` (and `--help` works) on a base install,
before anything of the `openclaw` extra (aiohttp) is imported.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenpilot.lifecycle.settings import KEEP
from tokenpilot.store.artifacts import default_store_dir
from tokenpilot.store.state_files import default_state_dir

DEFAULT_PORT = 8787
DEFAULT_UPSTREAM_KEY_ENV = "TOKENPILOT_UPSTREAM_API_KEY"
MB = 2**20
DEFAULT_CLIENT_TIMEOUT_S = 60.0
DEFAULT_RECALL_WORKERS = 2
DEFAULT_RECALL_QUEUE = 32


def add_keep_argument(p: argparse.ArgumentParser) -> None:
    """`--keep`: the retention dial, the same option wherever the proxy is started from
    (`serve`, `enable`, `openclaw install`)."""
    p.add_argument(
        "--keep",
        choices=KEEP,
        default="balanced",
        help="how much of the history stays in view: all (the most kept), balanced (default: 95%% or "
        "more of what later answers use), lean (the fewest tokens, more recalls); docs/frontier.md",
    )


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--upstream",
        metavar="URL",
        help="OpenAI-compatible base URL, with its /v1 (e.g. https://api.openai.com/v1; "
        "https://api.anthropic.com/v1 for /v1/messages); "
        "user:password@ in it is sent as HTTP Basic auth (and never printed)",
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="no provider, no key: put the built-in scripted upstream behind the proxy (OpenAI chat "
        "and Responses), to see a reduction, a recall and the dashboard (instead of --upstream)",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)"
    )
    p.add_argument(
        "--upstream-key-env",
        default=DEFAULT_UPSTREAM_KEY_ENV,
        metavar="VAR",
        help=f"environment variable holding the upstream API key (default {DEFAULT_UPSTREAM_KEY_ENV}); "
        "when unset, the client's Authorization header is passed on",
    )
    p.add_argument(
        "--upstream-password-env",
        metavar="VAR",
        help="environment variable holding the upstream's HTTP Basic auth password, for the user "
        "named in --upstream (http://user@host/v1); keeps it out of the process list",
    )
    p.add_argument(
        "--auth-token-env",
        metavar="VAR",
        help="require 'Authorization: Bearer <$VAR>' on every endpoint but /health "
        "(/tokenpilot/stats lists session ids only then, or with --list-sessions)",
    )
    p.add_argument(
        "--list-sessions",
        action="store_true",
        help="list session ids and per-session stats at /tokenpilot/stats without --auth-token-env "
        "(anyone on this machine can then read them, and a session id is all a recall needs)",
    )
    p.add_argument(
        "--store-dir",
        type=Path,
        default=default_store_dir(),
        help="artifact store (default ~/.cache/tokenpilot/artifacts)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="session state files (default ~/.cache/tokenpilot/sessions)",
    )
    p.add_argument("--no-state", action="store_true", help="keep session state in memory only")
    add_keep_argument(p)
    p.add_argument(
        "--store",
        metavar="URL",
        help="share originals and session state with other replicas: redis://[:password@]host:port/db"
        "[?namespace=NAME] (replaces --store-dir and --state-dir; needs tokenpilot[redis])",
    )
    p.add_argument(
        "--lock-ttl",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="with --store: a session's lock is renewed every SECONDS/5 while a replica works on it, "
        "so a replica killed holding it loses it within SECONDS (default 5)",
    )
    p.add_argument(
        "--lock-wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="with --store: how long a call waits for a session another replica is working on "
        "(renewing its lock) before it is served from this replica's memory (default 30)",
    )
    p.add_argument(
        "--store-timeout",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="with --store: a Redis command unanswered this long (a stalled server) makes the proxy "
        "skip Redis and serve from memory until a background probe sees it answer (default 1)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="serve with N processes on one port (SO_REUSEPORT; a parent restarts a dead worker and "
        "stops all on SIGTERM/SIGINT). They share the store and the session locks: the state folder "
        "(file locks) or --store (default 1)",
    )
    p.add_argument(
        "--max-body-mb", type=float, default=32.0, help="largest accepted request body (default 32 MB)"
    )
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to connect to the upstream")
    p.add_argument(
        "--read-timeout",
        type=float,
        default=300.0,
        help="seconds the upstream may stay silent (then 504 / an error event)",
    )
    p.add_argument(
        "--client-timeout",
        type=float,
        default=DEFAULT_CLIENT_TIMEOUT_S,
        metavar="S",
        help=f"seconds a client may stay silent: before its request's headers are complete, between "
        f"two body chunks, or idle between requests; then the connection is closed (a stalled body "
        f"gets a 408 first) (default {DEFAULT_CLIENT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="open client connections; a new one over the cap closes the oldest idle one, or is "
        "answered 503 with Retry-After when all are busy (default: half the open-file limit less "
        "128, at most 1024)",
    )
    p.add_argument(
        "--recall-workers",
        type=int,
        default=DEFAULT_RECALL_WORKERS,
        metavar="N",
        help=f"threads for artifact recalls and pattern searches, apart from the chat path's "
        f"(default {DEFAULT_RECALL_WORKERS})",
    )
    p.add_argument(
        "--recall-queue",
        type=int,
        default=DEFAULT_RECALL_QUEUE,
        metavar="N",
        help=f"recalls that may wait for a worker; more are answered 503 with Retry-After "
        f"(default {DEFAULT_RECALL_QUEUE})",
    )
    p.add_argument(
        "--models",
        default="",
        help="comma-separated model ids for GET /v1/models (default: ask the upstream)",
    )
    p.add_argument(
        "--flush-interval", type=float, default=30.0, help="seconds between state saves (0: only at shutdown)"
    )
    p.add_argument(
        "--prices",
        type=Path,
        metavar="FILE",
        help="JSON of model -> {input, cached_input, output[, cache_write, profile]} in $ per million "
        "tokens, over the built-in list prices the dashboard and /metrics use",
    )
    p.add_argument(
        "--session-idle",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="evict a session from memory after this long unused; its state stays in the state "
        "store and is read back at its next call (default 900; 0: never; no effect with --no-state)",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=1000,
        help="most sessions held in memory; beyond, the least recently used are evicted as with "
        "--session-idle (default 1000; 0: no cap; no effect with --no-state)",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument(
        "--log-file",
        type=Path,
        help="also append the log here (OpenClaw keeps only a short tail of a local service's output)",
    )
