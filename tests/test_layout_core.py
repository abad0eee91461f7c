"""Boundaries of the core's layout: small runtime modules, no import circles, a facade
that is only the facade, a store protocol that knows no backend.

Static checks over the source (`ast`), so they hold for imports inside functions and
under `TYPE_CHECKING` too: a circle hidden in a function is still a circle to a reader.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from import_circles import circles

REPO = Path(__file__).resolve().parent.parent
CORE = REPO / "core"
PACKAGE = "tokenpilot"  # core/ is installed as this package

MAX_LINES = 500
"""Lines a module of the core may have (the measurement wing's too): one job, readable in one sitting."""

SIZE_EXEMPT: dict[str, str] = {}  # file name -> why it may be longer (none today)


def module_name(path: Path, root: Path = CORE, package: str = PACKAGE) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = CORE, package: str = PACKAGE) -> dict[str, Path]:
    return {module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The known modules `name` imports anywhere in its source (module level, in a
    function, under TYPE_CHECKING). `from . import x` names the module x, not the package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            candidates = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        found.update(c for c in candidates if c in known and c != name)
    return found


def import_graph(root: Path = CORE, package: str = PACKAGE) -> dict[str, set[str]]:
    mods = modules(root, package)
    known = set(mods)
    return {name: imported(name, path, known) for name, path in mods.items()}


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: p.relative_to(CORE).as_posix())
def test_no_module_of_the_core_is_over_the_size_limit(path: Path):
    """The runtime and the measurement wing alike: both ship in the package."""
    if path.name in SIZE_EXEMPT:
        pytest.skip(SIZE_EXEMPT[path.name])
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, (
        f"core/{path.relative_to(CORE)} has {lines} lines (limit {MAX_LINES}): split it"
    )


def test_no_import_circle_among_the_core_modules():
    assert circles(import_graph()) == []


def test_the_checker_sees_a_circle_through_a_lazy_and_a_type_checking_import(tmp_path: Path):
    """The graph counts imports in functions and under TYPE_CHECKING (so the test can fail)."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    (pkg / "c.py").write_text("from .sub import d\n")
    (pkg / "sub" / "d.py").write_text("from .. import a\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.sub.d"}  # the submodule, not the package that holds it
    assert circles(graph) == [["pkg.a", "pkg.b"]]


def test_the_store_protocol_imports_no_backend_and_no_factory():
    graph = import_graph()
    backends = {f"{PACKAGE}.store.disk", f"{PACKAGE}.store.redis", f"{PACKAGE}.store.open"}
    assert not graph[f"{PACKAGE}.store.protocol"] & backends
    assert not graph[f"{PACKAGE}.store"] & backends  # the room's front door names them lazily
    assert f"{PACKAGE}.store.redis" in graph[f"{PACKAGE}.store.open"]


def test_the_facade_module_holds_only_the_facade():
    tree = ast.parse((CORE / "pilot.py").read_text(encoding="utf-8"))
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert classes == {"TokenPilot", "Prepared", "PrepareStats", "ToolOutputReduction"}


def test_peers_and_the_live_engine_build_on_what_does_not_import_them():
    graph = import_graph()
    bench = f"{PACKAGE}.measure.bench"
    assert f"{bench}.methods" not in graph[f"{bench}.peers"]
    assert f"{bench}.local_engine" not in graph[f"{bench}.live"]
    assert f"{PACKAGE}.measure.workload.sessions" not in graph[f"{PACKAGE}.measure.workload.tasks"]


def test_a_peer_registers_itself_by_declaring_its_method_names(tmp_path: Path, monkeypatch):
    """A module dropped into the peers package is found with its rows: no list to edit."""
    from tokenpilot.measure.bench import peers

    (tmp_path / "planted_peer.py").write_text(
        "METHOD_NAMES = ('planted',)\nREPORT_ORDER = 99\n"
        "def missing():\n    return 'not installed here'\n"
        "def methods():\n    return []\n"
    )
    (tmp_path / "helper_module.py").write_text("X = 1\n")  # no METHOD_NAMES: not a peer
    monkeypatch.setattr(peers, "__path__", [*peers.__path__, str(tmp_path)])
    peers._peer_modules.cache_clear()
    try:
        names = peers.peer_method_names()
        assert names["planted"] == "planted_peer" and list(names)[-1] == "planted"
        assert "helper_module" not in names.values()
        assert peers.missing_peers({"planted"}) == {"planted_peer": "not installed here"}
    finally:
        monkeypatch.undo()
        peers._peer_modules.cache_clear()
        sys.modules.pop("tokenpilot.measure.bench.peers.planted_peer", None)
        sys.modules.pop("tokenpilot.measure.bench.peers.helper_module", None)
    assert "planted" not in peers.peer_method_names()
