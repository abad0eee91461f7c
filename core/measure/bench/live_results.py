"""What a live replay measured: per call, per method, per run, and its Markdown summary.

`LiveCall` holds one call's engine-reported and predicted figures, `LiveRun` a method's
calls and totals, `LiveReport` the whole replay; `agreement` scores predicted reuse
against measured, and `summary_table` writes the report `bench --live` prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


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
