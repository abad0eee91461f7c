"""`tokenpilot bench --per-session`: each session's cost against vanilla and its retention."""

from __future__ import annotations

from rich.console import Console

from tokenpilot.measure.bench.per_session import print_sessions, session_rows
from tokenpilot.measure.bench.replay import CallResult, RunResult


def _call(sid: str, cost: float, needs: int = 0, visible: int = 0) -> CallResult:
    return CallResult(sid, 0, 10, 5, 5, 0, 1, cost, None, needs, visible, needs, False)


def _runs() -> list[RunResult]:
    vanilla = RunResult("set", "vanilla", "continuous", "openai", kind="vanilla")
    vanilla.calls = [_call("a", 1.0, 2, 2), _call("a", 1.0), _call("b", 4.0, 4, 4)]
    ours = RunResult("set", "tokenpilot", "continuous", "openai", kind="tokenpilot")
    ours.calls = [_call("a", 0.5, 2, 1), _call("a", 0.5), _call("b", 5.0, 4, 4)]
    return [vanilla, ours]


def test_rows_compare_each_session_with_vanilla_on_the_same_session():
    rows = {(r.method, r.session_id): r for r in session_rows(_runs())}
    assert rows[("tokenpilot", "a")].vs_vanilla == 0.5 and rows[("tokenpilot", "a")].retention == 0.5
    assert rows[("tokenpilot", "b")].vs_vanilla == 1.25  # above vanilla on this session alone
    assert rows[("vanilla", "b")].vs_vanilla == 1.0 and rows[("tokenpilot", "a")].calls == 2


def test_the_table_names_every_session():
    console = Console(record=True, width=200)
    print_sessions(_runs(), console)
    text = console.export_text()
    assert "per session · set" in text and "1.250×" in text and " 50.0%" in text
