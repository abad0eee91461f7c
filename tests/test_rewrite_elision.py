"""The caller's own rolling elision (SWE-agent's `Old environment output: (N lines
omitted)`): TokenPilot keeps the frozen form until the next batch boundary, then applies
every elision in one pass; N breaks become about N/B. Any other rewrite is the new base
at once (issue #26)."""

from __future__ import annotations

import json
import math
import re

from conftest import shared_path
from hypothesis import HealthCheck, given, settings
from strategies import TOOLS, call_points, session

from tokenpilot import TokenPilot
from tokenpilot._canonical import canonical_json
from tokenpilot.ingest.elision import HeldElisions, elides
from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.measure.bench.methods import TokenPilotMethod, Vanilla
from tokenpilot.measure.bench.replay import replay
from tokenpilot.measure.traces import load
from tokenpilot.store.artifacts import ArtifactStore

KEEP = 2  # the caller keeps its last two observations whole
REWRITE = "history rewritten by the caller"


def elided(text: str) -> str:
    return f"Old environment output: ({text.count(chr(10)) + 1} lines omitted)"


def tool_session(steps: int) -> list[dict]:
    """A function-calling agent: one shell call and a 40-line result per step."""
    msgs: list[dict] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix it."},
    ]
    for k in range(steps):
        cid = f"c{k}"
        msgs.append(
            {
                "role": "assistant",
                "content": f"step {k}",
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"k": k})},
                    }
                ],
            }
        )
        body = "\n".join(f"out {k} line {i}: value_{k}_{i}" for i in range(40))
        msgs.append({"role": "tool", "tool_call_id": cid, "content": body})
    return msgs


def text_session(steps: int) -> list[dict]:
    """A text-action agent (SWE-agent's format): observations are user messages."""
    footer = "\n(Open file: /repo/a.py)\n(Current directory: /repo)\nbash-$"
    msgs: list[dict] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix it." + footer},
    ]
    for k in range(steps):
        msgs.append({"role": "assistant", "content": f"Look.\n```\ncat f{k}.py\n```"})
        body = "\n".join(f"f{k} line {i}: value_{k}_{i}" for i in range(40))
        msgs.append({"role": "user", "content": body + footer})
    return msgs


def as_sent(msgs: list[dict], upto: int, keep: int = KEEP) -> list[dict]:
    """What the caller sends for the prompt msgs[:upto]: all but its last `keep`
    environment messages elided (SWE-agent's last_n_observations)."""
    prompt = [dict(m) for m in msgs[:upto]]
    env = [i for i, m in enumerate(prompt) if m["role"] == "tool" or (i > 1 and m["role"] == "user")]
    for i in env[:-keep] if keep else env:
        prompt[i]["content"] = elided(prompt[i]["content"])
    return prompt


def run(tp: TokenPilot, msgs: list[dict], keep: int = KEEP) -> list:
    out = []
    for k in call_points(msgs):
        out.append(tp.prepare(as_sent(msgs, k, keep), TOOLS, session_id="s"))
    return out


def _contents(p) -> list[str]:
    return [m["content"] for m in p.messages if isinstance(m.get("content"), str)]


def test_elisions_are_held_and_applied_once_per_batch():
    msgs = tool_session(10)
    prepared = run(TokenPilot(lifecycle=False), msgs)
    rewrites = [k for k, p in enumerate(prepared) if p.stats.prefix_break]
    assert all(prepared[k].stats.prefix_break == REWRITE for k in rewrites)
    new_elisions = sum(
        1 for k in call_points(msgs) if len([i for i in range(k) if msgs[i]["role"] == "tool"]) > KEEP
    )
    assert new_elisions >= 7 and 1 <= len(rewrites) <= math.ceil(new_elisions / 3)
    # between boundaries the frozen (whole) form is what goes; nothing the agent kept is missing
    for k, p in zip(call_points(msgs), prepared):
        text = "\n".join(_contents(p))
        for m in as_sent(msgs, k):
            if m["role"] == "tool" and not m["content"].startswith("Old environment output"):
                assert m["content"] in text
    # at a boundary exactly the caller's elisions are applied
    last_boundary = rewrites[-1]
    k = call_points(msgs)[last_boundary]
    sent = [m["content"] for m in as_sent(msgs, k) if m["role"] == "tool"]
    assert [c for c in _contents(prepared[last_boundary]) if c.startswith("Old environment")] == [
        c for c in sent if c.startswith("Old environment")
    ]


def test_without_holding_every_elision_breaks_the_prefix():
    """The baseline the batch improves on: a caller whose elisions are not elisions
    (they grow the message) is followed at once, one break per call."""
    msgs = tool_session(8)
    tp = TokenPilot(lifecycle=False)
    breaks = 0
    for k in call_points(msgs):
        prompt = [dict(m) for m in msgs[:k]]
        tools = [i for i, m in enumerate(prompt) if m["role"] == "tool"]
        for i in tools[:-KEEP]:
            prompt[i]["content"] += "\n[old]"  # longer: a rewrite, not an elision
        breaks += tp.prepare(prompt, TOOLS, session_id="s").stats.prefix_break == REWRITE
    assert breaks >= 5


def test_text_action_observations_are_held_like_tool_results():
    msgs = text_session(9)
    prepared = run(TokenPilot(lifecycle=False), msgs)
    rewrites = [p for p in prepared if p.stats.prefix_break == REWRITE]
    assert 1 <= len(rewrites) <= 3
    assert sum(p.stats.prefix_break is not None for p in prepared) == len(rewrites)


def test_a_rewrite_of_the_persons_words_is_the_new_base_at_once():
    msgs = tool_session(4)
    tp = TokenPilot(lifecycle=False)
    tp.prepare(msgs[:4], TOOLS, session_id="s")
    edited = [dict(m) for m in msgs[:6]]
    edited[1]["content"] = "Fix"  # shorter, but the person's words: never held
    p = tp.prepare(edited, TOOLS, session_id="s")
    assert p.stats.prefix_break == REWRITE
    assert p.messages[1]["content"] == "Fix"


def test_a_dropped_message_is_not_an_elision():
    msgs = tool_session(5)
    tp = TokenPilot(lifecycle=False)
    tp.prepare(msgs[:8], TOOLS, session_id="s")
    compacted = [msgs[0], {"role": "user", "content": "Summary of earlier work."}, *msgs[6:10]]
    p = tp.prepare(compacted, TOOLS, session_id="s")
    assert p.stats.prefix_break == REWRITE
    assert tp.session("s").elisions.since is None


def test_elides_needs_a_shorter_environment_message_with_the_same_ids():
    class Seen:
        def __init__(self, role, ids, raw_tokens):
            self.role, self.ids, self.raw_tokens = role, ids, raw_tokens

    tool = {"role": "tool", "tool_call_id": "c1", "content": "Old environment output: (9 lines omitted)"}
    assert elides(Seen("tool", "c1", 500), tool, "c1", 12, "assistant")
    assert not elides(Seen("tool", "c2", 500), tool, "c1", 12, "assistant")  # another call's result
    assert not elides(Seen("tool", "c1", 10), tool, "c1", 12, "assistant")  # not shorter
    # about the same size (a rewrite, e.g. a replayed truncation note): within the estimate's error
    assert not elides(Seen("tool", "c1", 500), tool, "c1", 480, "assistant")
    assert elides(Seen("tool", "c1", 500), tool, "c1", 440, "assistant")
    obs = {"role": "user", "content": "Old environment output: (9 lines omitted)"}
    assert elides(Seen("user", None, 500), obs, None, 12, "assistant")
    assert not elides(Seen("user", None, 500), obs, None, 12, "system")  # the task prompt's place
    words = {"role": "user", "content": "never mind"}
    assert not elides(Seen("user", None, 500), words, None, 5, "assistant")  # the person's words
    assert not elides(Seen("assistant", None, 500), {"role": "assistant", "content": "x"}, None, 3, "user")


def test_held_elisions_count_their_batches():
    held = HeldElisions(batch_calls=3)
    held.hold(1, 5)
    assert not held.due(7) and held.due(8)
    held.apply(3)
    assert held.batches == 1 and held.since is None and held.held_calls == 1


def test_the_default_constructor_uses_the_lifecycle_batch_and_counts_in_stats():
    tp = TokenPilot()
    assert tp.session("s").elisions.batch_calls == tp.lifecycle_config.batch_turns
    run(tp, tool_session(8))
    stats = tp.lifecycle_stats("s")
    assert stats["elision_batches"] >= 1 and stats["elisions_held_calls"] >= 2


def test_the_marshmallow_recording_breaks_once_where_swe_agent_broke_every_call():
    root = shared_path("traces", "swe_agent")
    path = next(p for p in root.rglob("*.traj") if "function_calling_replace_from_source" in str(p))
    sessions = load(path)
    vanilla = replay(sessions, Vanilla())
    managed = replay(sessions, TokenPilotMethod())
    v_breaks = sum(c.prefix_break for c in vanilla.calls)
    t_breaks = sum(c.prefix_break for c in managed.calls)
    assert v_breaks >= 6 and t_breaks <= math.ceil(v_breaks / 3)
    assert sum(c.cost_usd for c in managed.calls) < 0.8 * sum(c.cost_usd for c in vanilla.calls)
    assert managed.record()["retention"] >= vanilla.record()["retention"]


# ---------------------------------------------------------------------------
# properties through the default constructor, with a caller that elides
# ---------------------------------------------------------------------------
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
_ART = re.compile(r"art_[0-9a-f]{24}")


def _elide_tools(msgs: list[dict], upto: int) -> list[dict]:
    prompt = [dict(m) for m in msgs[:upto]]
    tools = [i for i, m in enumerate(prompt) if m["role"] == "tool" and isinstance(m.get("content"), str)]
    for i in tools[:-KEEP]:
        if len(prompt[i]["content"]) > 60:
            prompt[i]["content"] = elided(prompt[i]["content"])
    return prompt


def _replay_eliding(tp: TokenPilot, msgs: list[dict]) -> list:
    out = []
    for k in call_points(msgs):
        out.append(tp.prepare(_elide_tools(msgs, k), TOOLS, session_id="s"))
        tp.session("s").lifecycle.wait()
    return out


def _bytes(p) -> str:
    return json.dumps({"tools": p.tools, "messages": p.stable_messages}, ensure_ascii=False)


@SETTINGS
@given(session())
def test_i1_with_an_eliding_caller_breaks_only_at_boundaries(msgs):
    tp = TokenPilot()
    prev = None
    rewrites = 0
    for p in _replay_eliding(tp, msgs):
        cur = _bytes(p)
        if prev is not None and not cur.startswith(prev[:-2]):
            assert p.stats.prefix_break in ("eviction", "tools changed", REWRITE)
            rewrites += p.stats.prefix_break == REWRITE
        prev = cur
    held = tp.session("s").elisions
    assert rewrites <= held.batches + 1  # each rewrite is a batch of elisions applied


@SETTINGS
@given(session())
def test_i3_i4_with_an_eliding_caller(msgs):
    tp = TokenPilot(store=ArtifactStore())
    for p in _replay_eliding(tp, msgs):
        assert validate_pairing(p.messages) == []
        for m in p.messages:
            for c in m.get("tool_calls") or []:
                json.loads(c["function"]["arguments"])
            text = m["content"] if isinstance(m.get("content"), str) else canonical_json(m.get("content"))
            for aid in _ART.findall(text):
                assert tp.recall(aid, session_id="s").found


def test_held_elisions_travel_with_the_session_state():
    """A replica that loads the session mid-batch holds and applies the caller's
    elisions at the same calls as the process that held them: the same bodies."""
    msgs = tool_session(10)
    points = call_points(msgs)
    alone = run(TokenPilot(lifecycle=False), msgs)
    tps = [TokenPilot(lifecycle=False), TokenPilot(lifecycle=False)]
    hopping = []
    for j, k in enumerate(points):
        tp, other = tps[j % 2], tps[(j + 1) % 2]
        if j:
            tp.import_session(other.export_session("s"))  # as a replica reads the store
        hopping.append(tp.prepare(as_sent(msgs, k), TOOLS, session_id="s"))
    assert [canonical_json(p.messages) for p in hopping] == [canonical_json(p.messages) for p in alone]
    assert any(p.stats.prefix_break for p in alone)  # there were elisions to hold
