"""A background estimator result is planned when it is delivered (`Lifecycle.apply_ready`,
issue #49): the batch's plan, which weighs the whole history, is made between calls, beside
the agent, and the next call only renders it. The invariants hold as when the plan was made
at the next call: the stable part only grows except at a counted break, each break is one
pass (the tail rules of the next call join it), every stub recalls, every request pairs."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from replay_checks import SMALL_WINDOW, check_breaks_and_stubs, replay_waiting
from strategies import TOOLS, call_points, session

from tokenpilot import TokenPilot
from tokenpilot.lifecycle import plan as plan_module
from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.lifecycle.schedule import LifecycleConfig

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def _background(windowed: bool = False) -> TokenPilot:
    window = SMALL_WINDOW if windowed else LifecycleConfig().window
    return TokenPilot(
        lifecycle=LifecycleConfig(batch_turns=1, schedule="background", cost_gate=False, window=window)
    )


@SETTINGS
@given(session(recalls=True))
def test_planned_on_delivery_the_invariants_hold(msgs):
    tp = _background(windowed=len(msgs) % 2 == 0)
    preps = replay_waiting(tp, msgs, call_points(msgs))
    check_breaks_and_stubs(tp, preps, msgs)
    for p in preps:
        assert validate_pairing(p.messages) == []


def _long_session(turns: int = 12) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"Step {t}: list the directory d{t}"})
        cid = f"call_{t}"
        msgs.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "ls", "arguments": f'{{"path": "d{t}"}}'},
                    }
                ],
            }
        )
        listing = "\n".join(f"d{t}/file_{i}.py" for i in range(120))
        msgs.append({"role": "tool", "tool_call_id": cid, "content": listing})
        msgs.append({"role": "assistant", "content": f"d{t} holds 120 files."})
    return msgs


def test_the_call_after_a_delivery_renders_the_plan_without_making_it(monkeypatch):
    """After the estimator's delivery, its result is applied (the registry took it) and the
    next call does not plan it again; before, `Planner.apply` ran at the start of that call."""
    applied: list[int] = []
    real = plan_module.Planner.apply

    def counting(self, messages, batch):
        applied.append(len(messages))
        return real(self, messages, batch)

    monkeypatch.setattr(plan_module.Planner, "apply", counting)
    msgs = _long_session()
    tp = TokenPilot(lifecycle=LifecycleConfig(batch_turns=1, schedule="background", cost_gate=False))
    points = [k for k in range(5, len(msgs) + 1, 4)]
    for k in points:
        before = len(applied)
        tp.prepare(msgs[:k], TOOLS, session_id="s")
        assert len(applied) == before, "a prepare planned a delivered result itself"
        tp.session("s").lifecycle.wait()
    lc = tp.session("s").lifecycle
    assert applied, "no result was planned on delivery"
    assert lc.stats["deltas_applied"] == len(applied)
    assert lc.stats["evictions"] > 0


def test_a_plan_made_on_delivery_is_joined_by_the_next_calls_tail_after_a_reload():
    """`unshown` (a delivered plan not rendered yet) is part of the saved state: a process
    that loads it joins its tail cuts to that plan's break, as the process that planned it would."""
    msgs = _long_session()
    tp = TokenPilot(lifecycle=LifecycleConfig(batch_turns=1, schedule="background", cost_gate=False))
    seen_unshown = False
    for k in range(5, len(msgs) + 1, 4):
        tp.prepare(msgs[:k], TOOLS, session_id="s")
        lc = tp.session("s").lifecycle
        assert lc.to_dict()["unshown"] is False  # a view renders it: nothing unshown after a call
        lc.wait()
        state = lc.to_dict()
        if state["unshown"]:
            seen_unshown = True
            fresh = type(lc).from_dict(state, archive=lambda text: "art_" + "0" * 24)
            assert fresh.to_dict()["unshown"] is True
    assert seen_unshown, "no delivery changed the plan"
