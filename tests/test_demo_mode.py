"""`tokenpilot serve --demo`: the proxy in front of the built-in upstream, no provider, no key.

A newcomer's first minute: a large tool output reaches the (scripted) model reduced, with a
handle; the model asks for it back with `recall_artifact`; the dashboard is up. Run as a user
would, in a subprocess, with no API key in the environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.crashdrill import free_port

pytest.importorskip("aiohttp")

LOG = "\n".join(
    f"{i:05d} INFO worker-{i % 7} processed batch {i} in {i % 13} ms status=ok" for i in range(3000)
)
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")} | {"HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "tokenpilot_proxy", "serve", "--demo", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        seen = []
        for line in proc.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if "serving" in line:
                break
        assert any("demo mode" in s for s in seen), seen
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "session_id": "demo"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def _totals(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/tokenpilot/dashboard/data", timeout=10) as r:
        return json.load(r)["totals"]


def test_a_large_output_arrives_reduced_and_the_demo_model_recalls_it(demo: str):
    messages = [
        {"role": "user", "content": "look at the log"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": LOG},
    ]
    first = _post(demo, {"model": "demo", "messages": messages, "tools": TOOLS})
    call = first["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "recall_artifact"
    args = json.loads(call["function"]["arguments"])
    assert args["artifact_id"].startswith("art_")
    # the 3,000-line log (~40k tokens) reached the model as a few hundred tokens
    assert first["usage"]["prompt_tokens"] < 2000

    with urllib.request.urlopen(
        f"{demo}/tokenpilot/artifacts/{args['artifact_id']}?session=demo", timeout=10
    ) as r:
        assert json.load(r)["text"] == LOG  # nothing lost: the original, byte for byte
    assert _totals(demo)["recalls"] == 0  # a person looking at an original is no recall
    agent = urllib.request.Request(
        f"{demo}/tokenpilot/artifacts/{args['artifact_id']}?session=demo",
        headers={"X-TokenPilot-Recall": "agent"},  # what the OpenClaw plugin's recall sends
    )
    with urllib.request.urlopen(agent, timeout=10) as r:
        assert json.load(r)["found"] is True
    assert _totals(demo)["recalls"] == 1

    recalled = "00000 INFO worker-0 processed batch 0 in 0 ms status=ok"
    follow = [
        *messages,
        first["choices"][0]["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": recalled},
    ]
    second = _post(demo, {"model": "demo", "messages": follow, "tools": TOOLS})
    assert second["choices"][0]["message"]["content"].startswith("[demo model]")


def test_the_dashboard_is_up_in_demo_mode(demo: str):
    with urllib.request.urlopen(f"{demo}/tokenpilot/dashboard", timeout=10) as r:
        assert r.status == 200 and b"<html" in r.read().lower()


def test_serve_needs_an_upstream_or_demo():
    out = subprocess.run(
        [sys.executable, "-m", "tokenpilot_proxy", "serve", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "--upstream URL, or --demo" in out.stderr
    both = subprocess.run(
        [sys.executable, "-m", "tokenpilot_proxy", "serve", "--demo", "--upstream", "http://x/v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert both.returncode == 2
