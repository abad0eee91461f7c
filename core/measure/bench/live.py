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
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ...errors import TokenPilotError
from ...pricing import Prices
from ...tokens import count_tokens, encoding
from ..traces.model import Session
from .methods import Method, TokenPilotMethod, Vanilla
from .replay import jobs

Message = dict[str, Any]
Tokenize = Callable[[str], Sequence[int]]
Render = Callable[[list[Message], list[dict[str, Any]]], str]
Probe = Callable[[], "dict[str, Any] | None"]


class LiveError(TokenPilotError):
    """The endpoint failed (timeout, rate limit past the cap, 5xx, dropped connection)."""


# ---------------------------------------------------------------------------
# requests as the engine sees them
# ---------------------------------------------------------------------------
def plain_messages(messages: Sequence[Message]) -> list[Message]:
    """Messages with only system/user/assistant roles and string content, for engines whose chat
    template knows no tools: tool calls become text, tool results become user messages."""
    out: list[Message] = []
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False) if content is not None else ""
        if role == "assistant" and m.get("tool_calls"):
            calls = "\n".join(
                f"<tool_call>{tc['function']['name']} {tc['function'].get('arguments', '')}</tool_call>"
                for tc in m["tool_calls"]
            )
            content = f"{content}\n{calls}" if content else calls
        if role == "tool":
            out.append({"role": "user", "content": f"[tool result {m.get('tool_call_id', '')}]\n{content}"})
        elif role in ("system", "developer"):
            out.append({"role": "system", "content": content})
        else:
            out.append({"role": role or "user", "content": content})
    return out


def chatml(messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> str:
    """A ChatML rendering (the tool list as JSON first): what most templates send, near enough."""
    parts = [f"<|im_start|>tools\n{json.dumps(list(tools), sort_keys=True)}<|im_end|>\n"] if tools else []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, sort_keys=True)
        extra = json.dumps(m["tool_calls"], sort_keys=True) if m.get("tool_calls") else ""
        parts.append(f"<|im_start|>{m.get('role')}\n{content}{extra}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _our_tokenize(text: str) -> list[int]:
    return encoding().encode(text, disallowed_special=())


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class SlotSimulator:
    """llama.cpp's prompt cache with one slot: reuse = longest common prefix with the previous
    request, less one token when the whole prompt matches (the engine re-evaluates the last
    token to get logits). Token counts are in `tokenize`'s tokens (the engine's, when given)."""

    def __init__(self, tokenize: Tokenize | None = None, render: Render | None = None) -> None:
        self.tokenize = tokenize or _our_tokenize
        self.render = render or chatml
        self.prev: Sequence[int] = ()

    def predict(self, messages: list[Message], tools: list[dict[str, Any]]) -> tuple[int, int]:
        """(prompt tokens, reused tokens) for the next request."""
        toks = list(self.tokenize(self.render(messages, tools)))
        reuse = common_prefix(self.prev, toks)
        if reuse >= len(toks):
            reuse = max(0, len(toks) - 1)
        self.prev = toks
        return len(toks), reuse


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------
@dataclass(slots=True)
class LiveCall:
    session_id: str
    method: str
    index: int
    our_prompt_tokens: int  # by our tokenizer
    prompt_tokens: int | None  # as the engine counted them
    cached_tokens: int | None  # as the engine reported them (None: not reported)
    cache_source: str | None
    ttft_s: float
    total_s: float
    predicted_prompt_tokens: int
    predicted_reused: int
    prefill_ms: float | None = None  # engine-reported prompt evaluation time, where reported
    cost_usd: float | None = None

    @property
    def predicted_scaled(self) -> float:
        """The prediction in the engine's tokens (scaled by the prompt-size ratio if they differ)."""
        if (
            self.prompt_tokens
            and self.predicted_prompt_tokens
            and self.prompt_tokens != self.predicted_prompt_tokens
        ):
            return self.predicted_reused * self.prompt_tokens / self.predicted_prompt_tokens
        return float(self.predicted_reused)


@dataclass(slots=True)
class LiveRun:
    method: str
    calls: list[LiveCall] = field(default_factory=list)
    error: str | None = None

    def totals(self) -> dict[str, Any]:
        c = self.calls
        known = [x.cached_tokens for x in c if x.cached_tokens is not None]
        prompt = sum(x.prompt_tokens or x.our_prompt_tokens for x in c)
        prefill = [x.prefill_ms for x in c if x.prefill_ms is not None]
        costs = [x.cost_usd for x in c if x.cost_usd is not None]
        return {
            "method": self.method,
            "calls": len(c),
            "ttft_s": round(sum(x.ttft_s for x in c), 4),
            "prefill_s": round(sum(prefill) / 1000, 4) if len(prefill) == len(c) and c else None,
            "prompt_tokens": prompt,
            "cached_tokens": sum(known) if known else None,
            "reuse_rate": round(sum(known) / prompt, 4) if known and prompt else None,
            "predicted_reused": sum(x.predicted_reused for x in c),
            "cost_usd": round(sum(costs), 6) if costs else None,
            "error": self.error,
        }


@dataclass(slots=True)
class LiveReport:
    endpoint: str
    model: str
    runs: list[LiveRun] = field(default_factory=list)
    error: str | None = None

    def run(self, method: str) -> LiveRun:
        return next(r for r in self.runs if r.method == method)

    def record(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "error": self.error,
            "totals": [r.totals() for r in self.runs],
            "calls": [asdict(c) for r in self.runs for c in r.calls],
        }


def agreement(calls: Sequence[LiveCall], tol: float = 0.10) -> float:
    """Share of calls whose predicted reuse is within `tol` of the measured (± 2 tokens)."""
    measured = [c for c in calls if c.cached_tokens is not None]
    if not measured:
        return 0.0
    ok = sum(
        abs(c.predicted_scaled - c.cached_tokens) <= max(2.0, tol * max(c.cached_tokens, c.predicted_scaled))
        for c in measured
    )
    return ok / len(measured)


# ---------------------------------------------------------------------------
# the client
# ---------------------------------------------------------------------------
def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    val = getattr(obj, key, None)
    if val is None:
        extra = getattr(obj, "model_extra", None) or {}
        val = extra.get(key)
    return val


def cache_fields(usage: Any, timings: Any) -> tuple[int | None, int | None, str | None, float | None]:
    """(prompt tokens, cached tokens, source, prefill ms) from whatever the endpoint reported."""
    prompt = _get(usage, "prompt_tokens")
    cached, source = None, None
    details = _get(usage, "prompt_tokens_details")
    if _get(usage, "prompt_cache_hit_tokens") is not None:
        cached, source = _get(usage, "prompt_cache_hit_tokens"), "usage.prompt_cache_hit_tokens"
    elif _get(details, "cached_tokens") is not None:
        cached, source = _get(details, "cached_tokens"), "usage.prompt_tokens_details.cached_tokens"
    prefill = None
    if timings is not None:
        cache_n, prompt_n = _get(timings, "cache_n"), _get(timings, "prompt_n")
        if cache_n is not None and cached is None:
            cached, source = int(cache_n), "timings.cache_n"
        if prompt is None and prompt_n is not None:
            prompt = int(prompt_n) + int(cache_n or 0)
        if _get(timings, "prompt_ms") is not None:
            prefill = float(_get(timings, "prompt_ms"))
    return (
        int(prompt) if prompt is not None else None,
        int(cached) if cached is not None else None,
        source,
        prefill,
    )


@dataclass
class LiveClient:
    """One OpenAI-compatible endpoint. `probe` (optional) is asked after each call for what the
    engine measured (`prompt_tokens`, `cached_tokens`, `prefill_ms`) when the response lacks it."""

    base_url: str
    model: str = "default"
    api_key: str | None = None
    timeout_s: float = 60.0
    max_429_retries: int = 3
    retry_after_cap_s: float = 10.0
    probe: Probe | None = None
    plain: bool = False  # send only system/user/assistant text messages, no tools
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        import openai

        key = (
            self.api_key
            or os.environ.get("TOKENPILOT_LIVE_API_KEY")
            or os.environ.get("OPENAI_API_KEY")
            or "none"
        )
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=key, max_retries=0, timeout=self.timeout_s
        )

    def request(self, messages: list[Message], tools: list[dict[str, Any]]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": plain_messages(messages) if self.plain else messages,
            "max_tokens": 1,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools and not self.plain:
            kwargs["tools"] = tools
        return kwargs

    def call(self, messages: list[Message], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """Send one request; returns ttft_s, total_s, prompt_tokens, cached_tokens, cache_source, prefill_ms."""
        openai = self._openai
        kwargs = self.request(messages, tools)
        for attempt in range(self.max_429_retries + 1):
            t0 = time.perf_counter()
            try:
                return self._stream(kwargs, t0)
            except openai.RateLimitError as exc:
                wait = _retry_after(exc)
                if attempt >= self.max_429_retries:
                    raise LiveError(
                        f"{self.base_url}: rate limited (429) {attempt + 1} times; gave up"
                    ) from exc
                self.sleep(min(self.retry_after_cap_s, wait if wait is not None else 1.0))
            except openai.APITimeoutError as exc:
                raise LiveError(f"{self.base_url}: no response within {self.timeout_s:g}s (timeout)") from exc
            except openai.APIStatusError as exc:
                raise LiveError(
                    f"{self.base_url}: HTTP {exc.status_code} from the endpoint: {_short(exc)}"
                ) from exc
            except openai.APIConnectionError as exc:
                raise LiveError(f"{self.base_url}: connection failed or dropped: {_short(exc)}") from exc
            except LiveError:
                raise
            except Exception as exc:  # a stream cut mid-way surfaces as httpx / decoding errors
                raise LiveError(f"{self.base_url}: connection dropped mid-response: {_short(exc)}") from exc
        raise AssertionError("unreachable")

    def _stream(self, kwargs: dict[str, Any], t0: float) -> dict[str, Any]:
        stream = self._client.chat.completions.create(**kwargs)
        ttft = None
        usage = timings = None
        try:
            for chunk in stream:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
                t = _get(chunk, "timings")
                if t is not None:
                    timings = t
        finally:
            stream.close()
        total = time.perf_counter() - t0
        if ttft is None:
            raise LiveError(f"{self.base_url}: the stream ended without a chunk")
        prompt, cached, source, prefill = cache_fields(usage, timings)
        if self.probe is not None:
            seen = self.probe() or {}
            if cached is None and seen.get("cached_tokens") is not None:
                cached, source = int(seen["cached_tokens"]), seen.get("source", "engine log")
            if prompt is None and seen.get("prompt_tokens") is not None:
                prompt = int(seen["prompt_tokens"])
            if prefill is None and seen.get("prefill_ms") is not None:
                prefill = float(seen["prefill_ms"])
        return {
            "ttft_s": ttft,
            "total_s": total,
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "cache_source": source,
            "prefill_ms": prefill,
        }


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


def _retry_after(exc: Any) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, ValueError):
        return None


# ---------------------------------------------------------------------------
# the replay
# ---------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
def summary_table(report: LiveReport) -> str:
    """Markdown: per-method totals, speed-up over vanilla, then predicted vs measured reuse per call."""
    lines = [
        "| method | calls | TTFT s (~prefill) | engine prefill s | prompt tok | measured reused | predicted reused | reuse "
        "| calls within 10% | cost $ |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = None
    for r in report.runs:
        t = r.totals()
        if r.method == "vanilla":
            base = t
        lines.append(
            f"| {r.method} | {t['calls']} | {t['ttft_s']:.3f} | {fmt_count(t['prefill_s'])} | {t['prompt_tokens']} "
            f"| {fmt_count(t['cached_tokens'])} | {t['predicted_reused']} | {fmt_count(t['reuse_rate'])} "
            f"| {100 * agreement(r.calls):.0f}% | {fmt_count(t['cost_usd'])} |"
        )
    if base:
        for r in report.runs:
            t = r.totals()
            if r.method != "vanilla" and t["ttft_s"]:
                speed = base["ttft_s"] / t["ttft_s"] if t["ttft_s"] else math.nan
                lines.append(f"\nTTFT speed-up of {r.method} over vanilla: {speed:.2f}x")
                if base["prefill_s"] and t["prefill_s"]:
                    lines.append(f"prefill speed-up: {base['prefill_s'] / t['prefill_s']:.2f}x")
    lines += [
        "",
        "| method | call | prompt tok | measured reused | predicted reused | TTFT ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in report.runs:
        for c in r.calls:
            lines.append(
                f"| {c.method} | {c.index} | {fmt_count(c.prompt_tokens)} | {fmt_count(c.cached_tokens)} "
                f"| {c.predicted_scaled:.0f} | {1000 * c.ttft_s:.1f} |"
            )
    if report.error:
        lines += ["", f"**stopped early:** {report.error}"]
    return "\n".join(lines)


def fmt_count(v: Any) -> str:
    """A count, or "-" when the engine did not report it."""
    return "-" if v is None else str(v)
