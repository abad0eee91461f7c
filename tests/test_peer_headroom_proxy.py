"""The bench's Headroom driver forwards what Headroom's real `headroom proxy` process
forwards, byte for byte, and the same bytes on every run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tokenpilot.measure.bench.peers import headroom as peer

TRACES = Path("/work/shared/traces")
CLI = shutil.which("headroom", path=os.path.dirname(sys.executable)) or shutil.which("headroom")
MODEL = "gpt-4.1"

pytestmark = [
    pytest.mark.skipif(peer.missing() is not None, reason=f"Headroom peer cannot run: {peer.missing()}"),
    pytest.mark.skipif(CLI is None, reason="the `headroom` command is not installed"),
    pytest.mark.skipif(not TRACES.is_dir(), reason="no shared traces on this machine"),
]


def _sessions() -> list:
    """A few small recorded sessions: tau-bench's JSON tool output, mini-swe-agent's shell."""
    from tokenpilot.measure.traces import load

    tau = load(str(TRACES / "tau_bench"))[:2]
    swe = sorted(load(str(TRACES / "mini_swe_agent")), key=lambda s: len(s.calls))
    return tau + [s for s in swe if 5 <= len(s.calls) <= 15][:1]


class _Upstream(ThreadingHTTPServer):
    """A local OpenAI stand-in: records each forwarded body, answers as the driver's does."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[dict[str, Any]] = []
        self.previous: list[dict[str, Any]] = []


class _Handler(BaseHTTPRequestHandler):
    server: _Upstream

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.bodies.append(body)
        messages = body.get("messages") or []
        usage = peer.openai_usage(self.server.previous, messages)
        self.server.previous = messages
        out = json.dumps(peer.openai_answer(body.get("model"), usage)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict[str, Any], session_id: str) -> None:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "content-type": "application/json",
            "authorization": "Bearer bench",
            peer.SESSION_HEADER: session_id,
        },
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200


@pytest.fixture(scope="module")
def real_proxy(tmp_path_factory) -> Iterator[tuple[str, _Upstream]]:
    """`headroom proxy --mode cache` on a loopback port, offline, before the stand-in."""
    upstream = _Upstream()
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    scratch = tmp_path_factory.mktemp("headroom-proxy")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADROOM_")}
    env.update(peer._offline_env(str(scratch)), HOME=str(scratch))
    port = _free_port()
    cmd = [CLI, "proxy", "--mode", "cache", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--openai-api-url", f"http://127.0.0.1:{upstream.server_address[1]}/v1"]
    cmd += ["--no-rate-limit", "--no-cache", "--disable-kompress"]
    log = (scratch / "proxy.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):  # its startup preloads compressors: wait for /health
            if proc.poll() is not None:
                pytest.fail(f"headroom proxy exited: {(scratch / 'proxy.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        else:
            pytest.fail("headroom proxy did not answer /health in 120 s")
        yield f"http://127.0.0.1:{port}/v1/chat/completions", upstream
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        upstream.shutdown()
        upstream.server_close()


def _driver_bodies(sessions: list) -> list[str]:
    """What the bench's driver forwards for every call of `sessions`, one session after another."""
    proxy = peer._Proxy(MODEL, "cache")
    proxy.start()
    try:
        out = []
        for s in sessions:
            for c in s.calls:
                body, _ = proxy.send(s.id, s.prompt(c), s.tools)
                out.append(json.dumps(body, sort_keys=True))
        return out
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def sessions() -> list:
    return _sessions()


@pytest.fixture(scope="module")
def real_bodies(real_proxy, sessions) -> list[str]:
    url, upstream = real_proxy
    for s in sessions:
        upstream.previous = []  # the stand-in's cache is per session, as the driver's
        for c in s.calls:
            body: dict[str, Any] = {"model": MODEL, "messages": s.prompt(c)}
            if s.tools:
                body["tools"] = s.tools
            _post(url, body, s.id)
    return [json.dumps(b, sort_keys=True) for b in upstream.bodies]


def test_driver_forwards_what_the_real_proxy_forwards(sessions, real_bodies):
    driver = _driver_bodies(sessions)
    assert len(driver) == len(real_bodies) == sum(len(s.calls) for s in sessions) > 0
    for i, (a, b) in enumerate(zip(driver, real_bodies)):
        assert a == b, f"call {i}: the driver's body differs from the real proxy's"
    # the recorded prompts were changed somewhere: Headroom acted, not only passed through
    sent = [json.dumps(s.prompt(c), sort_keys=True) for s in sessions for c in s.calls]
    assert any(json.dumps(json.loads(b)["messages"], sort_keys=True) != p for b, p in zip(driver, sent))


def test_driver_is_deterministic(sessions):
    assert _driver_bodies(sessions) == _driver_bodies(sessions)


def test_environment_is_restored(monkeypatch):
    # Headroom's first import sets variables of its own (onnxruntime's library path): done
    # once here, so the check reads only what the driver sets, whichever test ran first.
    warm = peer._Proxy(MODEL, "cache")
    warm.start()
    warm.stop()
    monkeypatch.setenv("HEADROOM_MODE", "token")
    monkeypatch.delenv("HEADROOM_DEDUPE", raising=False)
    before = dict(os.environ)
    proxy = peer._Proxy(MODEL, "cache")
    proxy.start()
    try:
        assert os.environ["HEADROOM_DEDUPE"] == "1"  # the coding profile's switch, seeded
        assert os.environ["HEADROOM_MODE"] == "cache"  # the user's own setting put aside
    finally:
        proxy.stop()
    assert dict(os.environ) == before
