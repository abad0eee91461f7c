"""`tokenpilot bench --live URL | --local`: the CLI branch that wires a client, or a local
engine, to the live replay. Apart from `live.py` so the engine (`local_engine.py`), which
builds on the replay's client, is not imported back by the replay it serves."""

from __future__ import annotations

import json
from typing import Any

from ...pricing import Prices
from ..workload.live import generate_live
from .live import live_replay
from .live_client import LiveClient, LiveError
from .live_results import fmt_count, summary_table
from .live_slot import SlotSimulator
from .local_engine import LocalEngine


def cmd_live(args: Any, console: Any) -> int:
    """`tokenpilot bench --live URL | --local`: the CLI branch."""
    sessions = generate_live(seed=args.seed, sessions=args.live_sessions)
    prices = Prices(hit=args.price_hit, miss=args.price_miss, output=args.price_output)
    engine = None
    try:
        if args.local:
            engine = LocalEngine()
            engine.start()
            client = engine.client()
            prices_used = None
        else:
            client = LiveClient(args.live, model=args.live_model or "default")
            prices_used = prices
        try:
            report = live_replay(
                sessions,
                client,
                prices=prices_used,
                max_usd=args.max_usd,
                simulator=engine.simulator if engine is not None else SlotSimulator,
                on_call=lambda c: console.print(
                    f"{c.method} #{c.index}: ttft {1000 * c.ttft_s:.0f} ms, cached {fmt_count(c.cached_tokens)}"
                ),
            )
        except LiveError as exc:
            console.print(f"[red]{exc}[/red]")
            return 2
    finally:
        if engine is not None:
            engine.stop()
    console.print(summary_table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.record(), f, indent=1)
        console.print(f"wrote {args.json}")
    return 1 if report.error else 0
