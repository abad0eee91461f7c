"""The store factory: from what a caller names (an object, a directory, a `redis://`
URL, nothing) to a backend. Apart from `store.py`, so the protocol knows no backend and
no backend imports a module that imports it back."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import StoreError
from .protocol import REDIS_SCHEMES, Artifacts, Store, redact_store_url


def is_store_url(spec: object) -> bool:
    return isinstance(spec, str) and urlsplit(spec).scheme in REDIS_SCHEMES


def open_artifacts(spec: Artifacts | str | Path | None) -> Artifacts:
    """The store `TokenPilot(store=...)` names: an object as is, a Redis URL, a directory,
    or None for a private temporary directory."""
    from .artifacts import ArtifactStore

    if spec is None:
        return ArtifactStore()
    if is_store_url(spec):
        return open_redis(str(spec))
    if isinstance(spec, (str, Path)):
        return ArtifactStore(Path(spec).expanduser())
    return spec


def open_redis(url: str, **kw: Any) -> Store:
    """A `RedisStore` for `url`; a clear `StoreError` when the `redis` client is missing."""
    try:
        from .redis import RedisStore
    except ImportError as exc:
        raise StoreError(
            f"{redact_store_url(url)}: the Redis store needs the redis client: pip install 'tokenpilot[redis]'",
            "redis client not installed",
        ) from exc
    return RedisStore(url, **kw)
