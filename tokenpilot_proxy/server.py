"""`tokenpilot serve`: arguments, startup, and a shutdown that saves every session.

`RunningProxy` starts the same server inside a running event loop (tests, the
benchmark, embedding); `main_serve` runs it until SIGINT/SIGTERM. Either way the
aiohttp cleanup hook flushes session state before the process ends.

The log goes to stderr and, with `--log-file`, is also appended to that file: OpenClaw
keeps only a short tail of a local service's output.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from aiohttp import web

from tokenpilot import model_prices
from tokenpilot_proxy import gc_policy
from tokenpilot_proxy.app import Proxy
from tokenpilot_proxy.connections import (
    AcceptErrorLog,
    ConnectionGate,
    GatedSite,
    default_max_connections,
    raise_fd_limit,
)
from tokenpilot_proxy.http_errors import JsonErrorRunner
from tokenpilot_proxy.serve_options import (
    DEFAULT_CLIENT_TIMEOUT_S,
    DEFAULT_RECALL_QUEUE,
    DEFAULT_RECALL_WORKERS,
    MB,
    add_serve_arguments,
)
from tokenpilot_proxy.settings import ProxySettings, SetupError
from tokenpilot_proxy.upstream import redact_url

log = logging.getLogger("tokenpilot.openclaw")
LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"


def settings_from_args(args: argparse.Namespace) -> ProxySettings:
    return ProxySettings(
        upstream=args.upstream,
        host=args.host,
        port=args.port,
        upstream_key_env=args.upstream_key_env,
        upstream_password_env=args.upstream_password_env or None,
        auth_token_env=args.auth_token_env,
        list_sessions=args.list_sessions,
        store_dir=Path(args.store_dir).expanduser(),
        state_dir=None if args.no_state else Path(args.state_dir).expanduser(),
        max_body_bytes=int(args.max_body_mb * MB),
        connect_timeout_s=args.connect_timeout,
        read_timeout_s=args.read_timeout,
        models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
        flush_interval_s=args.flush_interval,
        store_url=getattr(args, "store", None) or None,
        store_lock_ttl_s=args.lock_ttl,
        store_lock_wait_s=args.lock_wait,
        store_timeout_s=args.store_timeout,
        workers=getattr(args, "workers", 1),
        client_timeout_s=getattr(args, "client_timeout", DEFAULT_CLIENT_TIMEOUT_S),
        max_connections=getattr(args, "max_connections", None),
        recall_workers=getattr(args, "recall_workers", DEFAULT_RECALL_WORKERS),
        recall_queue=getattr(args, "recall_queue", DEFAULT_RECALL_QUEUE),
        prices_file=getattr(args, "prices", None),
        session_idle_s=getattr(args, "session_idle", 900.0),
        max_sessions=getattr(args, "max_sessions", 1000),
        keep=getattr(args, "keep", "balanced"),
    )


def configure_logging(level: str = "INFO", log_file: Path | None = None) -> None:
    """Log to stderr and, when given, append to `log_file` (its folder is created).

    `SetupError` when the file cannot be opened for appending, so the proxy does not
    start with a log nobody will find.
    """
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        path = Path(log_file).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(logging.FileHandler(path, mode="a", encoding="utf-8", errors="backslashreplace"))
        except OSError as exc:
            raise SetupError(f"--log-file {path}: cannot append to it: {exc.strerror or exc}") from exc
    logging.basicConfig(level=level, format=LOG_FORMAT, handlers=handlers, force=True)


def run_from_args(args: argparse.Namespace) -> int:
    demo = bool(getattr(args, "demo", False))
    if demo == bool(args.upstream):
        print("tokenpilot serve: give --upstream URL, or --demo (the built-in upstream)", file=sys.stderr)
        return 2
    try:
        configure_logging(getattr(args, "log_level", "INFO"), getattr(args, "log_file", None))
        if demo:
            asyncio.run(serve_demo(args))
            return 0
        settings = settings_from_args(args)
        if settings.workers > 1:
            from tokenpilot_proxy.workers import run_workers

            return run_workers(settings, serve)
        asyncio.run(serve(settings))
    except (SetupError, ValueError) as exc:
        print(f"tokenpilot serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the port is taken, the store is not writable
        print(f"tokenpilot serve: {exc}", file=sys.stderr)
        return 1
    return 0


def main_serve(argv: Sequence[str] | None = None) -> int:
    """`tokenpilot serve ...` as a function (also `python -m tokenpilot_proxy serve`)."""
    parser = argparse.ArgumentParser(
        prog="tokenpilot serve", description="OpenAI-compatible TokenPilot proxy."
    )
    add_serve_arguments(parser)
    return run_from_args(parser.parse_args(argv))


async def serve(settings: ProxySettings, *, on_ready: Callable[[str], None] | None = None) -> None:
    """Run until SIGINT or SIGTERM; in-flight requests finish, then state is saved.

    `on_ready(url)` replaces the "serving" line (a worker of `--workers` tells its parent)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    raise_fd_limit()
    async with RunningProxy(settings) as running:
        gc_policy.settle()  # start-up is done: imports, the price table, the listening socket
        if on_ready is None:
            print(f"tokenpilot: serving {running.url} -> {redact_url(settings.upstream)}", flush=True)
        else:
            on_ready(running.url)
        await stop.wait()
        log.info("tokenpilot: shutting down, saving session state")


async def serve_demo(args: argparse.Namespace) -> None:
    """`serve --demo`: the built-in scripted upstream on a free local port, and the proxy in
    front of it, in one process; no provider and no key (`demo.demo_reply` answers)."""
    from tokenpilot_proxy.demo import FakeUpstream
    from tokenpilot_proxy.demo.replies import demo_reply

    async with FakeUpstream(responder=demo_reply) as upstream:
        settings = settings_from_args(argparse.Namespace(**{**vars(args), "upstream": upstream.url}))
        print(f"tokenpilot: demo mode, the built-in upstream at {upstream.url} (no provider, no key)")
        await serve(settings)


class RunningProxy:
    """The proxy serving inside the current event loop; `url` is its base (no /v1)."""

    def __init__(
        self, settings: ProxySettings, proxy: Proxy | None = None, *, shutdown_timeout_s: float = 10.0
    ) -> None:
        self.settings = settings
        self.proxy = proxy or Proxy(settings)
        self.shutdown_timeout_s = shutdown_timeout_s
        self.url = ""
        self._runner: web.AppRunner | None = None
        self.gate: ConnectionGate | None = None
        self._accept_log: AcceptErrorLog | None = None

    async def start(self) -> RunningProxy:
        self.proxy.resolve_secrets()  # fail before binding when a secret is missing
        await asyncio.to_thread(model_prices.warm)  # the price table, not at the first call
        s = self.settings
        # aiohttp's keep-alive timer runs from a connection's start and from each answer:
        # a client silent that long (no request, half a header, idle) is closed
        self._runner = JsonErrorRunner(
            self.proxy.app(),
            access_log=None,
            shutdown_timeout=self.shutdown_timeout_s,
            keepalive_timeout=s.client_timeout_s,
        )
        await self._runner.setup()
        cap = s.max_connections or default_max_connections()

        def gate(server: web.Server) -> ConnectionGate:
            self.gate = ConnectionGate(server, cap, self.proxy.busy)
            return self.gate

        loop = asyncio.get_running_loop()
        self._accept_log = AcceptErrorLog(loop.get_exception_handler())
        loop.set_exception_handler(self._accept_log)
        site = GatedSite(self._runner, s.host, s.port, gate, reuse_port=s.reuse_port or None)
        try:
            await site.start()
        except OSError:
            await self.stop()
            raise
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        log.info("tokenpilot: at most %d client connections, client timeout %g s", cap, s.client_timeout_s)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()  # runs Proxy.close: flushes state
            self._runner = None
        if self._accept_log is not None:  # put back what was there (unless another replaced it)
            loop = asyncio.get_running_loop()
            if loop.get_exception_handler() is self._accept_log:
                loop.set_exception_handler(self._accept_log.previous)
            self._accept_log = None

    async def __aenter__(self) -> RunningProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
