"""The proxy: one `Proxy` puts its parts together and serves them as an aiohttp app.

The agent (OpenClaw, Claude Code, Codex, Gemini CLI) talks to this proxy as if it were its provider.
Each model call, on whichever API (`chat`, `anthropic`, `responses`), takes the one
`request_path.RequestPath`: its session is prepared by `TokenPilot.prepare`
(stabilised system prompt, reduced tool outputs, append-only history), forwarded to
the upstream, and its answer relayed; the provider's usage, cached tokens included, is
recorded per session (`state.SessionKeeper`). Originals behind reduced outputs are
served to the plugin's `recall_artifact` tool from `/tokenpilot/artifacts/{id}`
(`endpoints`).

The proxy is a translation layer: all context decisions are the core's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

from aiohttp import web

from tokenpilot import ArtifactStore, Config, TokenPilot
from tokenpilot.model_prices import load_price_file
from tokenpilot.store.disk import DiskStore
from tokenpilot.store.open import open_redis
from tokenpilot.store.protocol import Store
from tokenpilot.tokens import count_tokens
from tokenpilot_proxy import anthropic, chat, endpoints, gemini, responses
from tokenpilot_proxy.dashboard import Dashboard
from tokenpilot_proxy.memtrim import Trimmer
from tokenpilot_proxy.metrics import ProxyMetrics
from tokenpilot_proxy.middleware import Guard
from tokenpilot_proxy.pools import Pools
from tokenpilot_proxy.request_path import RequestPath
from tokenpilot_proxy.residency import Residency
from tokenpilot_proxy.sessions import SessionStats
from tokenpilot_proxy.settings import ProxySettings, read_secrets
from tokenpilot_proxy.state import SessionKeeper
from tokenpilot_proxy.upstream import Upstream, redact_url, split_credentials, url_user

log = logging.getLogger("tokenpilot.openclaw")


class Proxy:
    """TokenPilot, the upstream client and the sessions' state, served as an aiohttp app."""

    def __init__(
        self, settings: ProxySettings, *, config: Config | None = None, pilot: TokenPilot | None = None
    ) -> None:
        self.settings = settings
        self.pilot, self.state = _stores(settings, config, pilot)
        # the user's own prices only: prices_for falls back to the maintained list, then the snapshot
        self.prices = load_price_file(settings.prices_file, base={}) if settings.prices_file else {}
        self.metrics = ProxyMetrics(self)
        self.keeper = SessionKeeper(
            self.pilot,
            self.state,
            session_idle_s=settings.session_idle_s,
            max_sessions=settings.max_sessions,
            on_store_error=self.metrics.store_error,
        )
        base_url, basic_auth = split_credentials(settings.upstream)
        self.upstream = Upstream(
            base_url,
            basic_auth=basic_auth,
            connect_timeout_s=settings.connect_timeout_s,
            read_timeout_s=settings.read_timeout_s,
        )
        self.pools = Pools(recall_workers=settings.recall_workers, recall_queue=settings.recall_queue)
        self.trimmer = Trimmer()  # malloc_trim after huge bodies
        self.path = RequestPath(settings, self.keeper, self.upstream, self.pools, self.metrics, self.trimmer)
        self.guard = Guard(self.path)
        self.started = time.time()
        self._flusher: asyncio.Task[None] | None = None
        self._pruner: asyncio.Task[None] | None = None
        self._evictor: asyncio.Task[None] | None = None

    # -- what the parts hold, as tests, `/metrics` and the dashboard read it -------------
    @property
    def stats(self) -> dict[str, SessionStats]:
        """This process's per-session stats."""
        return self.keeper.stats

    @property
    def residency(self) -> Residency:
        """Which sessions are in memory, by last use."""
        return self.keeper.residency

    @property
    def busy(self) -> set[object]:
        """Connections with a request in progress (`connections.ConnectionGate` spares them)."""
        return self.guard.busy

    @property
    def auth_token(self) -> str | None:
        """The proxy's own bearer token, once `resolve_secrets` read it."""
        return self.path.auth_token

    def fleet_stats(self) -> dict[str, SessionStats]:
        """Every session's stats, the other replicas' included (`SessionKeeper.fleet_stats`)."""
        return self.keeper.fleet_stats()

    async def flush(self) -> int:
        """Write every session touched since the last flush; how many were written."""
        return await self.keeper.flush()

    def evict(self, sid: str, now: float | None = None, *, force: bool = False) -> bool:
        """Move one session out of memory, saved first (`SessionKeeper.evict`)."""
        return self.keeper.evict(sid, now, force=force)

    def prune(self, now: float | None = None) -> int:
        """Bring the artifact store under its size limit (`SessionKeeper.prune`)."""
        return self.keeper.prune(now)

    # -- lifecycle --------------------------------------------------------------
    def resolve_secrets(self) -> None:
        """Read the upstream key and the proxy's own token from the environment (never logged)."""
        self.upstream.api_key, basic, token = read_secrets(self.settings)
        if basic is not None:
            self.upstream.basic_auth = basic
        if token:
            self.path.auth_token = token

    async def start(self) -> None:
        self.resolve_secrets()
        if url_user(self.settings.upstream)[1]:
            log.warning(
                "tokenpilot: the --upstream URL carries a password, which every local user can read in "
                "the process list; pass it in an environment variable with --upstream-password-env VAR"
            )
        self.keeper.attach(asyncio.get_running_loop())
        loaded = await asyncio.to_thread(self.keeper.load_all)
        # The tokenizer loads in ~0.2 s on first use: here, before the first request, so
        # the first calls after a start (or a worker's restart) do not wait for it.
        await asyncio.to_thread(count_tokens, "tokenpilot")
        await self.upstream.open()
        if self.settings.flush_interval_s > 0 and self.state is not None:
            self._flusher = asyncio.create_task(self._flush_periodically())
        if self.settings.prune_interval_s > 0:
            self._pruner = asyncio.create_task(self._prune_periodically())
        if self.keeper.residency.idle_s > 0:
            self._evictor = asyncio.create_task(self._evict_periodically())
        log.info(
            "tokenpilot: proxy ready, upstream %s, %s",
            redact_url(self.settings.upstream),
            "sessions read from the shared store at first use"
            if self.state is not None and self.state.shared
            else f"{loaded} session(s) restored",
        )

    async def close(self) -> None:
        for task in (self._flusher, self._pruner, self._evictor):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.keeper.recovered()  # let it finish: cancelled, it would drop its sessions
        await self.keeper.flush()
        await self.upstream.close()
        self.pools.close()

    async def _evict_periodically(self) -> None:
        every = max(min(self.keeper.residency.idle_s / 2, 60.0), 0.05)
        while True:
            await asyncio.sleep(every)
            await asyncio.to_thread(self.keeper.evict_idle)

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval_s)
            await self.keeper.flush()

    async def _prune_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.prune_interval_s)
            await asyncio.to_thread(self.keeper.prune)

    # -- the app ------------------------------------------------------------------
    def app(self) -> web.Application:
        """Every route: one module per API on the shared request path, then the proxy's own."""
        app = web.Application(
            client_max_size=self.settings.max_body_bytes, middlewares=[self.guard.middleware]
        )
        chat.add_routes(app, self.path)
        responses.add_routes(app, self.path)
        anthropic.add_routes(app, self.path)
        gemini.add_routes(app, self.path)
        endpoints.add_routes(app, self.path, self.started)
        app.router.add_get("/metrics", self.metrics.view)
        Dashboard(self).add_routes(app)
        app.on_startup.append(lambda _app: self.start())
        app.on_cleanup.append(lambda _app: self.close())
        return app


def _stores(
    settings: ProxySettings, config: Config | None, pilot: TokenPilot | None
) -> tuple[TokenPilot, Store | None]:
    """The pilot and where session state goes: the `--store` URL for both (shared by
    replicas), else the store directory and the state directory of this machine."""
    if settings.store_url:
        shared = open_redis(
            settings.store_url,
            lock_ttl_s=settings.store_lock_ttl_s,
            lock_wait_s=settings.store_lock_wait_s,
            socket_timeout_s=settings.store_timeout_s,
        )
        pilot = pilot or TokenPilot(config, store=shared, keep=settings.keep)
        return pilot, (shared if settings.state_dir is not None else None)
    pilot = pilot or TokenPilot(
        config, store=ArtifactStore(Path(settings.store_dir).expanduser()), keep=settings.keep
    )
    if isinstance(pilot.store, Store) and pilot.store.shared:
        return pilot, pilot.store
    if settings.state_dir is None:
        return pilot, None
    # several workers on one folder: file locks and stored versions, as replicas on Redis
    return pilot, DiskStore(pilot.store, settings.state_dir, shared=settings.workers > 1)
