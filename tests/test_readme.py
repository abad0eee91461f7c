"""CI runs exactly the README Quickstart's two commands; the README stays a product page."""

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
    ci = [
        line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert ci.count(commands[1]) == 1  # the tests, verbatim
    assert "tokenpilot bench" in commands[0]
    # the main job first, verbatim, on a base install (issue #22)
    first = [line for line in ci if commands[0] in line]
    assert len(first) == 1 and ci.index(first[0]) < ci.index(commands[1])
    assert "bash .ci/extras" in (REPO / ".ci" / "run").read_text()


def test_the_hosts_page_stategraph_snippet_runs_verbatim():
    """docs/hosts.md's 'existing agents' block, executed as written, with a scripted model and one tool."""
    import pytest

    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    from tokenpilot_langgraph.testing import ScriptedChatModel, answer, tool_call

    hosts = (REPO / "docs" / "hosts.md").read_text()
    section = hosts.split("Your own `StateGraph`", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)

    @tool
    def lookup(city: str) -> str:
        """The weather in a city."""
        return f"{city}: sunny, 21 C\n" * 4000  # 72k chars: over the generic 50k limit

    model = ScriptedChatModel(replies=[tool_call("lookup", {"city": "Oslo"}), answer("Sunny in Oslo.")])
    scope = {"model": model, "tools": [lookup], "SYSTEM": "You are a weather agent."}
    exec(compile(code, "README.md", "exec"), scope)
    graph = scope["graph"]
    config = {"configurable": {"thread_id": "readme"}}
    out = graph.invoke({"messages": [HumanMessage("Weather in Oslo?")]}, config)
    assert out["messages"][-1].content == "Sunny in Oslo." and len(model.requests) == 2
    assert "tokenpilot" in graph.get_state(config).values  # the channel holds TokenPilot's state
    seen = [m for m in model.requests[1].messages if m.type == "tool"][0]
    assert len(seen.content) < len(out["messages"][2].content)  # the model saw the reduced result


def test_the_readme_is_a_product_page():
    """Issue #41: at most 250 lines and 20 KB, one results table, the two Quickstart commands."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250 and len(readme.encode()) <= 20_000
    tables = re.findall(r"\n\|[^\n]*\|\n\|[-:| ]+\|\n", readme)
    assert len(tables) == 2  # the hosts' on/off table and the one results table
    assert "## Results" in readme


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []
