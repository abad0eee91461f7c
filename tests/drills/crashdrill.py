"""Kill a real `tokenpilot serve` with SIGKILL in the middle of a burst, and check what survived.

The drill drives `sessions` conversations at once through a proxy subprocess (each one a
chain of streaming calls that each add a tool call and a large tool output, so every
call stores an original), kills the proxy when the fake upstream has seen `kill_after`
requests, starts it again on the same state and store, and lets every conversation go on.

It then checks the two promises a crash must not break:
- every artifact id the upstream was ever sent can still be recalled, byte-exact;
- the first request of each session after the restart extends what the upstream last
  saw of that session (the provider's cached prefix is rendered again).

Used by `tests/test_crash_safety.py` (small) and `benchmarks/bench_crash.py` (200 streams).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tokenpilot_proxy.demo import FakeUpstream, Recorded

_ART = re.compile(r"art_[0-9a-f]{24}")
_RULES = "".join(f"Rule {n}: check the output of step {n} before the next one.\n" for n in range(150))


def system_prompt(date: str) -> str:
    """A system prompt with a volatile date, as agents send them: the date changes at the restart,
    so a session rebuilt from scratch would render its prefix differently."""
    return f"You are a coding agent.\nCurrent date: {date}\nUse the tools.\n{_RULES}"


@dataclass
class DrillResult:
    """What the drill counted. `prefix_changes` and `artifacts_lost` must be 0."""

    requests: int = 0
    answered: int = 0
    errors: int = 0
    upstream_before_kill: int = 0
    artifacts_checked: int = 0
    artifacts_lost: int = 0
    sessions_checked: int = 0
    prefix_changes: int = 0
    restart_s: float = 0.0
    problems: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tool_output(session: int, step: int, lines: int = 1500) -> str:
    """A large, unique command output: reduced at ingestion, so its original is stored."""
    return "".join(
        f"s{session} step {step} line {n}: value={session * 7919 + step * 104729 + n}\n" for n in range(lines)
    )


def tool_turn(session: int, step: int) -> list[dict[str, Any]]:
    """One step of a session: the assistant's tool call and its large output."""
    cid = f"call_{session}_{step}"
    args = json.dumps({"command": f"./run-check --case {session}-{step}"})
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": "exec", "arguments": args}}],
        },
        {"role": "tool", "tool_call_id": cid, "content": tool_output(session, step)},
    ]


TOOLS = [
    {
        "type": "function",
        "function": {"name": "exec", "description": "run a shell command", "parameters": {"type": "object"}},
    }
]


class ServeProcess:
    """One `tokenpilot serve` subprocess on a fixed port, state and store."""

    def __init__(self, upstream: str, port: int, workdir: Path, env: dict[str, str] | None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.cmd = [
            sys.executable,
            "-m",
            "tokenpilot_openclaw",
            "serve",
            "--upstream",
            upstream,
            "--port",
            str(port),
            "--state-dir",
            str(workdir / "state"),
            "--store-dir",
            str(workdir / "store"),
            "--flush-interval",
            "0",  # no periodic flush: only the write-through can have saved the state
        ]
        self.env = {**os.environ, **(env or {})}
        self.log = workdir / "proxy.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, http: aiohttp.ClientSession, timeout_s: float = 30.0) -> float:
        t0 = time.perf_counter()
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(*self.cmd, env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                async with http.get(f"{self.url}/health") as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except aiohttp.ClientError:
                pass
            if self.proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tokenpilot serve did not start; see {self.log}")
            await asyncio.sleep(0.05)

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except asyncio.TimeoutError:
                await self.kill()


async def _stream(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> bool:
    """One streaming call; True when it ended with `[DONE]`."""
    try:
        async with http.post(f"{url}/v1/chat/completions", json=body) as r:
            if r.status != 200:
                await r.read()
                return False
            data = await r.read()
            return b"data: [DONE]" in data
    except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
        return False


def _key(j: int) -> str:
    return f"drill-session-{j}"


def _last_seen(records: Sequence[Recorded]) -> dict[str, Recorded]:
    last: dict[str, Recorded] = {}
    for r in records:
        if isinstance(r.body, dict) and isinstance(r.body.get("prompt_cache_key"), str):
            last[r.body["prompt_cache_key"]] = r
    return last


def extends(new: Any, old: Any) -> bool:
    """Whether request body `new` continues `old`: same tools, `old`'s messages as its prefix."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return False
    n, o = new.get("messages") or [], old.get("messages") or []
    return new.get("tools") == old.get("tools") and n[: len(o)] == o


async def crash_drill(
    workdir: str | Path,
    *,
    sessions: int = 20,
    streams: int = 200,
    kill_after: int | None = None,
    chunk_delay_s: float = 0.002,
    env: dict[str, str] | None = None,
) -> DrillResult:
    """Run the drill in `workdir` (state, store and the proxy's log go there)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    steps = max(streams // sessions, 2)
    kill_after = kill_after if kill_after is not None else (sessions * steps) // 2
    result = DrillResult()
    upstream = FakeUpstream(chunk_delay_s=chunk_delay_s)
    await upstream.start()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        proxy = ServeProcess(upstream.url, free_port(), workdir, env)
        await proxy.start(http)
        killed = asyncio.Event()
        histories = {
            j: [
                {"role": "system", "content": system_prompt("2026-12-02")},
                {"role": "user", "content": f"check case {j}"},
            ]
            for j in range(sessions)
        }
        progress = dict.fromkeys(range(sessions), 0)  # steps whose request was answered

        def body(j: int) -> dict[str, Any]:
            return {
                "model": "fake-model",
                "messages": histories[j],
                "tools": TOOLS,
                "stream": True,
                "prompt_cache_key": _key(j),
            }

        async def converse(j: int, until: int) -> None:
            while progress[j] < until:
                step = progress[j]
                if len(histories[j]) < 2 + 2 * (step + 1):
                    histories[j] = histories[j] + tool_turn(j, step)
                result.requests += 1
                if await _stream(http, proxy.url, body(j)):
                    result.answered += 1
                    progress[j] += 1
                else:
                    result.errors += 1
                    if killed.is_set():
                        return  # the proxy is down: retried after the restart
                    await asyncio.sleep(0.05)

        async def killer() -> None:
            while len(upstream.chat_requests()) < kill_after:
                await asyncio.sleep(0.005)
            await proxy.kill()
            killed.set()

        kill_task = asyncio.create_task(killer())
        await asyncio.gather(*(converse(j, steps) for j in range(sessions)))
        if not killed.is_set():  # everything finished before the kill point
            kill_task.cancel()
            await proxy.kill()
            killed.set()
        before = list(upstream.chat_requests())
        result.upstream_before_kill = len(before)
        last = _last_seen(before)

        result.restart_s = await proxy.start(http)
        killed.clear()
        for h in histories.values():
            h[0] = {"role": "system", "content": system_prompt("2026-12-03")}  # a new day
        try:
            # The first request of each session after the restart: its pending call again.
            first_after: dict[str, Any] = {}
            for j in range(sessions):
                if progress[j] >= steps:
                    histories[j] = histories[j] + tool_turn(j, progress[j])  # one call more
                n0 = len(upstream.chat_requests())
                result.requests += 1
                ok = await _stream(http, proxy.url, body(j))
                result.answered += ok
                result.errors += not ok
                progress[j] += ok
                seen = upstream.chat_requests()[n0:]
                first_after[_key(j)] = seen[0].body if seen else None
            for key, old in last.items():
                result.sessions_checked += 1
                if not extends(first_after.get(key), old.body):
                    result.prefix_changes += 1
                    result.problems.append(
                        f"{key}: the first request after the restart does not extend the last one before"
                    )
            # Every original the upstream was ever pointed at is still there.
            sent = {
                (r.body.get("prompt_cache_key"), aid)
                for r in before
                if isinstance(r.body, dict)
                for aid in _ART.findall(r.raw.decode("utf-8", "replace"))
            }
            for key, aid in sorted(sent):
                if True:
                    result.artifacts_checked += 1
                    q = {"session": key}
                    async with http.get(f"{proxy.url}/tokenpilot/artifacts/{aid}", params=q) as resp:
                        found = resp.status == 200 and (await resp.json()).get("found") is True
                    if not found:
                        result.artifacts_lost += 1
                        result.problems.append(f"{key}: {aid} not recallable after the restart")
            # And the conversations carry on to the end.
            await asyncio.gather(*(converse(j, steps + 1) for j in range(sessions)))
        finally:
            await proxy.stop()
            await upstream.close()
    return result
