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
        self.own_specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

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
        module = importlib.import_module(new)
        self.own_specs[new] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module was run under its new name already; the import system has just put the
        old name's spec on it, and its own goes back (relative imports and `reload` read it)."""
        module.__spec__ = self.own_specs.get(module.__name__, module.__spec__)

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


# The core's modules before it had rooms (0.1), and where each went. The old names that are
# now a room (`tokenpilot.store`, `.history`, ...) are the room itself: its front door still
# offers the old module's names (`tokenpilot._room`).
CORE_MOVES = {
    "tokenpilot.limits": "tokenpilot.messages.limits",
    "tokenpilot.observations": "tokenpilot.messages.observations",
    "tokenpilot.turns": "tokenpilot.messages.turns",
    "tokenpilot.pairing": "tokenpilot.messages.pairing",
    "tokenpilot.call_kinds": "tokenpilot.messages.call_kinds",
    "tokenpilot.compaction": "tokenpilot.messages.compaction",
    "tokenpilot.store_breaker": "tokenpilot.store.breaker",
    "tokenpilot.store_disk": "tokenpilot.store.disk",
    "tokenpilot.store_lock": "tokenpilot.store.redis_lock",
    "tokenpilot.store_open": "tokenpilot.store.open",
    "tokenpilot.store_redis": "tokenpilot.store.redis",
    "tokenpilot.store_redis_known": "tokenpilot.store.redis_known",
    "tokenpilot.store_redis_scripts": "tokenpilot.store.redis_scripts",
    "tokenpilot.store_redis_url": "tokenpilot.store.redis_url",
    "tokenpilot.artifacts": "tokenpilot.store.artifacts",
    "tokenpilot.archive": "tokenpilot.store.archive",
    "tokenpilot.file_lock": "tokenpilot.store.file_lock",
    "tokenpilot.reentrant_lock": "tokenpilot.store.reentrant_lock",
    "tokenpilot.journal": "tokenpilot.store.journal",
    "tokenpilot.state_files": "tokenpilot.store.state_files",
    "tokenpilot.recall_search": "tokenpilot.store.search",
    "tokenpilot.ingest_intent": "tokenpilot.ingest.intent",
    "tokenpilot.pipeline": "tokenpilot.ingest.pipeline",
    "tokenpilot.stabilize": "tokenpilot.ingest.stabilize",
    "tokenpilot.reshown": "tokenpilot.ingest.reshown",
    "tokenpilot.reshown_moves": "tokenpilot.ingest.reshown_moves",
    "tokenpilot.elision": "tokenpilot.ingest.elision",
    "tokenpilot.unstored": "tokenpilot.ingest.unstored",
    "tokenpilot.session": "tokenpilot.history.session",
    "tokenpilot.session_state": "tokenpilot.history.session_state",
    "tokenpilot.fingerprint": "tokenpilot.history.fingerprint",
    "tokenpilot.raw_memo": "tokenpilot.history.raw_memo",
    "tokenpilot.render": "tokenpilot.history.render",
    "tokenpilot.system_prompt": "tokenpilot.history.system_prompt",
    "tokenpilot.estimator_llm": "tokenpilot.estimator.llm",
    "tokenpilot.estimator_offline": "tokenpilot.estimator.offline",
    "tokenpilot.estimator_prompts": "tokenpilot.estimator.prompts",
    "tokenpilot.estimator_refs": "tokenpilot.estimator.refs",
    "tokenpilot.estimator_view": "tokenpilot.estimator.view",
    "tokenpilot.lifecycle_config": "tokenpilot.lifecycle.settings",
    "tokenpilot.lifecycle_plan": "tokenpilot.lifecycle.plan",
    "tokenpilot.evict": "tokenpilot.lifecycle.evict",
    "tokenpilot.segments": "tokenpilot.lifecycle.segments",
    "tokenpilot.segment_window": "tokenpilot.lifecycle.segment_window",
    "tokenpilot.plan_tokens": "tokenpilot.lifecycle.plan_tokens",
    "tokenpilot.recall_args": "tokenpilot.recall.args",
    "tokenpilot.recall_tool": "tokenpilot.recall.tool",
}
