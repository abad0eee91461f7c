"""`/v1/messages` (Anthropic Messages) driven by the `anthropic` SDK, against a fake Anthropic upstream.

The fake refuses what Anthropic refuses where TokenPilot could cause it (more than 4
cache breakpoints, broken tool pairing) and reports cache reads Anthropic's way, so
what it records is what the provider's cache would see.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import TOOLS as STRATEGY_TOOLS
from strategies import call_points
from strategies import session as chat_session

from tokenpilot import Config, TokenPilot
from tokenpilot.lifecycle.schedule import LifecycleConfig
from tokenpilot.lifecycle.segments import WindowRule
from tokenpilot.messages.model import to_anthropic
from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.anthropic_render import breakpoints, pairing_errors, render
from tokenpilot_proxy.anthropic_wire import session_hint, to_core
from tokenpilot_proxy.demo import FakeAnthropic, Reply, ToolCall, anthropic_blocks
from tokenpilot_proxy.server import RunningProxy
from tokenpilot_proxy.sessions import SessionStats

MODEL = "claude-fake"
RULES = "\n".join(f"- rule {i}: prefer small diffs and run the tests in tests/{i}" for i in range(120))
TOOLS = [
    {
        "name": name,
        "description": f"{name}: " + "runs things. " * 40,
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    }
    for name in ("Bash", "Read")
]
BIG = "".join(f"line {i:05d}: " + "output of a long build " * 4 + "\n" for i in range(1500))  # ~150 KB
THINKING = {"type": "thinking", "thinking": "I should list the files.", "signature": "c2lnbmF0dXJl" * 8}


def system(date: str) -> list[dict[str, Any]]:
    """Claude Code-shaped system: blocks, the client's own cache markers, a date early on."""
    return [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {
            "type": "text",
            "text": f"Today's date is {date}.\n{RULES}",
            "cache_control": {"type": "ephemeral"},
        },
    ]


def marked(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as Claude Code sends it: a cache marker on the newest block (it moves each call)."""
    out = json.loads(json.dumps(history))
    last = out[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


@pytest.fixture
async def fake():
    async with FakeAnthropic() as f:
        yield f


@pytest.fixture
async def start(tmp_path, fake):
    running: list[RunningProxy] = []

    async def go(responder: Callable[[dict[str, Any]], Reply] | None = None) -> RunningProxy:
        fake.responder = responder
        settings = ProxySettings(
            upstream=fake.url, port=0, store_dir=tmp_path / "store", state_dir=None, flush_interval_s=0
        )
        rp = await RunningProxy(settings, shutdown_timeout_s=1).start()
        running.append(rp)
        return rp

    yield go
    for rp in running:
        await rp.stop()


def sdk(rp: RunningProxy, session: str | None = None) -> anthropic.AsyncAnthropic:
    headers = {"X-Claude-Code-Session-Id": session} if session else {}
    return anthropic.AsyncAnthropic(
        base_url=rp.url, api_key="sk-test", max_retries=0, default_headers=headers
    )


async def ask(client: anthropic.AsyncAnthropic, stream: bool, **kw: Any) -> anthropic.types.Message:
    kw = {"model": MODEL, "max_tokens": 1024, "tools": TOOLS, **kw}
    if not stream:
        return await client.messages.create(**kw)
    async with client.messages.stream(**kw) as s:
        return await s.get_final_message()


def last_tool_use(body: dict[str, Any]) -> dict[str, Any] | None:
    for m in reversed(body["messages"]):
        if m["role"] == "assistant":
            return next((b for b in m["content"] if b.get("type") == "tool_use"), None)
    return None


def agent(body: dict[str, Any]) -> Reply:
    """Bash once, Read once, then done (by how many tool turns the history has)."""
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turns == 0:
        return Reply("Listing.", (ToolCall("Bash", {"command": "make"}, id="toolu_1"),))
    if turns == 1:
        return Reply("", (ToolCall("Read", {"command": "missing.txt"}, id="toolu_2"),))
    return Reply("All done.")


def to_history(msg: anthropic.types.Message, *, thinking: bool = False) -> dict[str, Any]:
    content = [b.model_dump(exclude_none=True) for b in msg.content]
    return {"role": "assistant", "content": ([THINKING] if thinking else []) + content}


# ---------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
async def test_prefix_is_byte_stable_with_at_most_4_breakpoints_and_valid_pairing(start, fake, stream):
    rp = await start(agent)
    client = sdk(rp, "cc-session-1")
    history: list[dict[str, Any]] = [{"role": "user", "content": "build it"}]
    for results in (
        [{"type": "tool_result", "tool_use_id": "toolu_1", "content": BIG}],
        [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such file", "is_error": True}],
        None,
    ):
        msg = await ask(client, stream, system=system("2026-12-03"), messages=marked(history))
        history.append(
            to_history(msg, thinking=results is not None and results[0]["tool_use_id"] == "toolu_1")
        )
        if results is not None:
            history.append({"role": "user", "content": results})
    assert msg.content[0].text == "All done."
    reqs = fake.messages_requests()
    assert len(reqs) == 3
    blocks = [anthropic_blocks(r.body)[0] for r in reqs]
    for r, prev, cur in zip(reqs[1:], blocks, blocks[1:]):
        assert cur[: len(prev)] == prev, "each upstream prompt extends the previous one"
        assert r.cached_tokens == sum(len(b) for b in prev) // 4, "the whole previous prompt is a cache read"
    for r in reqs:
        assert 1 <= breakpoints(r.body) <= 4 and pairing_errors(r.body["messages"]) == []
    final = reqs[-1].body
    # the client's markers are gone; TokenPilot's sit on the tools, the shared system and the last turns
    assert "cache_control" in final["tools"][-1]
    assert (
        final["system"][-1]["text"].startswith("<tokenpilot-values>")
        and "cache_control" not in final["system"][-1]
    )
    assert "cache_control" in final["system"][-2], "the breakpoint ends the part every session shares"
    assert "cache_control" in final["messages"][-1]["content"][-1]
    # the thinking block passed untouched; is_error kept; the big output reduced, with a handle
    assert THINKING in final["messages"][1]["content"]
    results = [b for m in final["messages"] for b in m["content"] if b.get("type") == "tool_result"]
    assert results[1]["is_error"] is True and results[1]["content"] == "no such file"
    assert len(results[0]["content"]) < len(BIG) / 2 and "art_" in results[0]["content"]
    assert msg.usage.cache_read_input_tokens == reqs[-1].cached_tokens > 0
    assert "cc-session-1" in rp.proxy.stats and rp.proxy.stats["cc-session-1"].calls == 3


async def test_two_sessions_share_system_and_tools_bytes(start, fake):
    rp = await start()
    for session, date in (("s-a", "2026-12-03"), ("s-b", "2026-12-09")):
        await ask(
            sdk(rp, session),
            False,
            system=system(date),
            messages=[{"role": "user", "content": "hi " + session}],
        )
    a, b = (r.body for r in fake.messages_requests())
    assert json.dumps(a["tools"]) == json.dumps(b["tools"])
    shared = [i for i, blk in enumerate(a["system"]) if "cache_control" in blk]
    assert shared, "a breakpoint ends the system part the sessions share"
    n = shared[0] + 1
    assert json.dumps(a["system"][:n]) == json.dumps(b["system"][:n])
    assert "2026-12-03" not in json.dumps(a["system"][:n]), "the date moved out of the shared part"
    assert fake.messages_requests()[1].cached_tokens > 0, "session b reads session a's cached system"


async def test_count_tokens_is_the_managed_size_and_commits_nothing(start, fake):
    rp = await start()
    client = sdk(rp, "count-1")
    history = [
        {"role": "user", "content": "build it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": BIG}]},
    ]
    got = await client.messages.count_tokens(
        model=MODEL, system=system("2026-12-03"), tools=TOOLS, messages=marked(history)
    )
    raw = {"system": system("2026-12-03"), "tools": TOOLS, "messages": history}
    raw_tokens = sum(len(b) for b in anthropic_blocks(raw)[0]) // 4
    assert got.input_tokens < raw_tokens / 2, "the big output is counted reduced"
    (req,) = fake.count_requests()
    assert breakpoints(req.body) <= 4 and "max_tokens" not in req.body
    assert "count-1" not in rp.proxy.pilot.session_ids and "count-1" not in rp.proxy.stats
    # the real call later sends what was counted
    await ask(client, False, system=system("2026-12-03"), messages=marked(history))
    sent = fake.messages_requests()[0].body
    assert anthropic_blocks(sent)[0] == anthropic_blocks(req.body)[0]


@pytest.mark.parametrize("stream", [False, True])
async def test_recall_through_the_tool_is_byte_exact(start, fake, stream):
    seen: list[dict[str, Any]] = []

    def model(body: dict[str, Any]) -> Reply:
        seen.append(body)
        last = body["messages"][-1]["content"]
        result = next(b for b in last if b.get("type") == "tool_result")
        if result["tool_use_id"] == "toolu_1":
            aid = result["content"].split('artifact_id="', 1)[1].split('"', 1)[0]
            assert any(t["name"] == "recall_artifact" for t in body["tools"])
            return Reply(
                "Let me read all of it.", (ToolCall("recall_artifact", {"artifact_id": aid}, id="toolu_r"),)
            )
        return Reply(f"The build printed {len(result['content'].split(chr(10), 1)[1])} chars.")

    rp = await start(model)
    history = [
        {"role": "user", "content": "build it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": BIG}]},
    ]
    msg = await ask(sdk(rp, "recall-1"), stream, system=system("2026-12-03"), messages=marked(history))
    assert [b.type for b in msg.content] == ["text", "text"], "the recall exchange stays inside the proxy"
    assert msg.content[0].text == "Let me read all of it."
    assert msg.content[1].text == f"The build printed {len(BIG)} chars."
    first, second = fake.messages_requests()
    answer = second.body["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == "toolu_r" and "is_error" not in answer
    assert answer["content"].split("\n", 1)[1] == BIG, "the recalled text is the original, byte for byte"
    assert second.body["messages"][:-2] == first.body["messages"]
    assert breakpoints(second.body) <= 4 and pairing_errors(second.body["messages"]) == []


async def test_recall_next_to_another_tool_defers_that_tool(start, fake):
    def model(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]["content"][0]
        if last.get("tool_use_id") == "toolu_1":
            aid = last["content"].split('artifact_id="', 1)[1].split('"', 1)[0]
            return Reply(
                "",
                (
                    ToolCall("recall_artifact", {"artifact_id": aid}, id="r1"),
                    ToolCall("Bash", {"command": "ls"}, id="b1"),
                ),
            )
        return Reply("ok")

    rp = await start(model)
    history = [
        {"role": "user", "content": "build it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": BIG}]},
    ]
    msg = await ask(sdk(rp, "defer-1"), True, system=system("2026-12-03"), messages=history)
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == "ok"
    answers = fake.messages_requests()[1].body["messages"][-1]["content"]
    assert [a["tool_use_id"] for a in answers] == ["r1", "b1"]
    assert answers[1]["is_error"] is True and "not run" in answers[1]["content"]


# ---------------------------------------------------------------------------
# Translation and session ids
# ---------------------------------------------------------------------------
EVERY_BLOCK = {
    "system": [{"type": "text", "text": "sys one"}, {"type": "text", "text": "sys two"}],
    "tools": [TOOLS[0], {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}},
        ]},
        {"role": "assistant", "content": [
            THINKING,
            {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
            {"type": "text", "text": "see [1]", "citations": [{"type": "char_location", "cited_text": "doc", "document_index": 0, "start_char_index": 0, "end_char_index": 3}]},
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls", "n": [1, 2.5, None]}},
            {"type": "tool_use", "id": "t2", "name": "Bash", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "a.txt"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/x.png"}},
            ]},
            {"type": "tool_result", "tool_use_id": "t2", "content": "denied", "is_error": True},
            {"type": "text", "text": "and now?"},
        ]},
    ],
}  # fmt: skip


def test_translation_loses_nothing():
    history, tools = to_core(EVERY_BLOCK)
    prepared = TokenPilot(Config(passes=()), lifecycle=False).prepare(history, tools, session_id="x")
    body = render(prepared)

    def unmarked(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: unmarked(v) for k, v in x.items() if k != "cache_control"}
        return [unmarked(v) for v in x] if isinstance(x, list) else x

    assert unmarked(body["system"]) == EVERY_BLOCK["system"]
    assert unmarked(body["messages"]) == EVERY_BLOCK["messages"]
    assert [t for t in unmarked(body["tools"]) if t["name"] != "recall_artifact"] == EVERY_BLOCK["tools"]
    assert breakpoints(body) <= 4 and pairing_errors(body["messages"]) == []


def test_client_markers_are_folded_into_at_most_four():
    many = json.loads(json.dumps(EVERY_BLOCK))
    for m in many["messages"]:
        for b in m["content"]:
            if b["type"] not in ("thinking", "redacted_thinking"):
                b["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    assert breakpoints(many) > 4
    history, tools = to_core(many)
    body = render(TokenPilot(Config(), lifecycle=False).prepare(history, tools, session_id="y"),
                  {"type": "ephemeral", "ttl": "1h"})  # fmt: skip
    found = [b["cache_control"] for m in body["messages"] for b in m["content"] if "cache_control" in b]
    assert 1 <= breakpoints(body) <= 4 and all(c == {"type": "ephemeral", "ttl": "1h"} for c in found)


@pytest.mark.parametrize(
    "body,headers,want",
    [
        ({}, {"x-claude-code-session-id": "abc-123"}, "abc-123"),
        (
            {
                "metadata": {
                    "user_id": json.dumps({"device_id": "d", "account_uuid": "", "session_id": "s-json"})
                }
            },
            {},
            "s-json",
        ),
        ({"metadata": {"user_id": "user_0f0f_account__session_57a1-uuid"}}, {}, "57a1-uuid"),
        ({"metadata": {"user_id": "plain-user"}}, {}, None),
        ({}, {}, None),
    ],
)
def test_session_id_from_what_claude_code_sends(body, headers, want):
    assert session_hint(body, headers) == want


async def test_without_a_session_the_id_is_derived_and_upstream_faults_come_back(start, fake, tmp_path):
    rp = await start()
    client = anthropic.AsyncAnthropic(base_url=rp.url, api_key="sk-test", max_retries=0)
    await ask(client, False, system=system("2026-12-03"), messages=[{"role": "user", "content": "hi"}])
    (sid,) = rp.proxy.stats
    assert sid.startswith("s_"), "no session header or metadata: the conversation's derived id"
    got = fake.messages_requests()[0].headers
    assert "sk-test" in (got.get("x-api-key"), got.get("Authorization", "").removeprefix("Bearer "))
    assert got["anthropic-version"], "the client's API version is passed on"
    # six client markers: Anthropic would refuse them; the upstream gets TokenPilot's, at most 4
    many = [{"type": "text", "text": f"p{i}", "cache_control": {"type": "ephemeral"}} for i in range(6)]
    await client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": many}])
    assert breakpoints(fake.messages_requests()[1].body) <= 4
    # an unreachable upstream is a clean 502
    await fake.close()
    with pytest.raises(anthropic.APIStatusError) as err:
        await ask(client, True, system=system("2026-12-03"), messages=[{"role": "user", "content": "hi"}])
    assert err.value.status_code == 502


# ---------------------------------------------------------------------------
# Pairing and breakpoints after reductions and evictions (random sessions)
# ---------------------------------------------------------------------------
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(chat_session(), st.booleans())
def test_pairing_and_breakpoints_hold_after_reductions_and_evictions(msgs, windowed):
    """Claude Code-shaped bodies of random sessions (parallel calls, big and repeated outputs),
    managed with eviction every turn: every body keeps Anthropic's pairing rules and at most
    4 breakpoints, never on a thinking block; between evictions each extends the previous."""
    window = WindowRule(trigger_tokens=300, keep_calls=2) if windowed else LifecycleConfig().window
    tp = TokenPilot(
        lifecycle=LifecycleConfig(batch_turns=1, schedule="inline", cost_gate=False, window=window)
    )
    prev: list[str] | None = None
    for k in call_points(msgs):
        body = to_anthropic(msgs[:k], STRATEGY_TOOLS)
        history, tools = to_core(body)
        prepared = tp.prepare(history, tools, session_id="s")
        out = render(prepared)
        assert pairing_errors(out["messages"]) == [], out["messages"]
        assert 1 <= breakpoints(out) <= 4
        marked = [b for m in out["messages"] for b in m["content"] if "cache_control" in b]
        assert all(b["type"] not in ("thinking", "redacted_thinking") for b in marked)
        blocks = anthropic_blocks(out)[0]
        if (
            prev is not None
            and prepared.stats.prefix_break is None
            and prepared.tail_start == len(prepared.messages)
        ):
            assert blocks[: len(prev)] == prev
        prev = blocks if prepared.tail_start == len(prepared.messages) else None


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_lists_recall_artifact_runs_it_itself(start, fake, stream):
    """Like OpenClaw's plugin on the chat path: the call goes to the client, not into the proxy."""
    own = {"name": "recall_artifact", "description": "mine", "input_schema": {"type": "object"}}
    rp = await start(
        lambda body: Reply("", (ToolCall("recall_artifact", {"artifact_id": "art_x"}, id="r9"),))
    )
    msg = await ask(
        sdk(rp, "own-recall"), stream, tools=[*TOOLS, own], messages=[{"role": "user", "content": "hi"}]
    )
    assert [(b.type, b.name) for b in msg.content] == [("tool_use", "recall_artifact")]
    assert msg.stop_reason == "tool_use" and len(fake.messages_requests()) == 1


def test_usage_of_each_api_is_counted_as_prompt_and_cache_reads():
    st = SessionStats()
    st.record_usage({"input_tokens": 10, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 3000,
                     "output_tokens": 7})  # fmt: skip
    assert (st.prompt_tokens, st.cached_tokens, st.output_tokens) == (3210, 3000, 7)
    st.record_usage(
        {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 1280}, "output_tokens": 5}
    )
    assert (st.prompt_tokens, st.cached_tokens, st.output_tokens) == (4710, 4280, 12)
    st.record_usage(
        {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens": 1}
    )
    assert (st.prompt_tokens, st.cached_tokens, st.usage_reports) == (4810, 4280, 3)
