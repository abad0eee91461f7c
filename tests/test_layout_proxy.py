"""The proxy's and OpenClaw's packages: small modules, no private name crossing a module, no circle.

`tokenpilot_proxy` is the proxy (one module per API on one shared request path, the hosts'
enable and doctor, the built-in demo upstream); `tokenpilot_openclaw` is OpenClaw's plugin,
config and doctor, and serves no route. These checks read the source (ast), so a module that
grows past the limit, reaches into another module's underscore names, or closes an import
circle (type-only imports included: the house as drawn) fails here, not in review.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from import_circles import circles

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tokenpilot_proxy", "tokenpilot_openclaw", "tokenpilot_mcp")
MAX_LINES = 500
SELF_NAMES = {"self", "cls"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute module a `from ... import` names (relative ones resolved against `importer`)."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import that runs (function-level ones included), not those under `if TYPE_CHECKING:`."""

    def walk(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from (n for c in child.orelse for n in walk_one(c))
                continue
            yield from walk_one(child)

    def walk_one(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from walk(node)

    yield from walk(tree)


def private_uses(name: str, is_package: bool, source: str) -> list[str]:
    """`from x import _y` of a package module, and `obj._y` where `obj` is a package module
    (`wire._kind`) or another object (`self.proxy._send`): anything but `self`, `cls`,
    `super()` or a module from outside the package (`os._exit` is the standard library's)."""
    tree = ast.parse(source)
    outside: set[str] = set()  # names bound to modules and objects of other distributions
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = resolve(name, is_package, node.level, node.module)
            if target.split(".")[0] in PACKAGES:
                found += [
                    f"line {node.lineno}: from {target} import {a.name}"
                    for a in node.names
                    if is_private(a.name)
                ]
            else:
                outside |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            outside |= {
                a.asname or a.name.split(".")[0] for a in node.names if not a.name.startswith(PACKAGES)
            }
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and (owner.id in SELF_NAMES or owner.id in outside):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue  # a subclass calling its base's protected method (aiohttp's `_make_server`)
        found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda f: int(f.split(":")[0].split()[1]))


def import_graph(mods: dict[str, Path], type_only: bool = True) -> dict[str, set[str]]:
    """module -> the package modules it imports (when it runs, and with `type_only` also under
    `if TYPE_CHECKING:`; a parent package's `__init__`, which Python runs first anyway, is not
    counted as an edge)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text())
        nodes = (
            [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
            if type_only
            else runtime_imports(tree)
        )
        for node in nodes:
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = resolve(name, is_package, node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                if t in mods and t != name and not name.startswith(t + "."):
                    graph[name].add(t)
    return graph


# ---------------------------------------------------------------------------
# The package itself
# ---------------------------------------------------------------------------
def test_no_runtime_module_is_over_the_size_limit():
    over = {
        name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not over, f"modules over {MAX_LINES} lines (split them along a real seam): {over}"


def test_no_module_uses_another_modules_private_names():
    mods = modules()
    found = {
        name: uses
        for name, path in mods.items()
        if (uses := private_uses(name, path.name == "__init__.py", path.read_text()))
    }
    assert not found, f"private names used across modules: {found}"


def test_no_import_circle_among_the_packages_modules():
    assert circles(import_graph(modules())) == []
    assert circles(import_graph(modules(), type_only=False)) == []


def test_no_module_of_the_openclaw_package_serves_a_route():
    """The proxy's routes live in `tokenpilot_proxy`; OpenClaw's package only uses the proxy."""
    serving = [
        name
        for name, path in modules().items()
        if name.startswith("tokenpilot_openclaw")
        and any(k in path.read_text() for k in ("add_routes(", "add_post(", "add_get(", "web.Application("))
    ]
    assert serving == []
    assert any("add_post(" in p.read_text() for p in (ROOT / "tokenpilot_proxy").glob("*.py"))


def test_the_proxy_has_one_module_per_api_and_a_small_public_face():
    import tokenpilot_proxy as proxy

    assert set(proxy.__all__) == {
        "MB",
        "Proxy",
        "ProxySettings",
        "RunningProxy",
        "SetupError",
        "read_secrets",
    }
    for name in proxy.__all__:
        assert getattr(proxy, name) is not None
    for api in ("chat", "anthropic", "responses"):
        assert (ROOT / "tokenpilot_proxy" / f"{api}.py").is_file()
    with pytest.raises(AttributeError):
        _ = proxy.NoSuchName


# ---------------------------------------------------------------------------
# The checks catch what they are for
# ---------------------------------------------------------------------------
def test_the_private_check_sees_imports_and_attribute_reaches():
    src = (
        "from .proxy import Proxy, _StreamBroken\n"
        "from . import wire\n"
        "import os\n"
        "def f(p):\n"
        "    wire._kind(1)\n"
        "    p.proxy._send()\n"
        "    self._own()\n"
        "    os._exit(0)\n"
        "    super()._make_server()\n"
        "    return p.__class__\n"
    )
    found = private_uses("tokenpilot_openclaw.api_routes", False, src)
    assert [f.split(":")[0] for f in found] == ["line 1", "line 5", "line 6"]
    assert "_StreamBroken" in found[0] and "wire._kind" in found[1] and "p.proxy._send" in found[2]


def test_the_circle_check_sees_lazy_imports_but_not_type_only_ones():
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert circles(graph) == [["a", "b"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .app import Proxy\n"
        "def f():\n    from .api_routes import ApiRoutes\n"
    )
    names = [n.module for n in runtime_imports(tree) if isinstance(n, ast.ImportFrom)]
    assert names == ["typing", "api_routes"]


def test_relative_imports_resolve_against_the_importer():
    assert resolve("tokenpilot_proxy.chat", False, 1, "wire") == "tokenpilot_proxy.wire"
    assert resolve("tokenpilot_proxy", True, 1, "app") == "tokenpilot_proxy.app"
    assert resolve("tokenpilot_proxy.hosts.enable", False, 2, "checks") == "tokenpilot_proxy.checks"
    assert resolve("tokenpilot_openclaw.doctor", False, 1, None) == "tokenpilot_openclaw"
