"""Peers: other products' context managers, run from their own code (`tokenpilot[peers]`).

Each peer module has `missing() -> str | None` (why it cannot run here, or None) and
`methods() -> list[Method]`. `peer_methods()` gathers every peer; a peer whose package
is not installed stops `tokenpilot bench --peers` with one line saying what to install,
rather than a table that silently lacks a row.
"""

from __future__ import annotations

from importlib import import_module

from ....errors import ConfigError
from ..methods import Method

PEERS = ("langchain", "headroom", "openclaw_pruning")


def missing_peers() -> dict[str, str]:
    """Peer module -> why it cannot run (empty: all can)."""
    out = {}
    for name in PEERS:
        reason = import_module(f"{__name__}.{name}").missing()
        if reason:
            out[name] = reason
    return out


def peer_methods() -> list[Method]:
    """Every peer's methods, in report order; `ConfigError` naming what is missing."""
    gaps = missing_peers()
    if gaps:
        lines = "; ".join(f"{k}: {v}" for k, v in gaps.items())
        raise ConfigError(f"--peers needs every peer installed (pip install 'tokenpilot[peers]'): {lines}")
    return [m for name in PEERS for m in import_module(f"{__name__}.{name}").methods()]
