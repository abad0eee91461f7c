"""`/v1/responses` (OpenAI Responses) driven by the `openai` SDK, against the fake upstream.

Codex-shaped requests: `instructions`, the whole conversation as `input` items
(`store: false`), function tools, `prompt_cache_key`. The fake reports cached tokens
OpenAI's way (longest common prefix with an earlier prompt of the same key).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from tokenpilot import Config, TokenPilot
from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.demo import FakeUpstream, Reply, ToolCall
from tokenpilot_proxy.responses import from_core, to_core, tools_from_core
from tokenpilot_proxy.server import RunningProxy

MODEL = "gpt-fake"
RULES = "\n".join(f"- rule {i}: prefer small diffs and run the tests in tests/{i}" for i in range(120))
TOOLS = [
    {
        "type": "function",
        "name": name,
        "description": f"{name}: " + "runs things. " * 40,
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
        "strict": False,
    }
    for name in ("shell", "read_file")
]
BIG = "".join(f"line {i:05d}: " + "output of a long build " * 4 + "\n" for i in range(1500))  # ~150 KB
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB" + "x" * 64}


def instructions(date: str) -> str:
    return f"You are Codex, a coding agent. Today's date is {date}.\n{RULES}"


@pytest.fixture
async def fake():
    async with FakeUpstream() as f:
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


def sdk(rp: RunningProxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=rp.url + "/v1", api_key="sk-test", max_retries=0)


async def ask(client: openai.AsyncOpenAI, stream: bool, **kw: Any) -> dict[str, Any]:
    """The response as a dict: whole, or the `response.completed` of a stream (events checked)."""
    kw = {"model": MODEL, "tools": TOOLS, "store": False, **kw}
    if not stream:
        return (await client.responses.create(**kw)).model_dump(exclude_none=True)
    events = [e async for e in await client.responses.create(stream=True, **kw)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events].count("response.created") == 1 and events[-1].type == "response.completed"
    done = events[-1].response.model_dump(exclude_none=True)
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == list(range(len(done["output"]))), "one item per output index, in order"
    return done


def agent(body: dict[str, Any]) -> Reply:
    calls = sum(1 for x in body["input"] if x.get("type") == "function_call")
    if calls == 0:
        return Reply("Building.", (ToolCall("shell", {"command": "make"}, id="call_1"),))
    return Reply("All done.")


@pytest.mark.parametrize("stream", [False, True])
async def test_prefix_is_byte_stable_and_prompt_cache_key_kept(start, fake, stream):
    rp = await start(agent)
    client = sdk(rp)
    items: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "input_text", "text": "build it"}]}]
    first = await ask(
        client, stream, instructions=instructions("2026-12-03"), input=items, prompt_cache_key="codex-conv-1"
    )
    items += [REASONING, *first["output"]]
    items.append({"type": "function_call_output", "call_id": "call_1", "output": BIG})
    second = await ask(
        client, stream, instructions=instructions("2026-12-03"), input=items, prompt_cache_key="codex-conv-1"
    )
    assert second["output"][0]["content"][0]["text"] == "All done."
    a, b = fake.responses_requests()
    assert a.body["prompt_cache_key"] == b.body["prompt_cache_key"] == "codex-conv-1"
    assert b.prompt.startswith(a.prompt), "the second prompt extends the first"
    assert b.cached_tokens >= (len(a.prompt) // 4) // 128 * 128 - 128 > 0
    assert second["usage"]["input_tokens_details"]["cached_tokens"] == b.cached_tokens
    assert REASONING in b.body["input"], "reasoning items pass untouched"
    out = next(x for x in b.body["input"] if x.get("type") == "function_call_output")
    assert len(out["output"]) < len(BIG) / 2 and "art_" in out["output"]
    assert any(t["name"] == "recall_artifact" for t in b.body["tools"])
    calls = [x for x in b.body["input"] if x.get("type") == "function_call"]
    assert [c["call_id"] for c in calls] == [out["call_id"]], "each call keeps its one output"
    assert "codex-conv-1" in rp.proxy.stats and rp.proxy.stats["codex-conv-1"].calls == 2


async def test_without_a_key_the_session_id_is_the_key_and_sessions_share_the_prefix(start, fake):
    rp = await start()
    for date in ("2026-12-03", "2026-12-09"):
        await ask(sdk(rp), False, instructions=instructions(date), input="hello " + date)
    a, b = fake.responses_requests()
    assert a.body["prompt_cache_key"] and a.body["prompt_cache_key"] != b.body["prompt_cache_key"]
    assert json.dumps(a.body["tools"]) == json.dumps(b.body["tools"])
    shared_a, values_a = a.body["instructions"].split("<tokenpilot-values>")
    shared_b, values_b = b.body["instructions"].split("<tokenpilot-values>")
    assert shared_a == shared_b and "2026-12-03" not in shared_a, "only the values block at the end differs"
    assert "2026-12-03" in values_a and "2026-12-09" in values_b


@pytest.mark.parametrize("stream", [False, True])
async def test_recall_through_the_tool_is_byte_exact(start, fake, stream):
    def model(body: dict[str, Any]) -> Reply:
        out = [x for x in body["input"] if x.get("type") == "function_call_output"][-1]
        if out["call_id"] == "call_1":
            aid = out["output"].split('artifact_id="', 1)[1].split('"', 1)[0]
            return Reply("Reading it all.", (ToolCall("recall_artifact", {"artifact_id": aid}, id="call_r"),))
        return Reply(f"It printed {len(out['output'].split(chr(10), 1)[1])} chars.")

    rp = await start(model)
    items = [
        {"role": "user", "content": "build it"},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"command":"make"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": BIG},
    ]
    got = await ask(
        sdk(rp), stream, instructions=instructions("2026-12-03"), input=items, prompt_cache_key="k-recall"
    )
    texts = [c["text"] for x in got["output"] if x["type"] == "message" for c in x["content"]]
    assert texts == ["Reading it all.", f"It printed {len(BIG)} chars."]
    assert all(x["type"] == "message" for x in got["output"]), "the recall call stays inside the proxy"
    first, second = fake.responses_requests()
    answer = second.body["input"][-1]
    assert answer["type"] == "function_call_output" and answer["call_id"] == "call_r"
    assert answer["output"].split("\n", 1)[1] == BIG, "the recalled text is the original, byte for byte"
    assert second.body["input"][: len(first.body["input"])] == first.body["input"]
    assert second.body["prompt_cache_key"] == "k-recall"


def test_translation_loses_nothing():
    body = {
        "instructions": "be brief",
        "tools": TOOLS,
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandbox: on"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "https://e.com/a.png", "detail": "auto"}]},
            REASONING,
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "running", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "shell", "arguments": '{"command":"ls"}', "status": "completed"},
            {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "shell", "arguments": "{}", "status": "completed"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "denied"}]},
            {"type": "item_reference", "id": "ws_9"},
            {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c3", "name": "apply_patch",
             "input": "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch", "status": "completed"},
            {"type": "custom_tool_call_output", "call_id": "c3", "output": "Done!"},
        ],
    }  # fmt: skip
    body["tools"] = [
        *TOOLS,
        {"type": "web_search"},
        {"type": "custom", "name": "apply_patch", "format": {"type": "text"}},
    ]
    history, tools = to_core(body)
    prepared = TokenPilot(Config(passes=()), lifecycle=False).prepare(history, tools, session_id="r")
    instr, items = from_core(prepared.messages)
    assert instr == "be brief"
    assert items == body["input"]
    back = [t for t in tools_from_core(prepared.tools) if t.get("name") != "recall_artifact"]
    key = lambda t: t.get("name") or f"__{t['type']}"  # noqa: E731
    assert back == sorted(body["tools"], key=key), "the same tools, in the core's canonical order"


async def test_a_stored_response_continuation_is_forwarded_unmanaged(start, fake):
    rp = await start()
    items = [{"type": "function_call_output", "call_id": "call_1", "output": BIG}]
    await sdk(rp).responses.create(
        model=MODEL, previous_response_id="resp_prev", input=items, prompt_cache_key="k-prev"
    )
    (req,) = fake.responses_requests()
    assert req.body["input"] == items and "tools" not in req.body, "only new items: nothing to manage"
    assert req.body["prompt_cache_key"] == "k-prev" and req.body["previous_response_id"] == "resp_prev"
