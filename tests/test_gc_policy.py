"""The serving process's garbage collector (`tokenpilot_proxy.gc_policy`): set once start-up
is done, in `tokenpilot serve` and in each worker of `--workers`, never by an import."""

from __future__ import annotations

import asyncio
import gc
import re
import signal
import subprocess
import sys
import time

import aiohttp
import pytest
from conftest import REPO

from drills.crashdrill import ServeProcess, free_port
from tokenpilot_proxy import gc_policy
from tokenpilot_proxy.demo import FakeUpstream

ENV = {"PYTHONPATH": str(REPO), "TOKENPILOT_ESTIMATOR_MODEL": ""}
SETTLED = re.compile(r"garbage collector settled: (\d+) start-up objects frozen, young threshold (\d+)")


def test_settle_freezes_start_up_and_raises_the_young_threshold():
    old = gc.get_threshold()
    try:
        gc_policy.settle()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (gc_policy.YOUNG_THRESHOLD, old[1], old[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


def test_importing_the_proxy_leaves_the_collector_as_it_was():
    code = (
        "import gc; before = gc.get_threshold()\n"
        "import tokenpilot_proxy, tokenpilot_proxy.server, tokenpilot_proxy.app\n"
        "assert gc.get_threshold() == before and gc.get_freeze_count() == 0, (gc.get_threshold(), before)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(REPO)}, timeout=60)


@pytest.mark.parametrize("workers", [1, 2])
async def test_each_serving_process_settles_its_collector_once_started(tmp_path, workers):
    upstream = FakeUpstream()
    await upstream.start()
    serve = ServeProcess(upstream.url, free_port(), tmp_path, ENV)
    serve.cmd += ["--log-level", "DEBUG", "--workers", str(workers)]
    try:
        async with aiohttp.ClientSession() as http:
            await serve.start(http)
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            async with http.post(f"{serve.url}/v1/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
        deadline = time.monotonic() + 30
        while len(SETTLED.findall(serve.log.read_text(errors="replace"))) < workers:
            assert time.monotonic() < deadline, serve.log.read_text(errors="replace")[-3000:]
            await asyncio.sleep(0.05)
        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(serve.proc.wait(), 40) == 0
        found = SETTLED.findall(serve.log.read_text(errors="replace"))
        assert len(found) == workers  # once per serving process
        for frozen, threshold in found:
            assert int(frozen) > 1_000  # the imports' objects, at least
            assert int(threshold) == gc_policy.YOUNG_THRESHOLD
    finally:
        await serve.kill()
        await upstream.close()
