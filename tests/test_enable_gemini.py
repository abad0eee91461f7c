"""`tokenpilot enable|disable gemini-cli` and `doctor --host gemini-cli` on Gemini CLI's own files
(`~/.gemini/.env`, `~/.gemini/settings.json`); the real CLI runs in tests/test_gemini_cli_e2e.py."""

from __future__ import annotations

import json
import sys

import pytest

from tokenpilot_openclaw.cli import main
from tokenpilot_proxy.hosts.gemini_config import env_text, env_value, nearer_env_files, trusted

SETTINGS = """{
  "ui": {"theme": "Dracula"},
  "mcpServers": {"github": {"command": "gh-mcp"}},
  "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "echo mine"}]}]}
}
"""
ENV = "# mine\nGEMINI_MODEL=gemini-2.5-pro\nexport GOOGLE_GEMINI_BASE_URL=https://old.example\n"


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    (h / ".gemini").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    for var in ("GEMINI_CLI_HOME", "XDG_STATE_HOME", "TOKENPILOT_HOSTS_DIR", "GOOGLE_GEMINI_BASE_URL",
                "GEMINI_CLI_TRUST_WORKSPACE"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    return h


def tp(*argv: str) -> int:
    return main(list(argv))


def test_enable_twice_then_disable_restores_both_files(home):
    settings, env = home / ".gemini" / "settings.json", home / ".gemini" / ".env"
    settings.write_text(SETTINGS)
    env.write_text(ENV)
    assert tp("enable", "gemini-cli", "--start", "launcher", "--port", "9797") == 0
    assert (
        env.read_text()
        == "# mine\nGEMINI_MODEL=gemini-2.5-pro\nGOOGLE_GEMINI_BASE_URL=http://127.0.0.1:9797\n"
    )
    data = json.loads(settings.read_text())
    assert data["ui"] == {"theme": "Dracula"} and data["mcpServers"]["github"] == {"command": "gh-mcp"}
    assert data["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    hooks = data["hooks"]["SessionStart"]
    assert hooks[0] == {"hooks": [{"type": "command", "command": "echo mine"}]}
    command = hooks[1]["hooks"][0]["command"]
    assert (
        command.startswith(sys.executable)
        and "tokenpilot_proxy.hosts.launch http://127.0.0.1:9797" in command
    )
    assert "--upstream https://generativelanguage.googleapis.com --port 9797" in command
    enabled = (settings.read_bytes(), env.read_bytes())
    assert tp("enable", "gemini-cli", "--start", "launcher", "--port", "9797") == 0
    assert (settings.read_bytes(), env.read_bytes()) == enabled
    assert tp("disable", "gemini-cli") == 0
    assert settings.read_text() == SETTINGS and env.read_text() == ENV


def test_a_sign_in_the_user_chose_is_kept(home, capsys):
    settings = home / ".gemini" / "settings.json"
    settings.write_text('{"security": {"auth": {"selectedType": "oauth-personal"}}}')
    assert tp("enable", "gemini-cli", "--start", "none", "--no-mcp") == 0
    assert json.loads(settings.read_text())["security"]["auth"]["selectedType"] == "oauth-personal"
    capsys.readouterr()
    assert tp("doctor", "--host", "gemini-cli") == 0
    out = capsys.readouterr().out
    assert "sign-in" in out and "Login with Google" in out
    assert tp("disable", "gemini-cli") == 0
    assert json.loads(settings.read_text()) == {"security": {"auth": {"selectedType": "oauth-personal"}}}


def test_disable_keeps_the_users_later_edits(home):
    settings, env = home / ".gemini" / "settings.json", home / ".gemini" / ".env"
    assert tp("enable", "gemini-cli", "--start", "launcher") == 0
    data = json.loads(settings.read_text())
    data["ui"] = {"theme": "GitHub"}
    data["hooks"]["SessionStart"].append({"hooks": [{"type": "command", "command": "echo later"}]})
    settings.write_text(json.dumps(data, indent=2))
    env.write_text(env.read_text() + "GEMINI_MODEL=gemini-2.5-flash\n")
    assert tp("disable", "gemini-cli") == 0
    assert json.loads(settings.read_text()) == {
        "ui": {"theme": "GitHub"},
        "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "echo later"}]}]},
    }
    assert env.read_text() == "GEMINI_MODEL=gemini-2.5-flash\n"


def test_disable_changes_nothing_where_the_user_edited_enables_own_line(home, capsys):
    env = home / ".gemini" / ".env"
    assert tp("enable", "gemini-cli", "--start", "none", "--no-mcp") == 0
    env.write_text(env.read_text().replace("8789", "9999"))
    assert tp("disable", "gemini-cli") == 1
    assert "9999" in capsys.readouterr().err and "9999" in env.read_text()


def test_settings_that_are_not_json_are_left_alone(home, capsys):
    settings = home / ".gemini" / "settings.json"
    settings.write_text("{ not json")
    assert tp("enable", "gemini-cli", "--start", "none") == 1
    assert settings.read_text() == "{ not json" and not (home / ".gemini" / ".env").exists()
    assert "not valid JSON" in capsys.readouterr().err


def test_doctor_says_where_gemini_cli_would_not_read_the_env_file(home, tmp_path, monkeypatch, capsys):
    assert tp("enable", "gemini-cli", "--start", "none", "--no-mcp", "--port", "9798") == 0
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / ".env").write_text("DEBUG=1\n")
    monkeypatch.chdir(project / "src")
    capsys.readouterr()
    tp("doctor", "--host", "gemini-cli")
    out = capsys.readouterr().out
    assert "GOOGLE_GEMINI_BASE_URL: http://127.0.0.1:9798" in out
    assert f"reads {project / '.env'}" in out, out
    assert "not a trusted folder" in out
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    assert trusted(project / "src", {}) is True
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:1")
    capsys.readouterr()
    tp("doctor", "--host", "gemini-cli")
    out = capsys.readouterr().out
    assert "wins over" in out and "not a trusted folder" not in out


def test_env_file_edits():
    assert env_text(None, "http://x") == "GOOGLE_GEMINI_BASE_URL=http://x\n"
    assert env_text("A=1", "http://x") == "A=1\nGOOGLE_GEMINI_BASE_URL=http://x\n"
    two = "GOOGLE_GEMINI_BASE_URL=a\nB=2\nGOOGLE_GEMINI_BASE_URL=b\n"
    assert env_text(two, "http://x") == "GOOGLE_GEMINI_BASE_URL=http://x\nB=2\n"
    assert env_value(two) == "b" and env_value('GOOGLE_GEMINI_BASE_URL="http://q"  \n') == "http://q"
    assert env_value("OTHER=1\n") is None


def test_nearer_env_files_stop_at_home(home, monkeypatch):
    (home / "p" / ".gemini").mkdir(parents=True)
    (home / "p" / ".gemini" / ".env").write_text("X=1\n")
    (home / ".env").write_text("Y=1\n")
    assert nearer_env_files(home / "p") == [home / "p" / ".gemini" / ".env"]
    assert nearer_env_files(home) == []
