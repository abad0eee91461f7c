"""Where the money goes: a run's cost above the oracle, split by cause, adds up."""

from __future__ import annotations

import pytest

from tokenpilot.measure.bench.methods import TokenPilotMethod, Vanilla, oracle_methods
from tokenpilot.measure.bench.money import money_split
from tokenpilot.measure.bench.replay import CallResult, RunResult, replay
from tokenpilot.measure.workload import generate
from tokenpilot.pricing import Prices, cost


def _call(sid: str, prompt: int, hit: int, recall: float = 0.0) -> CallResult:
    usd = cost(hit, prompt - hit, 0, 10, Prices(), "openai") + recall
    return CallResult(
        sid, 0, prompt, hit, prompt - hit, 0, 10, usd, None, 0, 0, 0, False, recall > 0, 0, recall
    )


def _run(calls: list[CallResult]) -> RunResult:
    return RunResult("t", "m", "continuous", "openai", calls=calls)


def test_a_run_against_itself_owes_nothing():
    run = _run([_call("s", 2000, 0), _call("s", 2500, 1920)])
    split = money_split(run, run)
    assert (split.above, split.too_late, split.cache_writes, split.recalls, split.rest) == (0, 0, 0, 0, 0)


def test_each_cause_is_priced_where_it_arose():
    oracle = _run([_call("s", 2000, 0), _call("s", 1500, 1024)])  # evicted early and cheaply
    late = _run([_call("s", 2000, 0), _call("s", 2500, 1920)])  # kept everything
    broke = _run([_call("s", 2000, 0), _call("s", 1500, 0, recall=0.002)])  # re-prefilled, recalled
    s = money_split(late, oracle)
    assert s.too_late == pytest.approx(1000 * Prices().hit / 1e6)
    assert s.recalls == 0
    b = money_split(broke, oracle)
    assert b.too_late == 0 and b.recalls == pytest.approx(0.002)
    assert b.cache_writes == pytest.approx(1024 * (Prices().miss - Prices().hit) / 1e6)
    for x in (s, b):
        assert x.above == pytest.approx(x.too_late + x.cache_writes + x.recalls + x.rest)


def test_the_split_of_a_replay_adds_up():
    sessions = generate(seed=1, sessions=1)
    tp = replay(sessions, TokenPilotMethod())
    oracle = replay(sessions, oracle_methods()[0])
    split = money_split(tp, oracle)
    total = sum(c.cost_usd for c in tp.calls) - sum(c.cost_usd for c in oracle.calls)
    assert split.above == pytest.approx(total)
    assert split.above == pytest.approx(split.too_late + split.cache_writes + split.recalls + split.rest)
    with pytest.raises(ValueError):
        money_split(tp, replay(sessions[:0], Vanilla()))
