"""The bench's sketch of Anthropic's server-side context editing (clear_tool_uses_20250919)."""

from __future__ import annotations

import json

from tokenpilot._canonical import canonical_json
from tokenpilot.measure.bench.context_editing import (
    CLEARED_INPUT,
    DOCUMENTED_CLEAR_AT_LEAST,
    PLACEHOLDER,
    AnthropicContextEditing,
    context_editing_methods,
)
from tokenpilot.measure.bench.methods import Vanilla
from tokenpilot.measure.bench.replay import jobs, replay
from tokenpilot.measure.cachesim import message_segments, segment_tokens
from tokenpilot.measure.traces.model import RecordedCall, Session
from tokenpilot.tokens import message_tokens

ROUNDS = 12
WORDS = 300  # words per tool result: each result is a few hundred tokens


def _session(
    names: list[str] | None = None, chat_after: frozenset[int] = frozenset(), hidden: int = 0
) -> Session:
    """System, a task, then ROUNDS tool rounds (one call and its result each); after the
    rounds in `chat_after`, a text reply and a user follow-up (a call with no new tool use)."""
    names = names or ["Read"] * ROUNDS
    messages: list[dict] = [
        {"role": "system", "content": "You are a coding agent. " * 20},
        {"role": "user", "content": "Fix the failing test."},
    ]
    calls: list[RecordedCall] = []
    t = 0.0

    def call() -> None:
        nonlocal t
        calls.append(RecordedCall(0, len(messages), None, t, "m"))
        t += 10.0

    for i in range(ROUNDS):
        call()
        messages.append(
            {
                "role": "assistant",
                "content": f"Looking at step {i}.",
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": names[i], "arguments": json.dumps({"path": f"src/f{i}.py"})},
                    }
                ],
            }
        )
        body = " ".join(f"r{i}w{k}" for k in range(WORDS))
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"result {i}: {body}"})
        if i in chat_after:
            call()
            messages.append({"role": "assistant", "content": f"Done with step {i}."})
            messages.append({"role": "user", "content": "Go on."})
    call()
    messages.append({"role": "assistant", "content": "All fixed."})
    return Session(
        "s", "synthetic", "openai_chat", messages, calls=calls, hidden_prefix_tokens=hidden, task_starts=[1]
    )


def _prompts(session: Session) -> list[list[dict]]:
    return [j.prompt for j in jobs(session, "continuous")]


def _input_tokens(prompt: list[dict]) -> int:
    return sum(message_tokens(m) for m in prompt)


def _trigger_after(session: Session, call_index: int) -> int:
    """A trigger that calls after `call_index` exceed and calls up to it do not."""
    return _input_tokens(_prompts(session)[call_index])


def _renders(method: AnthropicContextEditing, session: Session) -> list[list[dict]]:
    ms = method.session(session.id)
    return [ms.render(p, session.tools, None).messages for p in _prompts(session)]


def _cleared_ids(messages: list[dict]) -> list[str]:
    return [m["tool_call_id"] for m in messages if m.get("role") == "tool" and m["content"] == PLACEHOLDER]


def _results(messages: list[dict]) -> list[str]:
    return [m["tool_call_id"] for m in messages if m.get("role") == "tool"]


def test_below_the_trigger_nothing_changes():
    session = _session()
    for method in (AnthropicContextEditing(), AnthropicContextEditing(trigger_tokens=10**9)):
        for prompt, rendered in zip(_prompts(session), _renders(method, session)):
            assert len(rendered) == len(prompt)
            assert all(a is b for a, b in zip(rendered, prompt))  # the agent's own messages
        assert replay([session], method).digests == replay([session], Vanilla()).digests


def test_past_the_trigger_the_oldest_results_are_cleared_and_the_last_keep_stay():
    session = _session()
    prompts = _prompts(session)
    trigger = _trigger_after(session, 5)
    renders = _renders(AnthropicContextEditing(trigger_tokens=trigger), session)
    for k, (prompt, rendered) in enumerate(zip(prompts, renders)):
        results = _results(prompt)
        if k <= 5:
            assert rendered == prompt
            continue
        # every result but the last three is the placeholder, oldest first
        assert _cleared_ids(rendered) == results[:-3], k
        for before, after in zip(prompt, rendered):
            if after.get("tool_call_id") in results[-3:] or after.get("role") != "tool":
                assert after is before  # kept results, calls and text untouched
            else:
                assert after == {**before, "content": PLACEHOLDER}
    # the first request past the trigger already clears all but the last three
    assert _cleared_ids(renders[6]) == ["call_0", "call_1", "call_2"]


def test_keep_counts_tool_uses_and_tool_pairs_stay_valid():
    names = ["Read", "Bash"] * (ROUNDS // 2)
    session = _session(names)
    trigger = _trigger_after(session, 3)
    for inputs in (False, True):
        method = AnthropicContextEditing(trigger_tokens=trigger, keep_tool_uses=5, clear_tool_inputs=inputs)
        for prompt, rendered in zip(_prompts(session), _renders(method, session)):
            calls = [tc["id"] for m in rendered if m["role"] == "assistant" for tc in m.get("tool_calls", [])]
            assert calls == [
                tc["id"] for m in prompt if m["role"] == "assistant" for tc in m.get("tool_calls", [])
            ]
            assert _results(rendered) == calls  # every call still has its result, in order
            for i, m in enumerate(rendered):
                if m["role"] == "tool":
                    assert rendered[i - 1]["tool_calls"][0]["id"] == m["tool_call_id"]
        last = _renders(method, session)[-1]
        assert len(_cleared_ids(last)) == ROUNDS - 5


def test_clear_tool_inputs_empties_the_arguments_of_cleared_uses_only():
    session = _session()
    trigger = _trigger_after(session, 5)
    last_prompt = _prompts(session)[-1]
    plain = _renders(AnthropicContextEditing(trigger_tokens=trigger), session)[-1]
    assert [m.get("tool_calls") for m in plain] == [m.get("tool_calls") for m in last_prompt]
    rendered = _renders(AnthropicContextEditing(trigger_tokens=trigger, clear_tool_inputs=True), session)[-1]
    cleared = set(_cleared_ids(rendered))
    assert len(cleared) == ROUNDS - 3
    for before, after in zip(last_prompt, rendered):
        for tc_before, tc_after in zip(before.get("tool_calls", []), after.get("tool_calls", [])):
            if tc_after["id"] in cleared:
                assert tc_after["function"] == {"name": "Read", "arguments": CLEARED_INPUT}
            else:
                assert tc_after == tc_before


def test_excluded_tools_are_never_cleared():
    names = ["memory" if i % 3 == 0 else "Read" for i in range(ROUNDS)]
    session = _session(names)
    trigger = _trigger_after(session, 2)
    method = AnthropicContextEditing(trigger_tokens=trigger, exclude_tools=("memory",))
    memory_ids = {f"call_{i}" for i in range(ROUNDS) if names[i] == "memory"}
    renders = _renders(method, session)
    for rendered in renders:
        assert not memory_ids & set(_cleared_ids(rendered))
    # the others older than the last three tool uses (excluded ones count toward keep) are cleared
    expected = [f"call_{i}" for i in range(ROUNDS - 3) if names[i] != "memory"]
    assert _cleared_ids(renders[-1]) == expected
    assert _cleared_ids(_renders(AnthropicContextEditing(trigger_tokens=trigger), session)[-1]) == [
        f"call_{i}" for i in range(ROUNDS - 3)
    ]


def test_clear_at_least_skips_a_clearing_that_would_free_less():
    session = _session()
    trigger = _trigger_after(session, 5)
    prompts = _prompts(session)
    one = message_tokens(prompts[-1][3]) - message_tokens({**prompts[-1][3], "content": PLACEHOLDER})
    assert one > 100  # what clearing one result frees
    # nothing clearable reaches the minimum: nothing is ever cleared, past the trigger too
    never = AnthropicContextEditing(trigger_tokens=trigger, clear_at_least=one * ROUNDS)
    assert all(r == p for r, p in zip(_renders(never, session), prompts))
    # a minimum of 2.5 results: the clear point moves only by three results or more
    method = AnthropicContextEditing(trigger_tokens=trigger, clear_at_least=int(one * 2.5))
    renders = _renders(method, session)
    sets = [_cleared_ids(r) for r in renders]
    assert sets[6] == ["call_0", "call_1", "call_2"]  # three, once past the trigger
    held = 0
    for k in range(7, len(sets)):
        new = [c for c in sets[k] if c not in sets[k - 1]]
        assert sets[k][: len(sets[k - 1])] == sets[k - 1]  # never un-cleared
        assert not new or len(new) >= 3, (k, new)
        if not new:
            held += 1
            assert len(_results(prompts[k])) - len(sets[k]) > 3  # more than `keep` left: a held clearing
            assert renders[k][: len(renders[k - 1])] == renders[k - 1]  # the previous request, extended
    assert held >= 2
    # the default (no minimum) clears one more on every one of those calls
    plain = [_cleared_ids(r) for r in _renders(AnthropicContextEditing(trigger_tokens=trigger), session)]
    assert all(len(plain[k]) == len(plain[k - 1]) + 1 for k in range(7, len(plain)))


def test_the_hidden_prefix_counts_toward_the_trigger():
    base = _session()
    trigger = _trigger_after(base, 11)  # only the last call passes it on its messages alone
    hidden = _input_tokens(_prompts(base)[11]) - _input_tokens(_prompts(base)[5])
    session = _session(hidden=hidden)
    method = AnthropicContextEditing(trigger_tokens=trigger)
    bare = [_cleared_ids(r) for r in _renders(method, session)]
    assert not any(bare[:12]) and bare[12]
    planned = method.hindsight([session], "continuous", "openai", None)
    counted = [_cleared_ids(r) for r in _renders(planned, session)]
    assert not any(counted[:6]) and counted[6] == ["call_0", "call_1", "call_2"]
    ours, van = replay([session], method).digests, replay([session], Vanilla()).digests
    assert ours[:6] == van[:6] and ours[6] != van[6]  # replay hands the method the hidden prefix


def test_renders_are_deterministic():
    session = _session(chat_after=frozenset({7}))
    trigger = _trigger_after(session, 5)
    for method in (
        AnthropicContextEditing(trigger_tokens=trigger),
        AnthropicContextEditing(trigger_tokens=trigger, clear_at_least=500, clear_tool_inputs=True),
    ):
        a = [canonical_json(r) for r in _renders(method, session)]
        b = [canonical_json(r) for r in _renders(method, session)]
        assert a == b
        assert replay([session], method).digests == replay([session], method).digests
        # a function of the request: the last request alone gives the same edit
        alone = method.edit(_prompts(session)[-1])
        assert canonical_json(alone) == a[-1]


def _prefix_tokens(messages: list[dict], end: int) -> int:
    return sum(segment_tokens(s) for i, m in enumerate(messages[:end]) for s in message_segments(m, i))


def test_replay_charges_a_clearing_from_the_first_changed_message():
    session = _session(chat_after=frozenset({8}))  # call 10 adds no tool use
    trigger = _trigger_after(session, 5)
    method = AnthropicContextEditing(trigger_tokens=trigger)
    renders = _renders(method, session)
    van = replay([session], Vanilla(), profile="anthropic").calls
    ours = replay([session], method, profile="anthropic").calls
    assert not any(c.prefix_break for c in van)
    new_clearing = 0
    for k in range(6, len(renders)):
        changed = [i for i, (a, b) in enumerate(zip(renders[k], renders[k - 1])) if a != b]
        prev_len = ours[k - 1].prompt_tokens
        if changed:
            first = changed[0]
            new_clearing += 1
            assert renders[k][first]["content"] == PLACEHOLDER
            assert ours[k].prefix_break and f"messages[{first}]" in (ours[k].cause or ""), (k, ours[k])
            # nothing past the first changed message is read from the cache: it is written
            assert ours[k].hit_tokens <= _prefix_tokens(renders[k], first)
            assert ours[k].write_tokens >= ours[k].prompt_tokens - _prefix_tokens(renders[k], first)
            assert ours[k].hit_tokens < van[k].hit_tokens
        else:  # no new clearing: the previous request is a prefix of this one, and read back whole
            assert not ours[k].prefix_break and ours[k].cause is None, (k, ours[k])
            assert ours[k].hit_tokens >= prev_len
    assert new_clearing >= 5
    assert any(
        not [i for i, (a, b) in enumerate(zip(renders[k], renders[k - 1])) if a != b]
        for k in range(7, len(renders))
    )  # the chat turn past the trigger cleared nothing new


def test_the_two_listed_methods():
    default, minimum = context_editing_methods()
    assert (default.name, default.kind, default.trigger_tokens, default.keep_tool_uses) == (
        "anthropic_context_editing",
        "sketch",
        100_000,
        3,
    )
    assert (default.clear_at_least, default.clear_tool_inputs, default.exclude_tools) == (None, False, ())
    assert minimum.name == "anthropic_clear_at_least"
    assert minimum.clear_at_least == DOCUMENTED_CLEAR_AT_LEAST == 5_000
    assert minimum.trigger_tokens == 100_000 and minimum.keep_tool_uses == 3
