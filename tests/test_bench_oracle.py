"""The hindsight oracle: an exact search over eviction points, checked by brute force,
priced by the bench's simulator like any method, and never hiding a need."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.measure.bench.methods import TokenPilotMethod, Vanilla, oracle_methods
from tokenpilot.measure.bench.oracle import (
    NONE,
    CostModel,
    HindsightOracle,
    best_schedule,
    build_chain,
    units_of,
)
from tokenpilot.measure.bench.replay import ordered_jobs, replay
from tokenpilot.measure.bench.retention import NeedIndex
from tokenpilot.measure.cachesim import get_profile
from tokenpilot.measure.traces.model import RecordedCall, Session, Usage
from tokenpilot.messages.pairing import validate_pairing
from tokenpilot.pricing import Prices, cost

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron".split()


def _session(sizes: list[int], uses: list[list[int]], gaps: list[float], sid: str = "s") -> Session:
    """A session of one tool call per turn: turn k prints `sizes[k]` lines naming
    `file_k_<n>.py`; the reply after turn k names the files of the turns in `uses[k]`."""
    msgs: list[dict] = [
        {"role": "system", "content": "You are a coding agent. " * 40},
        {"role": "user", "content": "Fix the failing tests in the repository, please."},
    ]
    calls = []
    t = 1_000.0
    for k, size in enumerate(sizes):
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{k}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": f'{{"k":{k}}}'},
                    }
                ],
            }
        )
        body = "\n".join(f"file_{k}_{n}.py {WORDS[n % len(WORDS)]} line {n}" for n in range(size))
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": body})
    # call k answers turn k's result: its output is the next turn's assistant message
    # (message 2 + 2(k+1)); the last call's is a final answer
    for k, used in enumerate(uses):
        idx = 2 + 2 * (k + 1)
        names = " ".join(f"file_{u}_0.py" for u in used if u <= k)
        if idx < len(msgs):
            msgs[idx]["content"] = f"Looking at {names}" if names else "Next."
        else:
            msgs.append({"role": "assistant", "content": f"Done with {names}" if names else "Done."})
        t += gaps[k % len(gaps)]
        calls.append(RecordedCall(0, idx, Usage(0, 0, None, 20), t, "m"))
    return Session(sid, "test", "openai_chat", msgs, [], calls)


def _chain(session: Session, reductions: bool = False):
    jobs = [j for j in ordered_jobs([session], "continuous")]
    base = TokenPilotMethod(batch_turns=None) if reductions else Vanilla()
    ms = base.session(session.id)
    renders = [ms.render(j.prompt, session.tools, j.call.timestamp) for j in jobs]
    return build_chain(session, jobs, renders, NeedIndex(session.messages))


sessions_st = st.integers(min_value=2, max_value=8).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(min_value=5, max_value=400), min_size=n, max_size=n),
        st.lists(st.lists(st.integers(min_value=0, max_value=n - 1), max_size=3), min_size=n, max_size=n),
        st.lists(st.sampled_from([1.0, 30.0, 700.0]), min_size=1, max_size=3),
    )
)


@settings(max_examples=40, deadline=None)
@given(
    sessions_st, st.sampled_from(["openai", "anthropic"]), st.sampled_from([1, 2, 3]), st.sampled_from([0, 2])
)
def test_the_dp_finds_the_cheapest_schedule_of_all(spec, profile, every, lag):
    """Brute force over every set of eviction points (those the cadence allows) gives
    the DP's minimum, exactly."""
    sizes, uses, gaps = spec
    chain = _chain(_session(sizes, uses, gaps))
    chain.lag = lag
    model = CostModel(chain, get_profile(profile), Prices())
    points, total = best_schedule(model, every)
    allowed = [c for c in range(len(chain.calls)) if c % every == 0]
    assert set(points) <= set(allowed)
    brute = min(
        model.schedule_cost(list(pts))
        for r in range(len(allowed) + 1)
        for pts in itertools.combinations(allowed, r)
    )
    assert total == pytest.approx(brute, rel=1e-12, abs=1e-15)
    assert model.schedule_cost(points) == pytest.approx(total, rel=1e-12, abs=1e-15)
    assert total <= model.schedule_cost([]) + 1e-15  # never dearer than evicting nothing


@settings(max_examples=60, deadline=None)
@given(sessions_st)
def test_the_closed_form_is_the_simulators_price(spec):
    """The DP's cost of its schedule is what the bench's simulator charges for it
    (openai profile: hits up to the first changed message, 1,024 minimum, 128 steps)."""
    sizes, uses, gaps = spec
    session = _session(sizes, uses, gaps)
    chain = _chain(session)
    prof, prices = get_profile("openai"), Prices()
    model = CostModel(chain, prof, prices)
    points, total = best_schedule(model)
    run = replay([session], HindsightOracle(Vanilla()))
    simulated = sum(cost(c.hit_tokens, c.miss_tokens, c.write_tokens, 0, prices, "openai") for c in run.calls)
    # The simulator also reads the first tokens of a message a stub replaced (their JSON
    # keys agree), which can carry a hit over one more 128-token step or over the
    # 1,024-token minimum: at most that much per eviction point, and no more.
    slack = len(points) * prof.min_tokens * (prices.miss - prices.hit) / 1e6
    assert abs(simulated - total) <= slack + 1e-12


def test_evicting_pays_only_when_batched_or_worth_it():
    """Big dead outputs early and a long tail: the oracle evicts them, and the schedule
    it picks is cheaper than evicting at every call and than never evicting."""
    sizes = [400, 400, 20, 20, 20, 20, 20, 20]
    uses = [[0], [1], [2], [3], [4], [5], [6], [7]]
    chain = _chain(_session(sizes, uses, [1.0]))
    model = CostModel(chain, get_profile("openai"), Prices())
    points, total = best_schedule(model)
    assert points, "dead 400-line outputs re-sent on every later call must be evicted"
    assert total < model.schedule_cost([])
    assert total <= model.schedule_cost(list(range(len(chain.calls))))


def test_every_turn_is_seen_once_and_stays_while_needed():
    """A turn leaves no earlier than the call it arrives for (the agent reads each
    result once) and not before the last call that needs it through one holder."""
    sizes = [50, 50, 50, 50, 50]
    uses = [[0], [0], [], [0, 2], []]
    session = _session(sizes, uses, [1.0])
    chain = _chain(session)
    for u in range(len(chain.units)):
        seen = [c for c in range(len(chain.calls)) if chain.position(c, u) is not None]
        if seen:  # the final answer is in no prompt
            assert chain.death[u] >= seen[0]
            assert u not in chain.dead_at(chain.death[u])  # not at its last need
    chain.lag = 2
    for u in range(len(chain.units)):
        for e in range(len(chain.calls)):
            if u in chain.dead_at(e):
                assert e > chain.death[u] + 2  # a lag holds it two calls more
    turn0 = next(u for u, unit in enumerate(chain.units) if unit.start == 2)
    assert chain.death[turn0] >= 3  # the reply of call 3 names file_0_0.py


def test_units_are_turns_with_their_answers():
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "tool", "tool_call_id": "a", "content": "x"},
        {"role": "tool", "tool_call_id": "b", "content": "y"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "thanks"},
    ]
    assert [(u.start, u.end) for u in units_of(msgs)] == [(1, 4), (4, 5)]


def test_the_planned_renders_keep_every_need_and_every_pair():
    sizes = [300, 10, 300, 10, 300, 10]
    uses = [[0], [], [2], [0], [], [4]]
    session = _session(sizes, uses, [1.0, 30.0])
    run = replay([session], HindsightOracle(Vanilla())).record()
    assert run["retention"] == 1.0 and run["recalls_charged"] == 0
    planned = HindsightOracle(Vanilla()).hindsight([session], "continuous", "openai", Prices())
    ms = planned.session(session.id)
    for job in ordered_jobs([session], "continuous"):
        r = ms.render(job.prompt, session.tools, job.call.timestamp)
        assert not validate_pairing(r.messages), r.messages
    assert NONE not in planned.schedules[session.id]


def test_the_oracle_is_told_the_recording_before_it_renders():
    with pytest.raises(TypeError, match="hindsight"):
        HindsightOracle(Vanilla()).session("x")


@pytest.mark.skipif(
    not (SHARED / "claude_code_mclaude").is_dir(),
    reason="needs ../shared/traces (the shared recordings; CI has them)",
)
def test_on_recorded_claude_code_sessions_the_oracle_keeps_every_need():
    """On real sessions: retention 100% under both rules, with and without TokenPilot's
    reductions (a reduction that hid a later need is shown as sent), no recalls, never
    dearer than what it evicts from."""
    from tokenpilot.measure.traces import load

    sessions = load(SHARED / "claude_code_mclaude")
    vanilla = replay(sessions, Vanilla()).record()
    glob = replay(sessions, TokenPilotMethod(batch_turns=None)).record()
    raw = replay(sessions, HindsightOracle(Vanilla(), "oracle_raw")).record()
    full = replay(sessions, oracle_methods()[0]).record()
    assert glob["retention_all"] < 1.0  # the reductions alone hide some of the agent's words
    for run in (raw, full):
        assert run["retention"] == run["retention_all"] == 1.0 and run["recalls_charged"] == 0
    assert raw["cost_usd"] < vanilla["cost_usd"]
    assert full["cost_usd"] < glob["cost_usd"]


def _written_then_reused() -> Session:
    """The agent writes a script through a heredoc (a name of its own, `check_totals`),
    runs unrelated commands, then edits the script naming that function again."""
    msgs: list[dict] = [
        {"role": "system", "content": "You are a coding agent. " * 40},
        {"role": "user", "content": "Reproduce the bug, please."},
    ]
    script = "cat > repro.py << 'EOF'\ndef check_totals():\n    pass\nEOF"
    steps = [script] + [f"ls dir_{k}" for k in range(5)]
    for k, cmd in enumerate(steps):
        args = '{"command": "' + cmd + '"}'
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": args}}
                ],
            }
        )
        body = "\n".join(f"entry_{k}_{n} " + "x" * 60 for n in range(60))
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": body})
    msgs.append({"role": "assistant", "content": "Now fix check_totals in repro.py."})
    calls = [RecordedCall(0, 2 + 2 * k, Usage(0, 0, None, 20), 1000.0 + k, "m") for k in range(1, 7)]
    return Session("w", "test", "openai_chat", msgs, [], calls)


def test_the_oracle_keeps_what_the_agent_wrote_while_it_is_used():
    """The agent's own heredoc is a need under the rule that counts every source: the
    oracle keeps that turn until the last call that uses it (the old rule dropped it)."""
    session = _written_then_reused()
    run = replay([session], HindsightOracle(Vanilla())).record()
    assert run["retention"] == run["retention_all"] == 1.0
    chain = _chain(session)
    written = next(u for u, unit in enumerate(chain.units) if unit.start == 2)
    assert chain.death[written] == len(chain.calls) - 1


def test_a_reduction_that_hides_a_later_need_is_shown_as_sent():
    """A shell output past its truncation limit keeps head and tail; a later answer names
    a line from its middle. The oracle shows that output whole from its arrival on (one
    form, so the prefix holds), and every other output as TokenPilot reduces it."""
    ids = [hashlib.sha256(str(n).encode()).hexdigest()[:12] for n in range(1200)]
    big = "\n".join(f"row {n} id {ids[n]}" for n in range(1200))
    msgs: list[dict] = [
        {"role": "system", "content": "You are a coding agent. " * 40},
        {"role": "user", "content": "Find the odd row."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "dump"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": big},
        {"role": "assistant", "content": "Still looking."},
        {"role": "user", "content": "Well?"},
        {"role": "assistant", "content": f"It is {ids[600]}."},
    ]
    calls = [
        RecordedCall(0, 4, Usage(0, 0, None, 5), 1000.0, "m"),
        RecordedCall(0, 6, Usage(0, 0, None, 5), 1001.0, "m"),
    ]
    session = Session("r", "test", "openai_chat", msgs, [], calls)
    glob = replay([session], TokenPilotMethod(batch_turns=None)).record()
    assert glob["retention"] < 1.0  # the truncation cut the middle
    run = replay([session], oracle_methods()[0]).record()
    assert run["retention"] == run["retention_all"] == 1.0 and run["prefix_breaks"] == 0
