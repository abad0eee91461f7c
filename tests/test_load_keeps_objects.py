"""A state loaded over a session keeps the message objects the process already holds.

Replicas that take turns on a session each load the state the other saved, at every
call. What the planner remembers of a message (its token count, its archive text) is
keyed by the message object, so a load that built every message anew made each replica
count and encode the whole history again. An entry whose frozen message equals the one
held keeps the held object, and an entry equal as a whole stays whole (its export, whose
text the journal has; the raw fields a call is matched by); one that differs takes the
loaded one, and the session renders and exports exactly as a fresh process that loaded
the same state.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_evict import sessions

from tokenpilot import TokenPilot
from tokenpilot.lifecycle import LifecycleConfig
from tokenpilot.messages.turns import TurnSegmenter, segment_turns

INLINE = LifecycleConfig(schedule="inline")


def _history(n: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    msgs.append({"role": "user", "content": "list the folders, then read the logs"})
    for i in range(n):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"ls d{i}"})},
        }
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": "\n".join(f"f_{i}_{j}.py" for j in range(30)),
            }
        )
    return msgs


def test_an_equal_loaded_state_keeps_the_held_objects_and_a_changed_entry_is_taken() -> None:
    tp = TokenPilot(lifecycle=INLINE)  # no estimator run in flight to change the state saved
    msgs = _history(8)
    tp.prepare(msgs, session_id="s")
    held = [e.frozen for e in tp.session("s").entries]
    saved = json.loads(json.dumps(tp.export_session("s")))

    exports = [e.exported for e in tp.session("s").entries]
    entries = list(tp.session("s").entries)
    tp.import_session(saved)
    # each equal entry stays whole: still matched by its raw fields, without hashing again
    assert all(a is b for a, b in zip(entries, tp.session("s").entries))
    assert all(e.live for e in tp.session("s").entries)
    assert all(a is b for a, b in zip(held, (e.frozen for e in tp.session("s").entries)))
    # each equal entry keeps its export too (the journal has its text), and exports the same
    assert all(a is b for a, b in zip(exports, (e.exported for e in tp.session("s").entries)))
    assert json.loads(json.dumps(tp.export_session("s"))) == saved

    changed = copy.deepcopy(saved)
    k = 3
    assert isinstance(changed["entries"][k]["frozen"], dict)
    changed["entries"][k]["frozen"] = {**changed["entries"][k]["frozen"], "content": "another text"}
    tp.import_session(changed)
    now = [e.frozen for e in tp.session("s").entries]
    assert now[k] is not held[k] and now[k]["content"] == "another text"
    assert tp.session("s").entries[k].exported is None  # made anew from what was loaded
    assert json.loads(json.dumps(tp.export_session("s"))) == changed
    assert all(a is b for i, (a, b) in enumerate(zip(held, now)) if i != k)

    fresh = TokenPilot(lifecycle=INLINE)
    fresh.import_session(copy.deepcopy(changed))
    more = [*msgs, {"role": "user", "content": "and now?"}]
    assert tp.prepare(more, session_id="s").messages == fresh.prepare(more, session_id="s").messages


@settings(max_examples=150, deadline=None)
@given(msgs=sessions(), at=st.integers(0, 60), cut=st.integers(1, 60))
def test_turns_after_a_recheck_are_the_turns_of_the_history_given(msgs, at, cut) -> None:
    """`TurnSegmenter.recheck` (a loaded state): the turns are `segment_turns`' whether the
    history is the one read (same objects), an equal copy, or one with a message changed."""
    seg = TurnSegmenter()
    part = msgs[: max(1, min(cut, len(msgs)))]
    assert seg.update(part) == segment_turns(part)
    seg.recheck()
    assert seg.update(msgs) == segment_turns(msgs)  # the same objects, extended
    copied = copy.deepcopy(msgs)
    seg.recheck()
    assert seg.update(copied) == segment_turns(copied)  # equal, other objects
    k = at % len(msgs)
    changed = list(copied)
    changed[k] = {**copied[k], "content": f"changed {at}"}
    if copied[k].get("role") == "assistant":
        changed[k]["role"] = "user"  # a turn boundary moves too
    seg.recheck()
    assert seg.update(changed) == segment_turns(changed)
