"""`tokenpilot enable|disable claude-code|codex|openclaw`: round trips on the hosts' own files.

Each host's settings are written, enabling twice changes nothing (no second backup),
and disabling restores every file byte for byte and removes what enabling created.
The proxy's start: the systemd unit as generated text (checked by `systemd-analyze
verify` where it exists, and `systemctl --user` called as expected through a stand-in),
and the launcher for real: it starts `tokenpilot serve` once. Then the real CLIs: Claude
Code runs the launcher from its SessionStart hook and reaches the proxy it started;
OpenClaw validates what `enable openclaw` wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import test_claude_code_e2e as claude_e2e  # their installers (the cache path is read at import)
import test_openclaw_e2e as openclaw_e2e

from tokenpilot_openclaw.cli import main
from tokenpilot_proxy.demo import FakeAnthropic, FakeUpstream, LoopThread, Reply
from tokenpilot_proxy.hosts import launch
from tokenpilot_proxy.hosts.codex_toml import tomllib
from tokenpilot_proxy.hosts.service import unit_text

CODEX_TOML = """# my Codex settings
model = "gpt-5.4"  # the one I like
model_provider = "openai"

[model_providers.other]
base_url = "http://example.invalid/v1"   # an old one, keep it

[profiles.fast]
model_reasoning_effort = "low"
"""
CLAUDE_SETTINGS = """{
  "permissions": {"allow": ["Bash(ls:*)"]},
  "env": {"FOO": "bar"},
  "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "echo mine"}]}]}
}
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for var in (
        "CODEX_HOME",
        "CLAUDE_CONFIG_DIR",
        "XDG_STATE_HOME",
        "TOKENPILOT_HOSTS_DIR",
        "OPENCLAW_CONFIG_PATH",
    ):
        monkeypatch.delenv(var, raising=False)
    return h


def tp(*argv: str) -> int:
    return main(list(argv))


def state_files(home: Path) -> dict[str, bytes]:
    root = home / ".local" / "state" / "tokenpilot" / "hosts"
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


def test_codex_enable_twice_then_disable_restores_config_toml(home, capsys):
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_TOML)
    config.chmod(0o600)
    assert tp("enable", "codex", "--start", "launcher") == 0
    text = config.read_text()
    data = tomllib.loads(text)
    assert data["model_provider"] == "tokenpilot"
    assert data["model_providers"]["tokenpilot"] == {
        "name": "TokenPilot",
        "base_url": "http://127.0.0.1:8787/v1",
        "env_key": "OPENAI_API_KEY",
        "wire_api": "responses",
    }
    assert data["model_providers"]["other"] == {"base_url": "http://example.invalid/v1"}
    assert data["profiles"] == {"fast": {"model_reasoning_effort": "low"}}
    for comment in ("# my Codex settings", "# the one I like", "# an old one, keep it"):
        assert comment in text
    assert "tokenpilot_proxy.hosts.launch http://127.0.0.1:8787" in capsys.readouterr().out  # how to start it

    enabled, kept = config.read_bytes(), state_files(home)
    assert tp("enable", "codex", "--start", "launcher") == 0
    assert "nothing changed" in capsys.readouterr().out
    assert config.read_bytes() == enabled and state_files(home) == kept  # the first backup stays

    assert tp("disable", "codex") == 0
    assert config.read_bytes() == CODEX_TOML.encode()
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert state_files(home) == {}
    assert tp("disable", "codex") == 0 and "not enabled" in capsys.readouterr().out


def test_codex_without_a_config_gets_one_and_loses_it_again(home):
    config = home / ".codex" / "config.toml"
    assert tp("enable", "codex", "--start", "none", "--port", "9911") == 0
    assert tomllib.loads(config.read_text())["model_providers"]["tokenpilot"]["base_url"] == (
        "http://127.0.0.1:9911/v1"
    )
    assert tp("disable", "codex") == 0
    assert not config.exists() and not config.parent.exists()  # the folder enabling made, too


@pytest.mark.parametrize(
    "toml",
    [
        'model_providers = { tokenpilot = { base_url = "http://x/v1" } }\n',
        'model = "o3"\nnot toml at all = = \n',
    ],
)
def test_codex_config_the_text_edit_cannot_handle_is_left_alone(home, toml, capsys):
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(toml)
    assert tp("enable", "codex", "--start", "none") == 1
    assert config.read_text() == toml
    assert "config.toml" in capsys.readouterr().err
    assert state_files(home) == {}


def test_claude_code_enable_twice_then_disable_restores_settings(home):
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(CLAUDE_SETTINGS)
    assert tp("enable", "claude-code", "--start", "launcher") == 0
    data = json.loads(settings.read_text())
    assert data["env"] == {"FOO": "bar", "ANTHROPIC_BASE_URL": "http://127.0.0.1:8788"}
    assert data["permissions"] == {"allow": ["Bash(ls:*)"]}
    hooks = data["hooks"]["SessionStart"]
    assert hooks[0] == {"hooks": [{"type": "command", "command": "echo mine"}]}
    command = hooks[1]["hooks"][0]["command"]
    assert (
        command.startswith(sys.executable)
        and "tokenpilot_proxy.hosts.launch http://127.0.0.1:8788" in command
    )
    assert "--upstream https://api.anthropic.com/v1 --port 8788" in command

    enabled, kept = settings.read_bytes(), state_files(home)
    assert tp("enable", "claude-code", "--start", "launcher") == 0
    assert settings.read_bytes() == enabled and state_files(home) == kept
    assert tp("disable", "claude-code") == 0
    assert settings.read_bytes() == CLAUDE_SETTINGS.encode()


def test_claude_code_settings_that_are_not_json_are_left_alone(home, capsys):
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{ not json")
    assert tp("enable", "claude-code") == 1
    assert settings.read_text() == "{ not json" and "not valid JSON" in capsys.readouterr().err


def test_systemd_unit_is_written_enabled_and_removed(home, tmp_path, monkeypatch):
    """Where `systemctl --user` works: a user unit, enabled and started; disable stops it."""
    calls = tmp_path / "systemctl.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert tp("enable", "codex") == 0  # auto: `systemctl --user show-environment` answers
    unit = home / ".config" / "systemd" / "user" / "tokenpilot-codex.service"
    assert unit.read_text() == unit_text(
        "codex", ["--upstream", "https://api.openai.com/v1", "--port", "8787"]
    )
    assert calls.read_text().splitlines() == [
        "--user show-environment",
        "--user daemon-reload",
        "--user enable --now tokenpilot-codex.service",
    ]
    assert tp("disable", "codex") == 0
    assert not unit.exists() and not (home / ".codex" / "config.toml").exists()
    assert calls.read_text().splitlines()[3:] == [
        "--user disable --now tokenpilot-codex.service",
        "--user daemon-reload",
    ]


def test_systemd_unit_text_verifies(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "tokenpilot-codex.service"
    unit.write_text(unit_text("codex", ["--upstream", "https://api.openai.com/v1", "--port", "8787"]))
    res = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    problems = [line for line in res.stderr.splitlines() if unit.name in line]
    assert res.returncode == 0 or not problems, res.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(pid_path: Path) -> None:
    if pid_path.exists():
        try:
            os.kill(int(pid_path.read_text()), signal.SIGTERM)
        except ProcessLookupError:
            pass


def test_the_launcher_starts_the_proxy_once(tmp_path):
    loop = LoopThread()
    fake = FakeUpstream()
    upstream = loop.run(fake.start())
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    args = ["--upstream", upstream, "--port", str(port), "--no-state", "--store-dir", str(tmp_path / "store")]
    try:
        assert not launch.healthy(url)
        assert launch.main([url, "--log-file", str(log), "--", *args]) == 0  # as a host's hook runs it
        assert launch.healthy(url)
        first = launch.pid_file(log).read_text()
        assert launch.healthy(url)
        assert launch.ensure(url, args, log)  # up already: nothing started
        assert launch.pid_file(log).read_text() == first
    finally:
        _stop(launch.pid_file(log))
        loop.run(fake.close())
        loop.close()


# ---------------------------------------------------------------------------
# The real CLIs (cached by their e2e tests; skipped, saying why, when they cannot be had)
# ---------------------------------------------------------------------------
@pytest.mark.slow
def test_real_claude_code_starts_the_proxy_from_its_session_start_hook(home, tmp_path):
    claude = claude_e2e._ensure_claude()
    loop = LoopThread()
    fake = FakeAnthropic(responder=lambda body: Reply("hello from the fake"))
    upstream = loop.run(fake.start())
    port = _free_port()
    assert (
        tp("enable", "claude-code", "--start", "launcher", "--port", str(port), "--upstream", upstream) == 0
    )
    settings = home / ".claude" / "settings.json"
    pid = home / ".local" / "state" / "tokenpilot" / "serve-claude-code.pid"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    try:
        assert not launch.healthy(f"http://127.0.0.1:{port}")
        res = subprocess.run(
            [str(claude), "--output-format", "json", "-p", "say hello"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:] + res.stdout[-2000:]
        assert json.loads(res.stdout)["result"] == "hello from the fake"
        assert pid.exists(), "the SessionStart hook did not run the launcher"
        assert fake.messages_requests(), "Claude Code did not reach the upstream through the proxy"
    finally:
        _stop(pid)
        loop.run(fake.close())
        loop.close()
    assert tp("disable", "claude-code") == 0
    assert not settings.exists()


@pytest.mark.slow
def test_real_openclaw_validates_enable_and_disable_restores_its_config(home):
    node_bin, openclaw = openclaw_e2e._ensure_tools()
    config = home / ".openclaw" / "openclaw.json"
    config.parent.mkdir()
    original = '{\n  // mine\n  agents: { defaults: { workspace: "~/work" } },\n}\n'
    config.write_text(original)
    env_path = f"{node_bin}:{openclaw.parent}:{os.environ['PATH']}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", env_path)
        mp.setenv("OPENCLAW_NO_AUTO_UPDATE", "1")
        mp.setenv("OPENCLAW_OFFLINE", "1")
        argv = ["enable", "openclaw", "--upstream", "http://127.0.0.1:9/v1", "--model", "fake-model"]
        assert tp(*argv) == 0  # `openclaw plugins install` and `openclaw config validate` ran
        enabled = config.read_bytes()
        assert b"tokenpilot" in enabled
        assert tp(*argv) == 0
        assert tp("disable", "openclaw") == 0
    assert config.read_text() == original
    assert not config.with_name("openclaw.json.tokenpilot.bak").exists()


# ---------------------------------------------------------------------------
# Issue #41: disable keeps the user's later edits; enable refuses what could not run
# ---------------------------------------------------------------------------
def test_disable_keeps_what_the_user_added_to_codex_config_after_enable(home, capsys):
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_TOML)
    assert tp("enable", "codex", "--start", "launcher") == 0
    edited = (
        '# added later\napproval_policy = "never"\n'
        + config.read_text()
        + '\n[profiles.deep]\nmodel = "o5"\n'
    )
    config.write_text(edited)
    assert tp("disable", "codex") == 0
    assert "your later edits kept" in capsys.readouterr().out
    want = '# added later\napproval_policy = "never"\n' + CODEX_TOML + '\n[profiles.deep]\nmodel = "o5"\n'
    assert config.read_text() == want  # enable's provider out, the user's lines in
    assert state_files(home) == {}


def test_disable_keeps_what_the_user_added_to_claude_settings_after_enable(home):
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(CLAUDE_SETTINGS)
    assert tp("enable", "claude-code", "--start", "launcher") == 0
    data = json.loads(settings.read_text())
    data["env"]["BAR"] = "baz"
    data["permissions"]["allow"].append("Bash(git:*)")
    settings.write_text(json.dumps(data, indent=2))
    assert tp("disable", "claude-code") == 0
    after = json.loads(settings.read_text())
    assert after["env"] == {"FOO": "bar", "BAR": "baz"}
    assert after["permissions"] == {"allow": ["Bash(ls:*)", "Bash(git:*)"]}
    assert after["hooks"] == json.loads(CLAUDE_SETTINGS)["hooks"]  # ours gone, the user's kept


def test_disable_changes_nothing_where_the_user_edited_enables_own_lines(home, capsys):
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_TOML)
    assert tp("enable", "codex", "--start", "launcher") == 0
    edited = config.read_text().replace("http://127.0.0.1:8787/v1", "http://127.0.0.1:9999/v1")
    config.write_text(edited)
    kept = state_files(home)
    assert tp("disable", "codex") == 1
    err = capsys.readouterr().err
    assert "nothing changed" in err and "+base_url" in err and "9999" in err  # the user's edit, shown
    assert config.read_text() == edited and state_files(home) == kept


def test_disable_removes_the_launchers_files(home):
    assert tp("enable", "codex", "--start", "launcher") == 0
    state = home / ".local" / "state" / "tokenpilot"
    for suffix in (".log", ".lock", ".pid"):
        (state / f"serve-codex{suffix}").write_text("12345678\n" if suffix == ".pid" else "x")
    assert tp("disable", "codex") == 0
    assert sorted(p.name for p in state.glob("serve-codex*")) == []


def test_enable_refuses_without_the_proxy_extra_and_changes_nothing(home, capsys, monkeypatch):
    from tokenpilot_proxy.hosts import enable

    monkeypatch.setattr(enable, "PROXY_MODULES", ("aiohttp", "no_such_module_for_tokenpilot"))
    assert tp("enable", "claude-code", "--start", "launcher") == 2
    err = capsys.readouterr().err
    assert "pip install 'tokenpilot[proxy]'" in err and "no_such_module_for_tokenpilot" in err
    assert not (home / ".claude").exists() and state_files(home) == {}


def test_enable_refuses_a_port_another_program_holds(home, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert tp("enable", "codex", "--port", str(port), "--start", "launcher") == 2
    assert f"port {port} is taken by another program" in capsys.readouterr().err
    assert not (home / ".codex").exists()


def test_doctor_names_the_missing_extra(home, monkeypatch):
    from tokenpilot_proxy import doctor
    from tokenpilot_proxy.hosts import enable

    monkeypatch.setattr(enable, "PROXY_MODULES", ("no_such_module_for_tokenpilot",))
    args = argparse.Namespace(claude_settings=None, codex_home=None, proxy_url=None)
    checks = doctor.host_checks("codex", args)
    (row,) = [c for c in checks if c.what == "proxy extra"]
    assert row.status == "FAIL" and "pip install 'tokenpilot[proxy]'" in row.detail
