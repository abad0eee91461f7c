"""CI runs exactly the README Quickstart's test command."""

from __future__ import annotations

import re

from conftest import REPO


def _commands(text: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [line for b in blocks for line in b.splitlines() if line and not line.startswith("#")]


def test_ci_runs_the_quickstart_test_command_verbatim():
    readme = (REPO / "README.md").read_text()
    quick = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = _commands(quick)
    assert len(commands) == 2, commands
    ci = (REPO / ".ci" / "run").read_text()
    ci_cmd = [line for line in ci.splitlines() if line.startswith("python3 -m venv")]
    assert ci_cmd == [commands[1]]
    assert "tokenpilot bench" in commands[0]
