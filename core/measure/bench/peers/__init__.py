"""Peers: other products' context managers, run from their own code (`tokenpilot[peers]`).

Each peer module has `missing() -> str | None` (why it cannot run here, or None) and
`methods() -> list[Method]`. A peer whose package is not installed stops the bench
with one line saying what to install, rather than a table that silently lacks a row.
"""

from __future__ import annotations

from collections.abc import Collection
from importlib import import_module

from ....errors import ConfigError
from ..method import Method

# every peer method's name -> the module that runs it, in report order; the names need
# no peer's code, so `--methods` can tell a peer from a typo on any install
PEER_METHODS = {
    "langchain_clear_tool_uses": "langchain",
    "langchain_clear_30k": "langchain",
    "langchain_summarization": "langchain",
    "headroom": "headroom",
    "headroom_token": "headroom",
    "openclaw_context_pruning": "openclaw_pruning",
    "lightmem2": "lightmem2",
}


def _module(name: str):  # noqa: ANN202 - a peer module
    return import_module(f"{__name__}.{name}")


def missing_peers(wanted: Collection[str] | None = None) -> dict[str, str]:
    """Peer module -> why it cannot run, for the modules behind `wanted` (None: all)."""
    modules = dict.fromkeys(m for n, m in PEER_METHODS.items() if wanted is None or n in wanted)
    return {m: why for m in modules if (why := _module(m).missing())}


def peer_methods(wanted: Collection[str] | None = None) -> list[Method]:
    """The peers' methods named in `wanted` (None: every peer), in report order;
    `ConfigError` naming what is missing."""
    gaps = missing_peers(wanted)
    if gaps:
        lines = "; ".join(f"{k}: {v}" for k, v in gaps.items())
        raise ConfigError(f"the peers need their own code installed: {lines}")
    modules = dict.fromkeys(m for n, m in PEER_METHODS.items() if wanted is None or n in wanted)
    found = [meth for m in modules for meth in _module(m).methods()]
    return [m for m in found if wanted is None or m.name in wanted]
