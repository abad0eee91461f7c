"""What the dashboard and the metrics read of a running proxy, as an interface below them.

`Proxy` (in `app`) assembles the routes, the dashboard and the metrics; they in turn need a
few of its parts. They name this Protocol instead of `Proxy`, so the module that assembles
them is above them and no import goes back up (the house has no circle).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tokenpilot import TokenPilot
    from tokenpilot.pricing import Prices
    from tokenpilot_proxy.sessions import SessionStats
    from tokenpilot_proxy.settings import ProxySettings
    from tokenpilot_proxy.state import SessionKeeper


class ProxyView(Protocol):
    """The parts of a proxy its dashboard and metrics read (all owned by `Proxy`)."""

    settings: ProxySettings
    prices: Mapping[str, Prices]
    keeper: SessionKeeper
    pilot: TokenPilot
    started: float  # time.time() at start

    @property
    def stats(self) -> Mapping[str, SessionStats]: ...

    @property
    def auth_token(self) -> str | None: ...
