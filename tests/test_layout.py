"""The runtime knows no host and no measurement code (issue #12's layout).

An agent that only calls `TokenPilot.prepare` must load neither an adapter
(`tokenpilot_proxy`, `tokenpilot_openclaw`, `tokenpilot_langgraph`) nor the measurement wing
(`tokenpilot.measure`: traces, workload, cache simulator, calibration, bench). Two checks:
every `import` statement of every runtime module, read from its source (so a lazy import
inside a function counts too), and what importing all of them really loads.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

CORE = REPO / "core"
FORBIDDEN = (
    "tokenpilot_openclaw",
    "tokenpilot_proxy",
    "tokenpilot_mcp",
    "tokenpilot_langgraph",
    "tokenpilot.measure",
)
# the core's front doors that may reach the wing or adapters on purpose
NOT_RUNTIME = {"cli.py", "__main__.py"}


def _runtime_files() -> list[Path]:
    return sorted(
        p
        for p in CORE.rglob("*.py")
        if "measure" not in p.relative_to(CORE).parts and p.relative_to(CORE).as_posix() not in NOT_RUNTIME
    )


def _module_of(path: Path) -> str:
    parts = ["tokenpilot", *path.relative_to(CORE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set[str]:
    package = _module_of(path) if path.name == "__init__.py" else _module_of(path).rsplit(".", 1)[0]
    return _names(path.read_text(), package)


def _names(source: str, package: str) -> set[str]:
    """Absolute names of every module the source's import statements name, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)  # `from . import measure`
    return names


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_the_runtime_files_are_found():
    names = {p.relative_to(CORE).as_posix() for p in _runtime_files()}
    assert {
        "pilot.py",
        "ingest/gate.py",
        "ingest/stabilize.py",
        "store/artifacts.py",
        "lifecycle/schedule.py",
        "passes/html.py",
    } <= names
    assert not any(n.startswith("measure/") for n in names)


@pytest.mark.parametrize("path", _runtime_files(), ids=lambda p: p.relative_to(CORE).as_posix())
def test_no_runtime_module_imports_an_adapter_or_the_measurement_wing(path: Path):
    bad = sorted(n for n in _imported(path) if _forbidden(n))
    assert not bad, f"{path.relative_to(REPO)} imports {bad}"


def test_the_checker_sees_relative_and_lazy_imports():
    """The static check flags an import hidden in a function, relative or absolute (so it can fail)."""
    src = "def f():\n    from ..measure.bench import run_bench\n    import tokenpilot_proxy\n"
    bad = sorted(n for n in _names(src, "tokenpilot.passes") if _forbidden(n))
    assert bad == [
        "tokenpilot.measure.bench",
        "tokenpilot.measure.bench.run_bench",
        "tokenpilot_proxy",
    ]
    assert not _forbidden("tokenpilot.measured") and not _forbidden("tokenpilot.pilot")


def test_importing_the_whole_runtime_loads_no_adapter_and_no_wing():
    modules = [_module_of(p) for p in _runtime_files()]
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = json.loads(out.stdout)
    assert "tokenpilot.pilot" in loaded and "tokenpilot.passes.html" in loaded
    assert [m for m in loaded if _forbidden(m)] == []


def test_the_cli_finds_adapter_commands_through_entry_points():
    """`serve` and `openclaw` come from the adapter's entry point, not from an import in the core."""
    from importlib.metadata import entry_points

    from tokenpilot.cli import COMMANDS_GROUP, build_parser

    names = {ep.name: ep.value for ep in entry_points(group=COMMANDS_GROUP)}
    assert names.get("openclaw") == "tokenpilot_openclaw.cli:register"
    assert names.get("proxy") == "tokenpilot_proxy.cli:register"
    choices = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert {"bench", "compact", "serve", "openclaw"} <= set(choices)
    assert "tokenpilot_openclaw" not in (CORE / "cli.py").read_text()
    assert "tokenpilot_proxy" not in (CORE / "cli.py").read_text()


def test_a_broken_adapter_entry_point_is_skipped_with_a_warning(monkeypatch, caplog):
    import tokenpilot.cli as cli

    class Broken:
        name, value = "broken", "nowhere.cli:register"

        def load(self):
            raise ImportError("No module named 'nowhere'")

    real = cli.entry_points
    monkeypatch.setattr(cli, "entry_points", lambda group: [*real(group=group), Broken()])
    with caplog.at_level("WARNING"):
        choices = next(a for a in cli.build_parser()._actions if a.dest == "command").choices
    assert "bench" in choices and "serve" in choices  # the others still register
    assert "skipping commands of nowhere.cli:register" in caplog.text


def test_an_adapter_whose_register_raises_is_skipped_with_one_warning(monkeypatch, caplog):
    import tokenpilot.cli as cli

    def register(subparsers):
        raise RuntimeError("half-installed adapter")

    class Raising:
        name, value = "raising", "raising.cli:register"

        def load(self):
            return register

    real = cli.entry_points
    monkeypatch.setattr(cli, "entry_points", lambda group: [*real(group=group), Raising()])
    with caplog.at_level("WARNING"):
        choices = next(a for a in cli.build_parser()._actions if a.dest == "command").choices
    assert "bench" in choices and "serve" in choices
    warnings = [r for r in caplog.records if "raising.cli:register" in r.getMessage()]
    assert len(warnings) == 1 and "half-installed adapter" in warnings[0].getMessage()


# Runs the real console entry with the openclaw extra's modules hidden, as on a base install.
_WITHOUT_EXTRA = (
    "import sys\n"
    "sys.modules['aiohttp'] = None\n"
    "sys.modules['json5'] = None\n"
    "from tokenpilot.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _cli_without_openclaw_extra(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRA, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def test_a_base_install_runs_bench_and_names_the_extra_for_serve(tmp_path):
    """Issue #22: registering the adapter's commands imports nothing of its extra."""
    bench = _cli_without_openclaw_extra("bench", "--help", home=tmp_path)
    assert bench.returncode == 0, bench.stderr
    assert "Traceback" not in bench.stderr and "skipping commands" not in bench.stderr
    assert "usage: tokenpilot bench" in bench.stdout

    helped = _cli_without_openclaw_extra("serve", "--help", home=tmp_path)
    assert helped.returncode == 0 and "--upstream" in helped.stdout  # the real options, no import

    served = _cli_without_openclaw_extra(
        "serve", "--upstream", "http://127.0.0.1:9/v1", "--no-state", home=tmp_path
    )
    assert served.returncode == 2 and "Traceback" not in served.stderr, served.stderr
    lines = served.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'tokenpilot[proxy]'" in lines[0], served.stderr

    # the doctor runs, and its config check names the install (OpenClaw's config is JSON5)
    (tmp_path / ".openclaw").mkdir()
    (tmp_path / ".openclaw" / "openclaw.json").write_text("{}")
    doctor = _cli_without_openclaw_extra("openclaw", "doctor", home=tmp_path)
    assert "Traceback" not in doctor.stderr, doctor.stderr
    assert "pip install 'tokenpilot[openclaw]'" in doctor.stdout


# ---------------------------------------------------------------------------
# The core in rooms (issue #40): each room imports only from the floors below it
# ---------------------------------------------------------------------------
# Floor by floor, lowest first. A module may import from its own room and from any room on a
# lower floor, never from a higher one: a message goes down the floors and does not come back.
FLOORS: tuple[tuple[str, ...], ...] = (
    # the foundation: modules at the top level that import nothing of the core's rooms
    ("errors", "_canonical", "_moved", "_room", "tokens", "pricing", "model_prices", "registry"),
    ("messages",),
    ("config",),
    ("passes",),
    ("store",),
    ("ingest",),
    ("history",),
    ("estimator",),
    ("lifecycle",),
    ("recall",),
    ("pilot", "__init__"),  # the facade, and the package's face
)
TOP_LEVEL_LIMIT = 20


def _room_of(module: str) -> str:
    """`tokenpilot.store.redis` -> `store`; `tokenpilot.pilot` -> `pilot`; the package -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _floor_of(room: str) -> int:
    return next(i for i, rooms in enumerate(FLOORS) if room in rooms)


def _room_edges() -> list[tuple[str, str, str]]:
    """(importer, imported, why) for every import of a runtime module that goes up a floor."""
    up = []
    for path in _runtime_files():
        me = _module_of(path)
        mine = _floor_of(_room_of(me))
        for name in _imported(path):
            if not name.startswith("tokenpilot.") or _forbidden(name):
                continue
            target = name
            while target.count(".") > 1 and not _is_module(target):
                target = target.rsplit(".", 1)[0]
            if not _is_module(target):
                continue
            if _floor_of(_room_of(target)) > mine:
                up.append((me, target, f"floor {mine} imports floor {_floor_of(_room_of(target))}"))
    return sorted(up)


def _is_module(name: str) -> bool:
    path = CORE.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_every_runtime_module_has_a_floor():
    rooms = {_room_of(_module_of(p)) for p in _runtime_files()}
    placed = {r for floor in FLOORS for r in floor}
    assert rooms <= placed, f"modules in no room of FLOORS: {sorted(rooms - placed)}"


def test_no_room_imports_a_room_above_it():
    assert _room_edges() == []


def test_the_floor_check_sees_an_import_that_goes_up():
    """A store module importing the history would be flagged (so the check can fail)."""
    src = "from ..history.session import Session\n"
    names = _names(src, "tokenpilot.store")
    assert "tokenpilot.history.session" in names
    assert _floor_of(_room_of("tokenpilot.history.session")) > _floor_of(_room_of("tokenpilot.store.disk"))


def test_at_most_twenty_modules_at_the_cores_top_level():
    top = sorted(p.name for p in CORE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_LIMIT, top
