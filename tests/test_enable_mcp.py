"""`tokenpilot enable claude-code|codex` registers TokenPilot's MCP server in the client's own
MCP configuration, and `disable` takes out exactly that.

Claude Code: `mcpServers.tokenpilot` in `~/.claude.json` (`$CLAUDE_CONFIG_DIR/.claude.json`),
a file Claude Code rewrites itself, so disable removes our key and keeps whatever else
changed. Codex: `[mcp_servers.tokenpilot]` in its config.toml. `--no-mcp`, or an
environment without the `mcp` package, registers nothing and says so; the proxy then adds
and answers recall_artifact as before. The proxy side: a client that lists our MCP
server's tool gets no second recall tool, and that tool's answers are not reduced again.
"""

from __future__ import annotations

import json
import sys

import pytest
from test_enable import home, tp  # noqa: F401 - the fixture, and the CLI entry

from tokenpilot import Config, TokenPilot
from tokenpilot.ingest.stabilize import is_recall_tool, recalled_by_client
from tokenpilot_proxy.codex_wire import deferred_recall
from tokenpilot_proxy.hosts import enable

CLAUDE_JSON = '{\n  "numStartups": 3,\n  "mcpServers": {\n    "mine": {"command": "my-server"}\n  }\n}\n'
CODEX_TOML = '# mine\nmodel = "o5"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n'


def test_claude_code_registers_the_server_and_disable_keeps_claude_codes_later_changes(home):  # noqa: F811
    global_config = home / ".claude.json"
    global_config.write_text(CLAUDE_JSON)
    assert tp("enable", "claude-code", "--start", "none") == 0
    servers = json.loads(global_config.read_text())["mcpServers"]
    assert servers["mine"] == {"command": "my-server"}
    assert servers["tokenpilot"] == {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "tokenpilot_mcp"],
        "env": {},
        "alwaysLoad": True,
    }
    written = global_config.read_bytes()
    assert tp("enable", "claude-code", "--start", "none") == 0
    assert global_config.read_bytes() == written, "enabling twice changes nothing"

    data = json.loads(global_config.read_text())  # Claude Code runs and rewrites its file
    data["numStartups"] = 4
    data["projects"] = {"/work": {"allowedTools": []}}
    global_config.write_text(json.dumps(data, indent=2))
    assert tp("disable", "claude-code") == 0
    after = json.loads(global_config.read_text())
    assert after == {
        "numStartups": 4,
        "mcpServers": {"mine": {"command": "my-server"}},
        "projects": {"/work": {"allowedTools": []}},
    }


def test_claude_code_without_a_global_config_gets_one_and_loses_it_again(home):  # noqa: F811
    global_config = home / ".claude.json"
    assert tp("enable", "claude-code", "--start", "none") == 0
    assert list(json.loads(global_config.read_text())["mcpServers"]) == ["tokenpilot"]
    assert tp("disable", "claude-code") == 0
    assert not global_config.exists()


def test_claude_config_dir_is_where_the_global_config_lives(home, monkeypatch):  # noqa: F811
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / "cc"))
    assert tp("enable", "claude-code", "--start", "none") == 0
    assert "tokenpilot" in json.loads((home / "cc" / ".claude.json").read_text())["mcpServers"]
    assert not (home / ".claude.json").exists()
    assert tp("disable", "claude-code") == 0


def test_disable_leaves_an_entry_the_user_changed(home, capsys):  # noqa: F811
    global_config = home / ".claude.json"
    assert tp("enable", "claude-code", "--start", "none") == 0
    data = json.loads(global_config.read_text())
    data["mcpServers"]["tokenpilot"]["args"] = ["-m", "my_fork"]
    global_config.write_text(json.dumps(data, indent=2))
    changed = global_config.read_bytes()
    assert tp("disable", "claude-code") == 1
    assert global_config.read_bytes() == changed and "my_fork" in capsys.readouterr().err


def test_codex_registers_the_server_and_disable_restores_config_toml(home):  # noqa: F811
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_TOML)
    assert tp("enable", "codex", "--start", "none") == 0
    text = config.read_text()
    assert (
        f'[mcp_servers.tokenpilot]\ncommand = "{sys.executable}"\nargs = ["-m", "tokenpilot_mcp"]\nrequired = true\n'
        in text
    )
    assert '[mcp_servers.docs]\ncommand = "docs-mcp"\n' in text
    written = config.read_bytes()
    assert tp("enable", "codex", "--start", "none") == 0
    assert config.read_bytes() == written
    config.write_text(text + '\n[profiles.mine]\nmodel = "o6"\n')  # the user's later edit stays
    assert tp("disable", "codex") == 0
    assert config.read_text() == CODEX_TOML + '\n[profiles.mine]\nmodel = "o6"\n'


@pytest.mark.parametrize("host", ["claude-code", "codex"])
def test_no_mcp_registers_nothing(home, host, capsys):  # noqa: F811
    assert tp("enable", host, "--start", "none", "--no-mcp") == 0
    assert "no MCP server (--no-mcp)" in capsys.readouterr().out
    assert not (home / ".claude.json").exists()
    codex = home / ".codex" / "config.toml"
    assert "mcp_servers" not in (codex.read_text() if codex.exists() else "")


def test_without_the_mcp_package_enable_says_how_to_get_it(home, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(enable, "mcp_available", lambda: False)  # as without tokenpilot[mcp]
    assert tp("enable", "codex", "--start", "none") == 0
    assert "pip install 'tokenpilot[mcp]'" in capsys.readouterr().out
    assert "mcp_servers" not in (home / ".codex" / "config.toml").read_text()


def test_mcp_recall_tool_names_are_recall_tools():
    for name in ("recall_artifact", "mcp__tokenpilot__recall_artifact", "tokenpilot__recall_artifact"):
        assert is_recall_tool(name)
    for name in ("recall", "artifact", "mcp__tokenpilot__recall_artifacts", None, 3):
        assert not is_recall_tool(name)
    assert recalled_by_client("mcp__tokenpilot__recall_artifact", '{"artifact_id": "art_0123abcd"}') == [
        "art_0123abcd"
    ]
    code = json.dumps('text(await tools.mcp__tokenpilot__recall_artifact({artifact_id: "art_0123abcd"}))')
    assert recalled_by_client("exec", code) == ["art_0123abcd"]
    assert recalled_by_client("exec", json.dumps("await tools.exec_command({cmd: 'ls'})")) is None
    assert recalled_by_client("recall_artifact", '{"artifact_id": "art_0123abcd"}') is None  # the proxy's own


def _history(calls: list[dict], output: str) -> list[dict]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": output},
    ]


def test_a_client_listing_our_mcp_tool_gets_no_second_one_and_its_answers_stay_whole(tmp_path):
    big = "".join(
        f"2026-12-06 12:00:{i % 60:02d} worker {i} ERROR timeout talking to db-{i % 7}\n" for i in range(2000)
    )
    tools = [
        {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
        {
            "type": "function",
            "function": {"name": "mcp__tokenpilot__recall_artifact", "parameters": {"type": "object"}},
        },
    ]
    pilot = TokenPilot(Config(), store=tmp_path / "store")
    bash = [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "./run"}'}}
    ]
    first = pilot.prepare(_history(bash, big), tools, session_id="s")
    assert [t["function"]["name"] for t in first.tools] == ["bash", "mcp__tokenpilot__recall_artifact"]
    assert len(first.messages[-1]["content"]) < len(big) / 4, "the plain output is reduced"
    aid = first.stats.artifacts[0]
    args = json.dumps({"artifact_id": aid})
    recall = [
        {
            "id": "c2",
            "type": "function",
            "function": {"name": "mcp__tokenpilot__recall_artifact", "arguments": args},
        }
    ]
    answer = f"[tokenpilot: all 2000 lines of {aid}]\n{big}"
    more = [
        {"role": "assistant", "content": None, "tool_calls": recall},
        {"role": "tool", "tool_call_id": "c2", "content": answer},
    ]
    second = pilot.prepare(_history(bash, big) + more, tools, session_id="s")
    assert second.messages[-1]["content"] == answer, "a recall's answer reaches the model whole"
    assert second.stats.recalled == 1 and second.stats.prefix_break is None
    assert [t["function"]["name"] for t in second.tools] == ["bash", "mcp__tokenpilot__recall_artifact"]


def test_codex_deferred_namespace_of_our_server_is_seen_as_the_recall_tool():
    listed = {
        "type": "message",
        "role": "developer",
        "content": [
            {
                "type": "input_text",
                "text": "<tools>\nDeferred tool namespaces:\n- mcp__docs: docs\n- mcp__tokenpilot: TokenPilot keeps originals\n</tools>",
            }
        ],
    }
    assert deferred_recall([listed]) == [{"type": "function", "name": "mcp__tokenpilot__recall_artifact"}]
    other = {
        **listed,
        "content": [
            {"type": "input_text", "text": "<tools>\nDeferred tool namespaces:\n- mcp__docs: docs\n</tools>"}
        ],
    }
    assert deferred_recall([other]) == []
    assert deferred_recall([{**listed, "role": "user"}]) == [], (
        "only Codex's own developer message lists tools"
    )


def _doctor_mcp(host: str, root) -> object:
    import argparse

    from tokenpilot_proxy.doctor import check_mcp

    return check_mcp(host, argparse.Namespace(codex_home=root / ".codex"))


@pytest.mark.parametrize("host", ["claude-code", "codex"])
def test_doctor_says_whether_the_mcp_server_is_registered_and_can_start(home, host):  # noqa: F811
    before = _doctor_mcp(host, home)
    assert before.status == "ok" and "not registered" in before.detail
    assert tp("enable", host, "--start", "none") == 0
    after = _doctor_mcp(host, home)
    assert after.status == "ok" and after.detail.endswith(f"{sys.executable} -m tokenpilot_mcp")
    path = home / ".claude.json" if host == "claude-code" else home / ".codex" / "config.toml"
    path.write_text(path.read_text().replace(sys.executable, str(home / "gone" / "python")))
    broken = _doctor_mcp(host, home)
    assert broken.status == "FAIL" and "cannot be started" in broken.detail
