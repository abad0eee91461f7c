"""`tokenpilot serve`'s settings, and the secrets they name by environment variable."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tokenpilot.lifecycle.settings import KEEP
from tokenpilot.store.artifacts import default_store_dir
from tokenpilot.store.open import is_store_url
from tokenpilot.store.protocol import redact_store_url
from tokenpilot_proxy.serve_options import (
    DEFAULT_CLIENT_TIMEOUT_S,
    DEFAULT_PORT,
    DEFAULT_RECALL_QUEUE,
    DEFAULT_RECALL_WORKERS,
    DEFAULT_UPSTREAM_KEY_ENV,
    MB,
    default_state_dir,
)
from tokenpilot_proxy.upstream import basic_auth, redact_url, split_credentials, url_user


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Everything `tokenpilot serve` is told. Secrets are named by environment variable only."""

    upstream: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    upstream_key_env: str = DEFAULT_UPSTREAM_KEY_ENV
    auth_token_env: str | None = None
    store_dir: Path = field(default_factory=default_store_dir)
    state_dir: Path | None = field(default_factory=default_state_dir)
    max_body_bytes: int = 32 * MB
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    models: tuple[str, ...] = ()
    flush_interval_s: float = 30.0
    store_url: str | None = None  # redis://...: originals and state shared by replicas
    prune_interval_s: float = 600.0  # how often the store is brought under its size limit (0: never)
    list_sessions: bool = False  # per-session stats at /tokenpilot/stats without --auth-token-env
    upstream_password_env: str | None = None  # names the variable holding the upstream's Basic password
    store_lock_ttl_s: float = 5.0  # a session lock outlives a replica that stopped renewing it by this
    store_lock_wait_s: float = 30.0  # how long a call waits for a lock another replica holds and renews
    store_timeout_s: float = 1.0  # a Redis command unanswered this long: Redis is skipped until it answers
    workers: int = 1  # processes serving one port (`serve --workers`); > 1 shares the disk store
    reuse_port: bool = False  # bind with SO_REUSEPORT (each worker binds the port itself)
    client_timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S  # a client silent this long is closed
    max_connections: int | None = None  # open client connections; None: from the file limit
    recall_workers: int = DEFAULT_RECALL_WORKERS  # threads for recalls (slow: their own pool)
    recall_queue: int = DEFAULT_RECALL_QUEUE  # recalls that may wait for one; more: 503
    prices_file: Path | None = None  # JSON of model -> $ per million tokens, over the built-in table
    # Sessions leave memory (their state stays in the state store, read back at the next
    # call) once idle this long, or beyond this many, least recently used first. 0: never.
    # No effect without a state store (`--no-state`): memory is then the only copy.
    session_idle_s: float = 900.0
    max_sessions: int = 1000
    keep: str = "balanced"  # the retention dial (`LifecycleConfig.for_keep`): all, balanced, lean

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise ValueError(f"--upstream must be an http(s) URL, got {redact_url(self.upstream)!r}")
        if self.store_url is not None and not is_store_url(self.store_url):
            raise ValueError(
                f"--store must be a redis:// (or rediss://, unix://) URL, got {redact_store_url(self.store_url)!r}"
            )
        if self.max_body_bytes <= 0:
            raise ValueError("the request size limit must be positive")
        if self.keep not in KEEP:
            raise ValueError(f"--keep must be one of {', '.join(KEEP)}, got {self.keep!r}")
        for name, value, least in (
            ("--lock-ttl", self.store_lock_ttl_s, 0.001),
            ("--lock-wait", self.store_lock_wait_s, 0.0),
            ("--store-timeout", self.store_timeout_s, 0.001),
        ):
            if not least <= value < float("inf"):
                raise ValueError(f"{name} must be a number of seconds {'>= 0' if least == 0 else '> 0'}")
        if self.workers < 1:
            raise ValueError(f"--workers must be at least 1, got {self.workers}")
        if self.workers > 1 and self.store_url is None and self.state_dir is None:
            raise ValueError(
                "--workers > 1 with --no-state would give each worker its own sessions: "
                "keep the state folder (shared by the workers) or give --store"
            )
        if self.client_timeout_s <= 0:
            raise ValueError("--client-timeout must be positive")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError("--max-connections must be at least 1")
        if self.recall_workers < 1 or self.recall_queue < 0:
            raise ValueError("--recall-workers must be at least 1 and --recall-queue at least 0")
        if self.session_idle_s < 0 or self.max_sessions < 0:
            raise ValueError("--session-idle and --max-sessions must be 0 (off) or positive")


class SetupError(RuntimeError):
    """The proxy cannot start as configured (a missing environment variable, a bad path)."""


def _secret_from_env(var: str, what: str) -> str | None:
    """`$var`, or None when unset or empty; `SetupError` naming the variable (never the value)
    when it holds a control character, which no HTTP header can carry."""
    value = os.environ.get(var) or None
    if value is not None and any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise SetupError(
            f"{var} ({what}) contains a control character such as a line break; "
            "set it to the bare value on one line"
        )
    return value


def read_secrets(settings: ProxySettings) -> tuple[str | None, str | None, str | None]:
    """(upstream API key, Basic auth from `--upstream-password-env` or None, the proxy's own
    bearer token) from the environment; `SetupError` when they contradict the settings.
    Also run by `serve --workers`' parent, so a missing secret is said once, before any
    worker starts."""
    key = _secret_from_env(settings.upstream_key_env, "the upstream API key")
    basic = None
    if settings.upstream_password_env:
        basic = _basic_auth_from_env(settings.upstream, settings.upstream_password_env)
    if key and (basic is not None or split_credentials(settings.upstream)[1]):
        where = (
            f"{settings.upstream_password_env} holds"
            if settings.upstream_password_env
            else "the upstream URL carries"
        )
        raise SetupError(
            f"{where} a password for the upstream and {settings.upstream_key_env} holds an API key: "
            f"choose one (unset {settings.upstream_key_env}, or drop the password)"
        )
    token = None
    if settings.auth_token_env:
        token = _secret_from_env(settings.auth_token_env, "the proxy's bearer token")
        if not token:
            raise SetupError(f"--auth-token-env names {settings.auth_token_env}, which is not set or empty")
    return key, basic, token


def _basic_auth_from_env(upstream: str, var: str) -> str:
    """Basic auth for the URL's user (or none) and the password in `$var`, so the password
    is kept out of the process list, where `--upstream http://user:pass@...` shows it."""
    user, has_password = url_user(upstream)
    if has_password:
        raise SetupError(
            f"--upstream-password-env names {var}, but the --upstream URL carries a password "
            "too: remove it from the URL (keep the user: http://user@host/v1)"
        )
    password = _secret_from_env(var, "the upstream password")
    if not password:
        raise SetupError(f"--upstream-password-env names {var}, which is not set or empty")
    return basic_auth(user, password)
