"""Live replay: re-issue recorded calls to a real OpenAI-compatible endpoint (`bench --live`).

Teacher-forced like the simulated bench: each method renders the prompt of every
recorded call, the request asks for a single output token, and we measure what the
engine did with the prompt: time to first token (streamed), the prompt tokens it
counted and the cached tokens it reports, under whichever field it uses:

* OpenAI: `usage.prompt_tokens_details.cached_tokens`
* DeepSeek: `usage.prompt_cache_hit_tokens`
* llama.cpp's own server (`llama-server`): `timings.cache_n` / `timings.prompt_n`
* llama-cpp-python's server reports none of these; `LocalEngine` reads the prompt
  tokens it evaluated from its log instead (`probe`).

`slot_reuse` is the simulator for a llama.cpp slot: the engine keeps the last prompt
of the slot, so the reused tokens are the longest common prefix with the previous
request (one slot, so the previous request of any session). A failing endpoint stops
the run with a clear `error`; the calls measured so far are kept.

Requests and the slot simulator are in `live_slot.py`, the client in `live_client.py`,
the results and their summary in `live_results.py`; this module runs the replay and
re-exports their names, so imports from here keep working.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...pricing import Prices
from ...tokens import count_tokens
from ..traces.model import Session
from .live_client import LiveClient, LiveError
from .live_client import Probe as Probe  # re-exported: imports from live keep working
from .live_client import cache_fields as cache_fields
from .live_results import LiveCall, LiveReport, LiveRun
from .live_results import agreement as agreement
from .live_results import fmt_count as fmt_count
from .live_results import summary_table as summary_table
from .live_slot import Message, SlotSimulator, chatml, plain_messages
from .live_slot import Render as Render
from .live_slot import Tokenize as Tokenize
from .live_slot import common_prefix as common_prefix
from .methods import Method, TokenPilotMethod, Vanilla
from .replay import jobs


def _request_tokens(messages: list[Message], tools: list[dict[str, Any]]) -> int:
    return count_tokens(chatml(messages, tools))


def estimate_usd(
    sessions: Sequence[Session], methods: Sequence[Method], prices: Prices | None
) -> tuple[int, float]:
    """(prompt tokens by our tokenizer, $ if nothing were cached) of a live run, before it starts."""
    tokens = 0
    for method in methods:
        for s in sessions:
            ms = method.session(s.id)
            try:
                for job in jobs(s, "continuous"):
                    r = ms.render(job.prompt, s.tools, job.call.timestamp)
                    tokens += _request_tokens(r.messages, r.tools) + 1
            finally:
                ms.close()
    usd = tokens * prices.miss / 1e6 if prices else 0.0
    return tokens, usd


def live_replay(
    sessions: Sequence[Session],
    client: LiveClient,
    *,
    methods: Sequence[Method] | None = None,
    prices: Prices | None = None,
    max_usd: float | None = None,
    simulator: Callable[[], SlotSimulator] = SlotSimulator,
    on_call: Callable[[LiveCall], None] | None = None,
) -> LiveReport:
    """Replay `sessions` through each method against `client`, one method after another.

    One simulator spans the whole replay, as the engine's single slot does: the first
    request of a method is compared with the last one of the method before. Errors end
    the replay with `report.error` set; what was measured stays in the report.
    """
    methods = list(methods) if methods is not None else [Vanilla(), TokenPilotMethod()]
    report = LiveReport(client.base_url, client.model)
    sim = simulator()
    if max_usd is not None and prices is not None:
        tokens, usd = estimate_usd(sessions, methods, prices)
        if usd > max_usd:
            raise LiveError(
                f"estimated cost ${usd:.4f} ({tokens:,} prompt tokens at ${prices.miss}/M uncached) "
                f"exceeds --max-usd {max_usd}; nothing was sent"
            )
    for method in methods:
        run = LiveRun(method.name)
        report.runs.append(run)
        index = 0
        for s in sessions:
            ms = method.session(s.id)
            try:
                for job in jobs(s, "continuous"):
                    r = ms.render(job.prompt, s.tools, job.call.timestamp)
                    sent_msgs = plain_messages(r.messages) if client.plain else r.messages
                    sent_tools = [] if client.plain else r.tools
                    pred_prompt, pred_reuse = sim.predict(sent_msgs, sent_tools)
                    try:
                        got = client.call(r.messages, r.tools)
                    except LiveError as exc:
                        run.error = report.error = str(exc)
                        return report
                    cost = None
                    if prices is not None and got["prompt_tokens"] is not None:
                        hit = got["cached_tokens"] or 0
                        cost = (
                            (got["prompt_tokens"] - hit) * prices.miss + hit * prices.hit + prices.output
                        ) / 1e6
                    call = LiveCall(
                        s.id,
                        method.name,
                        index,
                        _request_tokens(r.messages, r.tools),
                        got["prompt_tokens"],
                        got["cached_tokens"],
                        got["cache_source"],
                        got["ttft_s"],
                        got["total_s"],
                        pred_prompt,
                        pred_reuse,
                        got["prefill_ms"],
                        cost,
                    )
                    run.calls.append(call)
                    index += 1
                    if on_call is not None:
                        on_call(call)
            finally:
                ms.close()
    return report
