"""`GET /metrics`: the proxy's figures in Prometheus' text format (prometheus-client).

Two kinds of figures, because they merge differently across replicas:

- **Usage counters come from the sessions' saved stats** (`tokenpilot_requests_total`,
  tokens in/out, cache hits, dollars spent and saved, evictions, recalls, prefix
  breaks, outputs the store refused). With a shared store (`--store redis://...`)
  every replica writes each session's stats there (`merge_stats` adds up what each
  counted), and `/metrics` reads them all back: each replica answers the same
  fleet-wide totals, so aggregate them with `max()`, not `sum()`. With the local
  store, the process holds every session it served. A counter drops when the store
  prunes an idle session (Prometheus reads that as a reset).
- **Latencies and store failures are this process's** (histograms of answer and
  prepare time, `tokenpilot_store_failures_total`): the store cannot count its own
  outages. Sum them across replicas (`sum by (le)`).

Labels are bounded: `model` keeps the `MAX_MODELS` models with most calls (the rest are
`other`), `route` is the route's template, never the raw path.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter as Tally
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tokenpilot.model_prices import prices_for, spent_and_saved
from tokenpilot_proxy.sessions import SessionStats

if TYPE_CHECKING:
    from tokenpilot_proxy.proxy_view import ProxyView


MAX_MODELS = 20
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# (metric name, help, SessionStats field) of the per-model usage counters
USAGE: tuple[tuple[str, str, str], ...] = (
    ("tokenpilot_requests", "Model calls through the proxy", "calls"),
    ("tokenpilot_request_errors", "Model calls that ended in an upstream or proxy error", "errors"),
    ("tokenpilot_prompt_tokens", "Prompt (input) tokens the provider reported", "prompt_tokens"),
    ("tokenpilot_cached_tokens", "Prompt tokens the provider served from its cache", "cached_tokens"),
    ("tokenpilot_output_tokens", "Output tokens the provider reported", "output_tokens"),
    ("tokenpilot_tokens_saved", "Prompt tokens TokenPilot kept out of the requests", "tokens_saved"),
    ("tokenpilot_evictions", "Calls whose prefix an eviction re-rendered", "evictions"),
    ("tokenpilot_recalls", "Originals read back with recall_artifact", "recalls"),
    ("tokenpilot_prefix_breaks", "Calls whose cached prefix broke (evictions included)", "prefix_breaks"),
    ("tokenpilot_unstored_outputs", "Calls whose outputs the artifact store refused", "store_errors"),
)


@dataclass(slots=True)
class Timing:
    status: int | str = "exception"


class ProxyMetrics:
    """The proxy's registry: this process's histograms plus a collector over session stats."""

    def __init__(self, proxy: ProxyView) -> None:
        self.proxy = proxy
        self.registry = CollectorRegistry(auto_describe=True)
        self.answer_seconds = Histogram(
            "tokenpilot_http_request_duration_seconds",
            "Time to answer an HTTP request (streams: until the last event), this process",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.prepare_seconds = Histogram(
            "tokenpilot_prepare_duration_seconds",
            "Time TokenPilot took to prepare one request (reduction, rendering), this process",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.store_failures = Counter(
            "tokenpilot_store_failures",
            "Store operations that failed in this process, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.registry.register(_SessionCollector(proxy))

    @contextlib.contextmanager
    def timed(self, request: web.Request) -> Iterator[Timing]:
        timing = Timing()
        start = time.perf_counter()
        try:
            yield timing
        except web.HTTPException as exc:
            timing.status = exc.status
            raise
        finally:
            info = request.match_info.route.resource if request.match_info.route else None
            route = info.canonical if info is not None else "unmatched"
            self.answer_seconds.labels(route, request.method, str(timing.status)).observe(
                time.perf_counter() - start
            )

    @contextlib.contextmanager
    def preparing(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.prepare_seconds.observe(time.perf_counter() - start)

    def store_error(self, kind: str) -> None:
        self.store_failures.labels(kind).inc()

    async def view(self, request: web.Request) -> web.Response:
        """The registry in Prometheus' text format (read off the event loop: it may read Redis)."""
        body = await asyncio.to_thread(generate_latest, self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def session_stats(proxy: ProxyView) -> dict[str, SessionStats]:
    """Every session's stats: this process's, merged with what a shared store holds from
    the other replicas (`SessionKeeper.fleet_stats`, the view `/tokenpilot/stats` reads)."""
    return proxy.keeper.fleet_stats()


class _SessionCollector(Collector):
    """Usage counters summed over every session, by model (see the module docstring)."""

    def __init__(self, proxy: ProxyView) -> None:
        self.proxy = proxy

    def describe(self) -> list[Any]:
        return []  # read at scrape time only: describing would read the store at registration

    def collect(self) -> Iterator[Any]:
        sessions = session_stats(self.proxy)
        calls: Tally[str] = Tally()
        for st in sessions.values():
            calls[st.model or "unknown"] += st.calls
        top = {m for m, _ in calls.most_common(MAX_MODELS)}
        sums: dict[str, dict[str, float]] = {}
        for st in sessions.values():
            model = st.model or "unknown"
            label = model if model in top else "other"
            row = sums.setdefault(label, {})
            for _, _, field in USAGE:
                row[field] = row.get(field, 0) + getattr(st, field)
            spent, saved = spent_and_saved(
                prices_for(st.model, self.proxy.prices),
                st.prompt_tokens,
                st.cached_tokens,
                st.output_tokens,
                st.tokens_saved,
            )
            row["spent"] = row.get("spent", 0.0) + spent
            row["saved"] = row.get("saved", 0.0) + saved
        for name, doc, field in USAGE:
            fam = CounterMetricFamily(name, doc, labels=["model"])
            for label, row in sorted(sums.items()):
                fam.add_metric([label], row[field])
            yield fam
        for name, doc, key in (
            (
                "tokenpilot_dollars_spent",
                "Dollars the reported usage cost at the model's list price",
                "spent",
            ),
            (
                "tokenpilot_dollars_saved",
                "Dollars the tokens TokenPilot kept out would have cost at the model's list price",
                "saved",
            ),
        ):
            fam = CounterMetricFamily(name, doc, labels=["model"])
            for label, row in sorted(sums.items()):
                fam.add_metric([label], round(row[key], 6))
            yield fam
        yield GaugeMetricFamily(
            "tokenpilot_sessions", "Sessions the proxy (or its shared store) holds", len(sessions)
        )
