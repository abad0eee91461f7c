"""A recall the bench charges stays in the agent's history, as it would live
(`measure/bench/recalled.py`): the method sees it from the next call on, what it holds
is not charged again while shown, and the round trip's messages are the cached prefix
of the next call."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_bench import _HidingSession

from tokenpilot import RECALL_TOOL_NAME
from tokenpilot.measure.bench.recalled import Recalls, recall_messages
from tokenpilot.measure.bench.replay import render_digests, replay
from tokenpilot.measure.traces.model import RecordedCall, Session, Usage

NAMES = ["parse_config", "load_settings", "DEFAULT_TIMEOUT_MS", "retry_budget", "flush_queue"]


def _session() -> Session:
    """Turn 0 prints every name; each later answer uses one of them again."""
    msgs: list[dict] = [
        {"role": "system", "content": "You are a coding agent. " * 400},  # past the cache minimum
        {"role": "user", "content": "Find where the timeout is set."},
    ]
    calls = []
    for k in range(8):
        msgs.append(
            {
                "role": "assistant",
                "content": f"Step {k}." if k else None,
                "tool_calls": [
                    {
                        "id": f"c{k}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": f'{{"k":{k}}}'},
                    }
                ],
            }
        )
        body = f"ok {k}"
        if k == 0:  # the names, among 1,000 or so tokens of listing
            body = "\n".join([f"src/mod_{k}.py: {n} = {k}" for n in NAMES] + [f"row {j}" for j in range(300)])
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": body})
    for k in range(8):
        idx = 2 + 2 * (k + 1)
        if idx < len(msgs):
            msgs[idx]["content"] = f"Using {NAMES[k % len(NAMES)]} next." if k else "Next."
        else:
            msgs.append({"role": "assistant", "content": f"Done: {NAMES[0]}."})
        calls.append(RecordedCall(0, idx, Usage(0, 0, None, 20), 1_000.0 + k, "m"))
    return Session("s", "test", "openai_chat", msgs, [], calls)


class _HidesOutputs:
    """Hides every tool output but a recall's result behind an artifact id."""

    name = "hides_outputs"

    def session(self, session_id):
        return _HidesSession()


class _HidesSession(_HidingSession):
    def hides(self, m):
        return super().hides(m) and not str(m.get("tool_call_id", "")).startswith("call_recall_")


def test_recall_messages_pair_each_call_with_its_result():
    msgs = recall_messages("0", [("art_a", "text a"), ("art_b", "text b")])
    assert [m["role"] for m in msgs] == ["assistant", "tool", "tool"]
    ids = [c["id"] for c in msgs[0]["tool_calls"]]
    assert [m["tool_call_id"] for m in msgs[1:]] == ids and len(set(ids)) == 2
    assert {c["function"]["name"] for c in msgs[0]["tool_calls"]} == {RECALL_TOOL_NAME}
    assert [m["content"] for m in msgs[1:]] == ["text a", "text b"]


def test_recalls_go_before_the_answer_of_the_call_that_made_them():
    rec = Recalls()
    first, second = recall_messages("0", [("a", "A")]), recall_messages("1", [("b", "B")])
    rec.add("s", 3, 4, first)
    rec.add("s", 5, 6, second)
    prompt = [{"role": "system"}] + [{"i": i} for i in range(2, 8)]  # messages[2:8]
    assert rec.into("s", 3, prompt, 2, 8) == prompt  # not yet made at call 3
    out = rec.into("s", 6, prompt, 2, 8)
    assert out[:3] == prompt[:3] and out[3:5] == first and out[5:7] == prompt[3:5]
    assert out[7:9] == second and out[9:] == prompt[5:]
    assert out[3] is first[0]  # the same objects at every call
    assert rec.into("s", 6, prompt[:1] + prompt[4:], 5, 8)[2:4] == second  # one before the window is gone
    assert rec.into("other", 6, prompt, 2, 8) == prompt


def test_what_was_recalled_is_shown_after_and_not_charged_again():
    s = _session()
    run = replay([s], _HidesOutputs())
    charged = [k for k, c in enumerate(run.calls) if c.recall_charged]
    assert charged == [1]  # the first answer that uses a name of turn 0
    assert all(c.visible == c.needs for c in run.calls[2:])  # the recalled text is shown
    (made,) = run.recalls.by_session["s"]
    assert made[1] == s.calls[1].end
    # the round trip sent the recall's messages: the next call reads them from the cache
    after = run.calls[2]
    assert after.hit_tokens > after.prompt_tokens - 200
    digests = render_digests([s], _HidesOutputs(), mode="continuous", profile="openai", recalls=run.recalls)
    assert digests == run.digests


def test_without_the_recall_in_the_history_every_use_is_charged():
    """The old reading (the recalled text gone after its round trip), as a method that
    hides the recall's result too: each answer that uses a name of turn 0 pays again."""

    class _HidesAll(_HidingSession):
        def artifact_id(self, k, m):  # recalls shift positions: name each text by its length too
            return f"art_{k:024x}_{len(m['content'])}"

    class _Method:
        name = "hides_all"

        def session(self, session_id):
            return _HidesAll()

    run = replay([_session()], _Method())
    names_used = {NAMES[k % len(NAMES)] for k in range(1, 8)}  # a name said again is in the agent's words
    assert sum(c.recall_charged for c in run.calls) == len(names_used) > 1


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 30),
    made=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=6),
    start=st.integers(0, 10),
    now=st.integers(0, 45),
)
def test_recalls_keep_the_prompt_in_order_and_each_before_its_answer(n, made, start, now):
    """Whatever the recalls, the prompt comes out whole and in order, and each recall made
    by an earlier call within the window sits, whole, right before its answer."""
    end = start + n
    prompt = [{"system": True}] + [{"i": i} for i in range(start, end)]
    rec = Recalls()
    for k, (call, before) in enumerate(made):
        rec.add("s", call, before, recall_messages(str(k), [(f"a{k}", f"text {k}")]))
    out = rec.into("s", now, prompt, start, end)
    assert [m for m in out if "tool_calls" not in m and "tool_call_id" not in m] == prompt
    placed = [(c, b, k) for k, (c, b) in enumerate(made) if c < now and start <= b <= end]
    assert len(out) == len(prompt) + 2 * len(placed)
    for _, before, k in placed:
        at = next(j for j, m in enumerate(out) if m.get("tool_call_id") == f"call_recall_{k}_0")
        assert out[at - 1]["tool_calls"][0]["id"] == f"call_recall_{k}_0"
        following = [m for m in out[at + 1 :] if "i" in m]
        assert (following[0]["i"] if following else end) == before  # its answer comes next
