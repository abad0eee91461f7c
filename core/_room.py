"""A room's front door: the names a subpackage offers, each imported from its module on first use.

Each room of the core (`messages`, `store`, `ingest`, `history`, `estimator`, `lifecycle`,
`recall`) lists in its `__init__` what the rest of the house may take from it. Resolving
on first use keeps importing one module of a room from importing the whole room, so the
rooms' import order cannot make a circle. `old_face` names the module that held the room's
name before it was a room (`tokenpilot.history` was `history/sync.py`), whose other public
names still resolve, for one release.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def front_door(package: str, offers: Mapping[str, str], old_face: str | None = None) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: `offers` maps each name to its module in the room."""

    def __getattr__(name: str) -> Any:
        module = offers.get(name, old_face if not name.startswith("_") else None)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
