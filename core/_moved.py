"""Old import paths of modules that moved, kept working for one release with a warning.

`alias_moved({"old.name": "new.name"})` makes `import old.name` (and `old.name.sub`, and
`python -m old.name`) give the new module itself, so a monkeypatch or an `isinstance` through
either name sees the same object. The finder sits first on `sys.meta_path`: a module below
an old package name must not be found a second time, as a copy, through the new package's
`__path__`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping
from types import CodeType, ModuleType


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves each old name (or a name below it) to its new home, with a DeprecationWarning."""

    def __init__(self, moves: Mapping[str, str]) -> None:
        self.moves = dict(moves)

    def new_name(self, fullname: str) -> str | None:
        for old in sorted(self.moves, key=len, reverse=True):
            if fullname == old or fullname.startswith(old + "."):
                return self.moves[old] + fullname[len(old) :]
        return None

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        new = self.new_name(fullname)
        found = importlib.util.find_spec(new) if new else None
        if found is None:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, self, is_package=found.submodule_search_locations is not None
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = self.new_name(spec.name)
        assert new is not None
        warnings.warn(
            f"{spec.name} has moved to {new}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module was run under its new name already."""

    def get_code(self, fullname: str) -> CodeType | None:
        """For `python -m old.name` (runpy asks the loader for the module's code)."""
        new = self.new_name(fullname)
        spec = importlib.util.find_spec(new) if new else None
        loader = spec.loader if spec else None
        return loader.get_code(new) if isinstance(loader, importlib.abc.InspectLoader) else None


def alias_moved(moves: Mapping[str, str]) -> MovedFinder:
    """Install (once per mapping) a finder for `moves`, old name -> new name."""
    for finder in sys.meta_path:
        if isinstance(finder, MovedFinder) and finder.moves == dict(moves):
            return finder
    finder = MovedFinder(moves)
    sys.meta_path.insert(0, finder)
    return finder
