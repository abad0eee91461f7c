"""`tokenpilot bench`: replay sessions through context-management methods and price them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ...pricing import Prices
from ..traces.model import Session
from .methods import Method, default_methods
from .replay import MODES, RunResult, render_digests, replay
from .report import markdown, print_table, table, write_json, write_plots

__all__ = [
    "MODES",
    "Method",
    "RunResult",
    "default_methods",
    "markdown",
    "print_table",
    "replay",
    "run_bench",
    "table",
    "write_json",
    "write_plots",
]


def run_bench(
    trace_sets: Mapping[str, Sequence[Session]],
    *,
    methods: Callable[[], Sequence[Method]] = default_methods,
    modes: Sequence[str] = ("continuous",),
    profiles: Sequence[str] = ("openai",),
    prices: Prices | None = None,
    on_call: Callable[[], None] | None = None,
    determinism: bool = False,
) -> list[RunResult]:
    """Every method × mode × profile × trace set. `methods` builds fresh methods per run,
    so no state (artifact stores, sessions) leaks between runs. `determinism`: render
    everything a second time with fresh methods and say, per run, whether the bytes
    were the same (what a provider's cache needs of a method)."""
    results = []
    for name, sessions in trace_sets.items():
        for profile in profiles:
            for mode in modes:
                for k, method in enumerate(methods()):
                    result = replay(
                        sessions,
                        method,
                        mode=mode,
                        profile=profile,
                        prices=prices,
                        trace_set=name,
                        on_call=on_call,
                    )
                    notes = getattr(method, "notes", None)
                    if notes is not None:  # a peer says which of its transforms ran
                        result.notes = list(notes())
                    if determinism:
                        again = render_digests(
                            sessions,
                            methods()[k],
                            mode=mode,
                            profile=profile,
                            on_call=on_call,
                            recalls=result.recalls,
                        )
                        result.deterministic = again == result.digests
                    results.append(result)
    return results


def count_calls(trace_sets: Mapping[str, Sequence[Session]]) -> int:
    return sum(len(s.calls) for sessions in trace_sets.values() for s in sessions)
