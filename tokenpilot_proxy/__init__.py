"""The TokenPilot proxy (`tokenpilot serve`): every API it serves, on one request path.

    from tokenpilot_proxy import Proxy, ProxySettings, RunningProxy

Names are resolved on first use: `tokenpilot`'s CLI imports `serve_options`
(standard library only) on every command, and must not pull in aiohttp, which only the
`proxy` extra brings.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenpilot_proxy.app import Proxy
    from tokenpilot_proxy.serve_options import MB
    from tokenpilot_proxy.server import RunningProxy
    from tokenpilot_proxy.settings import ProxySettings, SetupError, read_secrets

# public name -> the module of this package that defines it
PUBLIC = {
    "Proxy": "app",
    "ProxySettings": "settings",
    "SetupError": "settings",
    "read_secrets": "settings",
    "RunningProxy": "server",
    "MB": "serve_options",
}
__all__ = ["MB", "Proxy", "ProxySettings", "RunningProxy", "SetupError", "read_secrets"]


def __getattr__(name: str) -> Any:
    module = PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
