"""Peers: other products' context managers, run from their own code (`tokenpilot[peers]`).

Each peer module has `METHOD_NAMES` (its rows) and `REPORT_ORDER`, by which it registers
itself (no list here names the peers), `missing() -> str | None` (why it cannot run here,
or None) and `methods() -> list[Method]`. A peer whose package is not installed stops the bench
with one line saying what to install, rather than a table that silently lacks a row.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Collection
from functools import cache
from importlib import import_module
from types import ModuleType

from ....errors import ConfigError
from ..method import Method


@cache
def _peer_modules() -> dict[str, ModuleType]:
    """Every module of this package that declares `METHOD_NAMES`, in report order: a peer
    registers itself by being here. Importing one needs none of its product's code (that
    is imported when it runs), so `--methods` can tell a peer from a typo on any install."""
    found = [import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
    peers = sorted((m for m in found if hasattr(m, "METHOD_NAMES")), key=lambda m: m.REPORT_ORDER)
    return {m.__name__.rsplit(".", 1)[1]: m for m in peers}


def peer_method_names() -> dict[str, str]:
    """Every peer method's name -> the module that runs it, in report order."""
    return {name: key for key, m in _peer_modules().items() for name in m.METHOD_NAMES}


def _module(name: str) -> ModuleType:
    return _peer_modules()[name]


def missing_peers(wanted: Collection[str] | None = None) -> dict[str, str]:
    """Peer module -> why it cannot run, for the modules behind `wanted` (None: all)."""
    modules = dict.fromkeys(m for n, m in peer_method_names().items() if wanted is None or n in wanted)
    return {m: why for m in modules if (why := _module(m).missing())}


def peer_methods(wanted: Collection[str] | None = None) -> list[Method]:
    """The peers' methods named in `wanted` (None: every peer), in report order;
    `ConfigError` naming what is missing."""
    gaps = missing_peers(wanted)
    if gaps:
        lines = "; ".join(f"{k}: {v}" for k, v in gaps.items())
        raise ConfigError(f"the peers need their own code installed: {lines}")
    modules = dict.fromkeys(m for n, m in peer_method_names().items() if wanted is None or n in wanted)
    found = [meth for m in modules for meth in _module(m).methods()]
    return [m for m in found if wanted is None or m.name in wanted]
