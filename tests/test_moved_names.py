"""Moved modules (0.2): the old names import for one release.

The proxy moved out of the OpenClaw package, and the core's modules into rooms.

Each old name gives the new module itself (one object, so a monkeypatch through either name
is seen by both) with a DeprecationWarning naming the new home; `python -m` of an old name
(a hook written by an earlier `tokenpilot enable`) still runs. Each check runs in a fresh
interpreter, where nothing is imported yet.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("aiohttp")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("tokenpilot_openclaw.proxy", "tokenpilot_proxy"),
        ("tokenpilot_openclaw.proxy.app", "tokenpilot_proxy.app"),
        ("tokenpilot_openclaw.hosts.enable", "tokenpilot_proxy.hosts.enable"),
        ("tokenpilot_openclaw.proxy_checks", "tokenpilot_proxy.checks"),
        ("tokenpilot_openclaw.host_doctor", "tokenpilot_proxy.doctor"),
        ("tokenpilot_openclaw.testing", "tokenpilot_proxy.demo"),
        ("tokenpilot.store_disk", "tokenpilot.store.disk"),
        ("tokenpilot.turns", "tokenpilot.messages.turns"),
        ("tokenpilot.lifecycle_plan", "tokenpilot.lifecycle.plan"),
        ("tokenpilot.estimator_llm", "tokenpilot.estimator.llm"),
        ("tokenpilot.session_state", "tokenpilot.history.session_state"),
    ],
)
def test_an_old_name_is_the_new_module_with_a_warning(old: str, new: str):
    out = _python(
        f"import importlib; a = importlib.import_module({old!r}); b = importlib.import_module({new!r}); print(a is b)"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
    assert f"{old} has moved to {new}" in out.stderr and "DeprecationWarning" in out.stderr


def test_a_name_imported_from_an_old_path_is_the_same_object():
    out = _python(
        "from tokenpilot_openclaw.proxy import ProxySettings as A\n"
        "from tokenpilot_openclaw.testing import FakeUpstream as B\n"
        "from tokenpilot_proxy import ProxySettings\n"
        "from tokenpilot_proxy.demo import FakeUpstream\n"
        "print(A is ProxySettings and B is FakeUpstream)"
    )
    assert out.stdout.strip() == "True", out.stderr


def test_an_unknown_name_below_an_old_path_still_fails_cleanly():
    out = _python("import tokenpilot_openclaw.proxy.no_such_module")
    assert out.returncode == 1 and "ModuleNotFoundError" in out.stderr


def test_python_dash_m_of_old_names_still_runs():
    """OpenClaw configs and Claude Code hooks written before 0.2 name the old modules."""
    serve = subprocess.run(
        [sys.executable, "-m", "tokenpilot_openclaw", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert serve.returncode == 0 and "--upstream" in serve.stdout
    launch = subprocess.run(
        [sys.executable, "-m", "tokenpilot_openclaw.hosts.launch", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert launch.returncode == 0, launch.stderr
    assert "usage" in launch.stdout.lower()


def test_a_room_that_took_an_old_modules_name_still_offers_its_names():
    """`tokenpilot.history` was a module and is a room: its old public names still resolve."""
    out = _python(
        "from tokenpilot.history import call_ids, History\n"
        "from tokenpilot.history.sync import call_ids as c, History as H\n"
        "from tokenpilot.messages import check_message, content_text\n"
        "from tokenpilot.store import Artifacts, Store\n"
        "print(call_ids is c and History is H)"
    )
    assert out.stdout.strip() == "True", out.stderr
    missing = _python("import tokenpilot.history as h; h.no_such_name")
    assert "AttributeError" in missing.stderr and "no_such_name" in missing.stderr
