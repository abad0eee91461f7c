"""The live replay's client: one OpenAI-compatible endpoint, streamed, with its cache fields.

`LiveClient` sends one request (a single output token), times the first token, and
reads the cached tokens under whichever field the engine uses (`cache_fields`); a
failing endpoint raises `LiveError` with a clear reason. Apart from the replay, which
only drives it, and from the results it fills.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import TokenPilotError
from .live_slot import Message, plain_messages

Probe = Callable[[], "dict[str, Any] | None"]


class LiveError(TokenPilotError):
    """The endpoint failed (timeout, rate limit past the cap, 5xx, dropped connection)."""


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
