"""`python -m tokenpilot_proxy.demo --port 18080`: the built-in upstream on its own, answering
every request with a fixed text (what `tokenpilot serve --demo` starts in-process).
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from tokenpilot_proxy.demo.base import Reply
from tokenpilot_proxy.demo.openai_upstream import FakeUpstream


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tokenpilot_proxy.demo",
        description="The built-in scripted OpenAI-compatible upstream.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18080)
    p.add_argument(
        "--chunk-delay", type=float, default=0.0, help="seconds between stream events (simulated generation)"
    )
    p.add_argument("--text", default="ok", help="what the fake model answers")
    args = p.parse_args(argv)

    async def run() -> None:
        upstream = FakeUpstream(responder=lambda _body: Reply(args.text), chunk_delay_s=args.chunk_delay)
        url = await upstream.start(args.host, args.port)
        print(url, flush=True)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await stop.wait()
        await upstream.close()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
