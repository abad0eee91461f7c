"""What a recall costs through `tokenpilot mcp` (the SDK's client over stdio) beside the same
recall in-process (`TokenPilot.execute_recall`, what the proxy runs): median and p90 ms per
call, whole / line range / pattern, on a 3,000-line original, side by side in one run.

    python benchmarks/bench_mcp_recall.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tokenpilot import Config, TokenPilot
from tokenpilot.store.artifacts import ArtifactStore

LOG = "".join(
    f"{i:05d} ERROR disk full on /dev/sd{i % 4}\n" if i % 250 == 7 else f"{i:05d} INFO batch {i} ok\n"
    for i in range(3000)
)


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"{statistics.median(ordered) * 1000:7.2f} ms median, {ordered[int(len(ordered) * 0.9)] * 1000:7.2f} ms p90"


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = ArtifactStore(Path(tmp) / "store")
        aid = store.put("s1", LOG)
        pilot = TokenPilot(Config(), store=store)
        cases = {
            "whole": {"artifact_id": aid},
            "range": {"artifact_id": aid, "start_line": 1200, "end_line": 1260},
            "pattern": {"artifact_id": aid, "pattern": "ERROR"},
        }
        args = [
            "-m",
            "tokenpilot_mcp",
            "--store-dir",
            str(Path(tmp) / "store"),
            "--state-dir",
            str(Path(tmp) / "s"),
        ]
        async with stdio_client(StdioServerParameters(command=sys.executable, args=args)) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                print(f"recall of a {len(LOG):,}-char, 3,000-line original, {calls} calls each")
                for name, case in cases.items():
                    local, remote = [], []
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        text = pilot.execute_recall(json.dumps(case), session_id="s1")
                        local.append(time.perf_counter() - t0)
                        t0 = time.perf_counter()
                        got = await session.call_tool("recall_artifact", case)
                        remote.append(time.perf_counter() - t0)
                        assert got.content[0].text == text and not got.isError
                    print(f"  {name:8s} in-process {_ms(local)} | over MCP stdio {_ms(remote)}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--calls", type=int, default=200)
    asyncio.run(main(p.parse_args().calls))
