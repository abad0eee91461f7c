"""Per-thread accounting: what TokenPilot rendered and what the provider's cache served.

`PrepareStats` says what the core did on each call; the model's `usage_metadata`
(`input_token_details.cache_read`) says what the prefix cache actually served. Keeping
both side by side per thread shows whether stability pays off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage

from tokenpilot import PrepareStats


@dataclass(slots=True)
class CallStats:
    """One model call: the core's `PrepareStats` and, when reported, the provider's usage."""

    prepare: PrepareStats
    tail_start: int = -1  # messages[:tail_start] of the request were its stable part
    input_tokens: int | None = None
    cache_read_tokens: int | None = None
    output_tokens: int | None = None
    message_id: str | None = None

    def note_usage(self, message: Any) -> bool:
        """Read `usage_metadata` from the model's reply; False when it has none."""
        usage = getattr(message, "usage_metadata", None) if isinstance(message, AIMessage) else None
        if not usage:
            return False
        details = usage.get("input_token_details") or {}
        self.input_tokens = int(usage.get("input_tokens") or 0)
        self.cache_read_tokens = int(details.get("cache_read") or 0)
        self.output_tokens = int(usage.get("output_tokens") or 0)
        self.message_id = getattr(message, "id", None)
        return True


@dataclass(slots=True)
class ThreadStats:
    """All model calls of one thread (session), oldest first."""

    thread_id: str
    calls: list[CallStats] = field(default_factory=list)

    @property
    def last(self) -> CallStats | None:
        return self.calls[-1] if self.calls else None

    @property
    def prefix_breaks(self) -> int:
        """Calls whose stable prefix was not an extension of the previous call's."""
        return sum(1 for c in self.calls if c.prepare.prefix_break)

    @property
    def eviction_breaks(self) -> int:
        """Prefix breaks caused by an eviction (the deliberate ones)."""
        return sum(1 for c in self.calls if c.prepare.prefix_break == "eviction")

    @property
    def input_tokens(self) -> int:
        return sum(c.input_tokens or 0 for c in self.calls)

    @property
    def cache_read_tokens(self) -> int:
        return sum(c.cache_read_tokens or 0 for c in self.calls)

    @property
    def cache_hit_rate(self) -> float:
        """Provider-reported cache reads over provider-reported input tokens (0 when unknown)."""
        total = self.input_tokens
        return self.cache_read_tokens / total if total else 0.0

    @property
    def saved_tokens(self) -> int:
        """Prompt tokens TokenPilot kept out of the model's view, summed over calls."""
        return sum(c.prepare.saved_tokens for c in self.calls)

    def __str__(self) -> str:
        """The summary as a person reads it (`print(thread_stats(...))`); `summary()` is the dict."""
        s = self.summary()
        hit = f"{s['cache_hit_rate']:.1%} of {s['input_tokens']:,} input tokens read from the cache"
        return (
            f"thread {s['thread_id']}: {s['model_calls']} model call(s); "
            f"last prompt {s['last_prompt_tokens']:,} tokens (the agent's own: {s['last_raw_tokens']:,}); "
            f"{s['saved_tokens']:,} tokens kept out of view in all; "
            f"{s['prefix_breaks']} prefix break(s) ({s['eviction_breaks']} by eviction); "
            + (hit if s["input_tokens"] else "no usage reported by the model")
        )

    def summary(self) -> dict[str, Any]:
        """The same figures as a dict (for JSON and scripts)."""
        last = self.last
        return {
            "thread_id": self.thread_id,
            "model_calls": len(self.calls),
            "last_prompt_tokens": last.prepare.tokens if last else 0,
            "last_raw_tokens": last.prepare.raw_tokens if last else 0,
            "saved_tokens": self.saved_tokens,
            "prefix_breaks": self.prefix_breaks,
            "eviction_breaks": self.eviction_breaks,
            "input_tokens": self.input_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_hit_rate": round(self.cache_hit_rate, 4),
        }
