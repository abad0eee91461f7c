"""Codex 0.171's request shape through the proxy: what turn 2 sends and what of it is cached.

Turn 1 is Codex's opening request (tools in an `additional_tools` item, no top-level
`tools`); turn 2 adds a command's output as a multi-part `function_call_output`. The
fake upstream caches like OpenAI (the longest common prefix with the previous prompt of
the same `prompt_cache_key`, in 128-token steps). Prints each turn's body size, prompt and
cached tokens, and where `recall_artifact` went.

    .venv/bin/python benchmarks/bench_codex_turns.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_codex import CALL, OUTPUT, body, user  # noqa: E402 - the tests' Codex-shaped bodies

from tokenpilot_proxy import ProxySettings  # noqa: E402
from tokenpilot_proxy.demo import FakeUpstream, Reply  # noqa: E402
from tokenpilot_proxy.server import RunningProxy  # noqa: E402


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeUpstream(responder=lambda b: Reply("done")) as fake:
            settings = ProxySettings(upstream=fake.url, port=0, store_dir=Path(tmp) / "store", state_dir=None)
            rp = await RunningProxy(settings, shutdown_timeout_s=1).start()
            try:
                async with aiohttp.ClientSession() as s:
                    for payload in (body(user("build it")), body(user("build it"), CALL, OUTPUT)):
                        async with s.post(rp.url + "/v1/responses", json=payload) as r:
                            assert r.status == 200, await r.text()
            finally:
                await rp.stop()
            print(
                f"{'turn':>4} {'client body B':>14} {'sent body B':>12} {'prompt tok':>10} {'cached tok':>10}  tools"
            )
            for n, rec in enumerate(fake.responses_requests(), 1):
                client = len(
                    json.dumps(body(user("build it")) if n == 1 else body(user("build it"), CALL, OUTPUT))
                )
                item = [t.get("name") for t in rec.body["input"][0].get("tools", [])]
                where = (
                    f"top-level {[t.get('name') for t in rec.body['tools']]}" if "tools" in rec.body else ""
                )
                print(
                    f"{n:>4} {client:>14,} {len(rec.raw):>12,} {rec.prompt_tokens:>10,} {rec.cached_tokens:>10,}"
                    f"  item {item} {where}"
                )


if __name__ == "__main__":
    asyncio.run(main())
