"""TokenPilot in a LangGraph agent on OpenAI (needs `pip install 'tokenpilot[examples]'` and
OPENAI_API_KEY; not run by the tests). Same agent as `langgraph_scripted.py`, real model.

    OPENAI_API_KEY=... python examples/langgraph_openai.py [model]

Each call binds `prompt_cache_key=<thread_id>`, so the thread's requests reach the same
prefix cache; the table shows what OpenAI reports as cached (usage_metadata
`input_token_details.cache_read`) next to what TokenPilot sent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver

from tokenpilot import ArtifactStore
from tokenpilot_langgraph import create_tokenpilot_agent, default_pilot, thread_stats

sys.path.insert(0, str(Path(__file__).parent))
from langgraph_scripted import TASKS, fetch_page, run_shell, write_file  # noqa: E402


def main(model_name: str = "gpt-5-mini") -> None:
    state_dir = Path(".tokenpilot-demo")
    state_dir.mkdir(exist_ok=True)
    # Artifacts and checkpoints on disk: rerun the script and the thread resumes with
    # identical prompt bytes (and recall still works) in the new process.
    pilot = default_pilot(store=ArtifactStore(state_dir / "artifacts"))
    with SqliteSaver.from_conn_string(str(state_dir / "checkpoints.sqlite")) as checkpointer:
        graph = create_tokenpilot_agent(
            ChatOpenAI(model=model_name),
            [fetch_page, run_shell, write_file],
            pilot=pilot,
            checkpointer=checkpointer,
            prompt="You are a careful assistant. Use the tools, then answer in one sentence.",
        )
        config = {"configurable": {"thread_id": "openai-demo"}}
        for task, _, _ in TASKS:
            result = graph.invoke({"messages": [("user", task)]}, config)
            print(f"> {task}\n{result['messages'][-1].content}\n")

    stats = thread_stats(pilot, "openai-demo")
    for i, call in enumerate(stats.calls):
        p = call.prepare
        print(
            f"call {i:>2}: raw {p.raw_tokens:>6}  sent {p.tokens:>6}  "
            f"provider input {call.input_tokens}  cached {call.cache_read_tokens}  {p.prefix_break or ''}"
        )
    print(json.dumps(stats.summary(), indent=2))


if __name__ == "__main__":
    main(*sys.argv[1:])
