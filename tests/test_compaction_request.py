"""A compaction request (the caller asks for a summary of the whole conversation) is
rendered with nothing evicted: the summary is all the agent keeps afterwards."""

from __future__ import annotations

import json

import pytest
from conftest import shared_path
from strategies import TOOLS
from test_eviction_default import CITIES, _text, replay_default, transcript_scenario

from tokenpilot import Config, TokenPilot
from tokenpilot.errors import ConfigError
from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.messages.compaction import COMPACTION_MARKERS, ENDED_CAUSE, SHOWN_CAUSE, is_compaction_request

REQUEST = (
    "Your task is to create a detailed summary of the conversation so far, paying close attention "
    "to the user's explicit requests and your previous actions.\n\nIMPORTANT: Do NOT use any tools."
)


def test_markers_match_the_last_user_message_only() -> None:
    m = COMPACTION_MARKERS
    assert is_compaction_request([{"role": "user", "content": REQUEST}], m)
    assert is_compaction_request([{"role": "user", "content": [{"type": "text", "text": "\n" + REQUEST}]}], m)
    assert not is_compaction_request(
        [{"role": "user", "content": REQUEST}, {"role": "user", "content": "go"}], m
    )
    assert not is_compaction_request([{"role": "tool", "tool_call_id": "1", "content": REQUEST}], m)
    assert not is_compaction_request([{"role": "user", "content": "summarize " + REQUEST}], m)
    assert not is_compaction_request([{"role": "user", "content": REQUEST}], ())
    assert not is_compaction_request([], m)
    assert not is_compaction_request(["junk"], m)


def test_config_refuses_markers_that_are_not_strings() -> None:
    with pytest.raises(ConfigError):
        Config(compaction_markers=("",))
    with pytest.raises(ConfigError):
        Config(compaction_markers=["x"])  # type: ignore[arg-type]


def _evicted_then_compacted(config: Config) -> tuple[TokenPilot, list, list[dict]]:
    s = transcript_scenario()
    tp = TokenPilot(config)
    msgs = s.msgs
    preps = replay_default(tp, msgs, [*s.points, len(msgs)])
    assert not [c for c in CITIES if f"{c} hourly" in _text(preps[-1].messages)], "T2 evicted first"
    return tp, preps, msgs


def test_a_compaction_request_sees_every_evicted_output_and_the_next_call_returns_to_the_plan() -> None:
    tp, preps, msgs = _evicted_then_compacted(Config())
    before = preps[-1]
    compact = tp.prepare([*msgs, {"role": "user", "content": REQUEST}], TOOLS, session_id="s")
    text = _text(compact.messages)
    assert all(f"{c} hourly" in text for c in CITIES), "every evicted page is shown to the summary"
    assert "[tokenpilot: evicted" not in text
    assert compact.stats.prefix_break == SHOWN_CAUSE
    assert validate_pairing(compact.messages) == []
    # the prefix up to the first eviction is the one the last call sent (read from the cache)
    first = next(i for i, (a, b) in enumerate(zip(before.messages, compact.messages)) if a != b)
    assert first > 1 and compact.messages[:first] == before.messages[:first]

    # A caller that does not restart from the summary: the plan applies again.
    tp.session("s").lifecycle.wait()
    reply = {"role": "assistant", "content": "<summary>…</summary>"}
    after = tp.prepare(
        [*msgs, {"role": "user", "content": REQUEST}, reply, {"role": "user", "content": "go on"}],
        TOOLS,
        session_id="s",
    )
    assert not [c for c in CITIES if f"{c} hourly" in _text(after.messages)]
    assert after.stats.prefix_break == ENDED_CAUSE


def test_with_no_markers_a_compaction_request_sees_the_managed_history() -> None:
    tp, _, msgs = _evicted_then_compacted(Config(compaction_markers=()))
    compact = tp.prepare([*msgs, {"role": "user", "content": REQUEST}], TOOLS, session_id="s")
    assert not [c for c in CITIES if f"{c} hourly" in _text(compact.messages)]
    assert compact.stats.prefix_break is None


def test_the_shared_claude_code_compaction_requests_carry_the_marker() -> None:
    from tokenpilot.measure import traces

    sessions = traces.load(shared_path("traces") / "claude_code_spotter")
    found = 0
    for s in sessions:
        for call in s.calls:
            if s.output(call)["content"].lstrip().startswith("<analysis>"):
                assert is_compaction_request(s.prompt(call), COMPACTION_MARKERS)
                found += 1
            else:
                assert not is_compaction_request(s.prompt(call), COMPACTION_MARKERS)
    assert found == 4


def test_a_codex_compaction_request_is_recognised_through_the_responses_conversion() -> None:
    from tokenpilot_proxy.responses import to_core

    prompt = (
        "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM "
        "that will resume the task."
    )
    body = {
        "model": "gpt-5-codex",
        "instructions": "You are Codex.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix a.py"}]},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "shell",
                "arguments": '{"command": ["cat", "a.py"]}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": "def f(): pass"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]},
        ],
    }
    messages, _ = to_core(body)
    assert is_compaction_request(messages, COMPACTION_MARKERS)
    assert not is_compaction_request(messages[:-1], COMPACTION_MARKERS)


def test_a_claude_code_compaction_request_is_recognised_through_the_messages_conversion() -> None:
    """Claude Code sends the request as the last text block of a user message that opens
    with tool results and hook reminders."""
    from tokenpilot.messages.model import from_anthropic

    messages = [
        {"role": "user", "content": "fix a.py"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Edit", "input": {"file_path": "a.py"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "The file a.py has been updated."},
                {
                    "type": "text",
                    "text": "<system-reminder>\nPostToolUse:Edit hook additional context: ok\n</system-reminder>",
                },
                {"type": "text", "text": REQUEST},
            ],
        },
    ]
    core, _ = from_anthropic(messages, "You are Claude Code.")
    assert is_compaction_request(core, COMPACTION_MARKERS)
    core[-1]["content"] = core[-1]["content"][:1]  # the reminder alone
    assert not is_compaction_request(core, COMPACTION_MARKERS)


def test_a_compaction_request_through_the_messages_wire_renders_every_evicted_page() -> None:
    """The Anthropic path end to end (to the upstream body, without HTTP): after T2's pages
    were evicted, Claude Code's compaction request (a user message whose last text block
    is the request, after a hook reminder) gets a body with every page, valid pairing and
    at most 4 cache breakpoints."""
    from tokenpilot.messages.model import to_anthropic
    from tokenpilot_proxy.anthropic_render import breakpoints, pairing_errors, render
    from tokenpilot_proxy.anthropic_wire import to_core

    tp, _, msgs = _evicted_then_compacted(Config())
    body = to_anthropic(msgs, TOOLS)
    body["messages"].append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>\nPostToolUse hook: ok\n</system-reminder>"},
                {"type": "text", "text": REQUEST},
            ],
        }
    )
    history, tools = to_core(body)
    out = render(tp.prepare(history, tools, session_id="s"))
    text = json.dumps(out["messages"], ensure_ascii=False)
    assert all(f"{c} hourly" in text for c in CITIES)
    assert pairing_errors(out["messages"]) == [] and 1 <= breakpoints(out) <= 4


def test_doctor_reports_a_compaction_break_as_deliberate() -> None:
    """The proxy's break diagnosis calls the two compaction causes "compaction", and the
    doctor's check counts that as deliberate, like an eviction, not as a warning."""
    from tokenpilot_proxy.breaks import diagnose
    from tokenpilot_proxy.checks import OK, WARN, break_check

    prev = [
        {"role": "user", "content": "a"},
        {"role": "tool", "tool_call_id": "1", "content": "[tokenpilot: evicted"},
    ]
    cur = [{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "1", "content": "the page"}]
    for cause in (SHOWN_CAUSE, ENDED_CAUSE):
        rec = diagnose(cause, prev, cur, at=1, prev_tools=[], tools=[])
        assert rec["likely"] == "compaction"
        assert break_check("s", {**rec, "call": 3}).status == OK
    assert break_check("s", {"likely": "history rewritten"}).status == WARN


def test_openclaws_compaction_needs_no_marker_its_history_arrives_as_user_text() -> None:
    """OpenClaw's agent (pi) compacts with a request of its own: the history it keeps (the
    originals: the proxy never changes what the agent stores) serialized into one user
    message, `<conversation>[User]: … [Tool result]: …</conversation>`, then its summary
    instructions. User words are never rewritten (I5), so a 150 KB serialized history
    reaches the upstream byte for byte, with nothing reduced or evicted."""
    results = [
        "[Tool result]: " + "".join(f"cc -c src/file{i}_{k}.c -o build/file{i}_{k}.o\n" for k in range(60))
        for i in range(60)
    ]
    conversation = "\n\n".join(
        f'[User]: step {i}\n\n[Assistant tool calls]: exec(command="make")\n\n{r}'
        for i, r in enumerate(results)
    )
    prompt = (
        f"<conversation>\n{conversation}\n</conversation>\n\nThe messages above are a conversation to "
        "summarize. Create a structured context checkpoint summary that another LLM will use to continue the work."
    )
    assert len(prompt) > 150_000
    msgs = [
        {"role": "system", "content": "You are a context summarization assistant."},
        {"role": "user", "content": [{"type": "text", "text": prompt}]},
    ]
    tp = TokenPilot()
    prepared = tp.prepare(msgs, session_id="pi-compaction")
    assert prepared.messages == msgs
    assert list(tp.store.artifact_ids("pi-compaction")) == []
