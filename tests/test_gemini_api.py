"""The Gemini API through the proxy (`/v1beta/models/{model}:generateContent`,
`:streamGenerateContent`, `:countTokens`), driven by the official google-genai SDK and by
raw HTTP, against `FakeGemini`, which refuses what Gemini refuses where TokenPilot could
cause it (a call turn answered by another number of responses, an explicit cache next to
tools) and reports implicit cache reads by prefix.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from google import genai
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpilot.ingest.stabilize import is_recall_tool
from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.demo import FakeGemini, Reply, ToolCall, gemini_prompt_text
from tokenpilot_proxy.gemini_render import contents_from_core, tools_from_core, upstream_body
from tokenpilot_proxy.gemini_wire import check_body, to_core
from tokenpilot_proxy.server import RunningProxy
from tokenpilot_proxy.sessions import SessionStats

MODEL = "gemini-2.5-flash"
RULES = "\n".join(f"- rule {i}: prefer small diffs and run the tests in tests/{i}" for i in range(120))
BIG = "".join(f"line {i:05d}: " + "output of a long build " * 4 + "\n" for i in range(1500))  # ~150 KB
SHELL = {
    "name": "run_shell_command",
    "description": "Runs a shell command. " * 30,
    "parametersJsonSchema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


def system(date: str) -> str:
    return f"You are Gemini CLI, an interactive agent.\nToday's date is {date}.\n{RULES}"


@pytest.fixture
async def fake():
    async with FakeGemini() as f:
        yield f


@pytest.fixture
def start(start_proxy, fake):
    """`await start(responder)`: the proxy in front of `fake`, which answers with `responder`."""

    async def go(responder: Callable[[dict[str, Any]], Reply] | None = None) -> RunningProxy:
        fake.responder = responder
        return await start_proxy(fake.url)

    return go


def built() -> list[dict[str, Any]]:
    """A conversation whose last turn is a long build log (what TokenPilot reduces)."""
    call = {"functionCall": {"name": "run_shell_command", "args": {"command": "make"}}}
    result = {"functionResponse": {"name": "run_shell_command", "response": {"output": BIG}}}
    return [
        {"role": "user", "parts": [{"text": "build it"}]},
        {"role": "model", "parts": [call]},
        {"role": "user", "parts": [result]},
    ]


def sdk(rp: RunningProxy) -> genai.Client:
    return genai.Client(api_key="gm-test", http_options=types.HttpOptions(base_url=rp.url))


def config(
    date: str = "2026-12-07", tools: list[dict[str, Any]] | None = None
) -> types.GenerateContentConfig:
    decls = [types.FunctionDeclaration(**_snake(d)) for d in (tools if tools is not None else [SHELL])]
    return types.GenerateContentConfig(
        system_instruction=system(date),
        tools=[types.Tool(function_declarations=decls)] if decls else None,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )


def _snake(d: dict[str, Any]) -> dict[str, Any]:
    return {"parameters_json_schema" if k == "parametersJsonSchema" else k: v for k, v in d.items()}


async def ask(
    client: genai.Client, stream: bool, contents: list[Any], **kw: Any
) -> types.GenerateContentResponse:
    """One call; streamed, the chunks' parts gathered into one answer (as Gemini CLI does)."""
    cfg = kw.pop("config", None) or config()
    if not stream:
        return await client.aio.models.generate_content(model=MODEL, contents=contents, config=cfg)
    parts: list[types.Part] = []
    last: types.GenerateContentResponse | None = None
    async for chunk in await client.aio.models.generate_content_stream(
        model=MODEL, contents=contents, config=cfg
    ):
        last = chunk
        if chunk.candidates and chunk.candidates[0].content and chunk.candidates[0].content.parts:
            parts += chunk.candidates[0].content.parts
    assert last is not None
    return types.GenerateContentResponse(
        candidates=[types.Candidate(content=types.Content(role="model", parts=parts))],
        usage_metadata=last.usage_metadata,
    )


def calls_in(body: dict[str, Any]) -> int:
    return sum(1 for c in body["contents"] if c.get("role") == "model")


def shell_agent(n_calls: int) -> Callable[[dict[str, Any]], Reply]:
    """Runs a command at each turn until `n_calls` calls were made, then answers."""

    def model(body: dict[str, Any]) -> Reply:
        k = calls_in(body)
        if k + 1 >= n_calls:
            return Reply("All done.")
        return Reply("", (ToolCall("run_shell_command", {"command": f"step {k}"}),))

    return model


def answer(resp: types.GenerateContentResponse, outputs: Callable[[int], str], k: int) -> types.Content:
    """The user turn answering each call of `resp`, as Gemini CLI sends it."""
    parts = [
        types.Part(
            function_response=types.FunctionResponse(
                id=f"{p.function_call.name}-{k}-{j}",
                name=p.function_call.name,
                response={"output": outputs(k)},
            )
        )
        for j, p in enumerate(resp.candidates[0].content.parts)
        if p.function_call
    ]
    return types.Content(role="user", parts=parts)


# ---------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
async def test_ten_sdk_calls_extend_the_last_byte_for_byte_with_usage_passed_back(start, fake, stream):
    fake.thought_signature = "c2lnbmF0dXJl"  # Gemini 3 signs its calls; the signature must come back
    rp = await start(shell_agent(10))
    client = sdk(rp)
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="build it")])]
    for k in range(10):
        resp = await ask(client, stream, contents)
        contents.append(resp.candidates[0].content)
        if k < 9:
            contents.append(answer(resp, lambda k: BIG if k == 0 else f"ok {k}", k))
        got = resp.usage_metadata
        assert got.prompt_token_count == fake.requests[-1].prompt_tokens
        assert (got.cached_content_token_count or 0) == fake.requests[-1].cached_tokens
    assert resp.text == "All done."
    reqs = fake.generate_requests()
    assert len(reqs) == 10
    for prev, cur in zip(reqs, reqs[1:]):
        assert cur.prompt.startswith(prev.prompt), "each upstream prompt extends the previous one"
        assert cur.cached_tokens == len(prev.prompt) // 4, "the whole previous prompt is read from cache"
    final = reqs[-1].body
    outputs = [
        p["functionResponse"] for c in final["contents"] for p in c["parts"] if "functionResponse" in p
    ]
    assert len(outputs) == 9 and "art_" in outputs[0]["response"]["output"]
    assert len(outputs[0]["response"]["output"]) < len(BIG) / 2, "the big output was reduced"
    assert [o["response"]["output"] for o in outputs[1:]] == [f"ok {k}" for k in range(1, 9)]
    assert all(o["id"] == f"run_shell_command-{k}-0" for k, o in enumerate(outputs)), "response ids kept"
    calls = [p for c in final["contents"] for p in c["parts"] if "functionCall" in p]
    assert all(p["thoughtSignature"] == "c2lnbmF0dXJl" and "id" not in p["functionCall"] for p in calls)
    decls = final["tools"][0]["functionDeclarations"]
    assert sorted(d["name"] for d in decls) == ["recall_artifact", "run_shell_command"]
    shared = final["systemInstruction"]["parts"][0]["text"].split("<tokenpilot-values>")[0]
    assert "2026-12-07" not in shared and "{{TP_DATE" in shared, "the date is a placeholder"
    (stats,) = rp.proxy.stats.values()
    assert stats.calls == 10 and stats.cached_tokens == sum(r.cached_tokens for r in reqs) > 0
    assert stats.prompt_tokens == sum(r.prompt_tokens for r in reqs)
    async with aiohttp.ClientSession() as s, s.get(f"{rp.url}/metrics") as r:
        metrics = await r.text()
    cached = [ln for ln in metrics.splitlines() if ln.startswith("tokenpilot_cached_tokens")]
    assert any(float(ln.rsplit(" ", 1)[1]) == stats.cached_tokens for ln in cached), cached


@pytest.mark.parametrize("stream", [False, True])
async def test_recall_is_answered_inside_the_proxy_byte_exact(start, fake, stream):
    def model(body: dict[str, Any]) -> Reply:
        last = body["contents"][-1]["parts"][-1]
        out = last.get("functionResponse", {}).get("response", {}).get("output", "")
        if last["functionResponse"]["name"] == "run_shell_command":
            aid = out.split('artifact_id="', 1)[1].split('"', 1)[0]
            return Reply("Reading all of it.", (ToolCall("recall_artifact", {"artifact_id": aid}),))
        return Reply(f"The build printed {len(out.split(chr(10), 1)[1])} chars.")

    rp = await start(model)
    contents = built()
    resp = await ask(sdk(rp), stream, contents)
    texts = [p.text for p in resp.candidates[0].content.parts]
    assert not any(p.function_call for p in resp.candidates[0].content.parts), (
        "the client never sees the recall"
    )
    assert "".join(texts) == f"Reading all of it.The build printed {len(BIG)} chars."
    first, second = fake.generate_requests()
    recalled = second.body["contents"][-1]["parts"][0]["functionResponse"]
    assert recalled["name"] == "recall_artifact"
    assert recalled["response"]["output"].split("\n", 1)[1] == BIG, "the original, byte for byte"
    assert second.body["contents"][:-2] == first.body["contents"]


async def test_a_recall_next_to_another_call_defers_that_call(start, fake):
    def model(body: dict[str, Any]) -> Reply:
        last = body["contents"][-1]["parts"][0]["functionResponse"]
        if last["name"] == "run_shell_command":
            aid = last["response"]["output"].split('artifact_id="', 1)[1].split('"', 1)[0]
            return Reply(
                "", (ToolCall("recall_artifact", {"artifact_id": aid}), ToolCall("run_shell_command", {}))
            )
        return Reply("ok")

    rp = await start(model)
    contents = built()
    await ask(sdk(rp), False, contents)
    answers = fake.generate_requests()[1].body["contents"][-1]["parts"]
    assert [a["functionResponse"]["name"] for a in answers] == ["recall_artifact", "run_shell_command"]
    assert "not run" in answers[1]["functionResponse"]["response"]["error"]


async def test_count_tokens_counts_the_managed_request_and_commits_nothing(start, fake):
    rp = await start()
    contents = built()
    got = await sdk(rp).aio.models.count_tokens(model=MODEL, contents=contents)
    assert got.total_tokens < len(BIG) // 4 / 2, "the big output is counted reduced"
    (req,) = fake.requests
    assert set(req.body) == {"contents"}
    assert not rp.proxy.pilot.session_ids and not rp.proxy.stats, "a count commits nothing"


async def test_cached_content_is_forwarded_untouched(start, fake):
    rp = await start()
    body = {
        "contents": [{"role": "user", "parts": [{"text": "go on"}]}],
        "cachedContent": "cachedContents/abc123",
        "generationConfig": {"temperature": 0},
    }
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{rp.url}/v1beta/models/{MODEL}:generateContent", json=body,
                          headers={"x-goog-api-key": "k"}) as r:  # fmt: skip
            assert r.status == 200
    assert fake.requests[0].body == body


BAD_BODIES = [
    (b"not json", "JSON"),
    (b"\xff\xfe{}", None),
    (b"[1, 2]", "JSON object"),
    (b'{"contents": 3}', "contents"),
    (b'{"contents": [{"role": "user", "parts": "hi"}]}', "parts"),
    (b'{"contents": [{"role": "user", "parts": [7]}]}', "parts[0]"),
    (b'{"contents": [{"role": 5, "parts": []}]}', "role"),
    (b'{"contents": [{"parts": [{"functionCall": {"args": {}}}]}]}', "functionCall.name"),
    (b'{"contents": [{"parts": [{"functionResponse": {"name": "x", "response": [1]}}]}]}', "response"),
    (b'{"contents": [{"parts": [{"inlineData": {"mimeType": 1, "data": "x"}}]}]}', "inlineData"),
    (b'{"contents": [], "tools": [{"functionDeclarations": [{"name": 1}]}]}', "functionDeclarations"),
    (b'{"contents": [], "systemInstruction": {"parts": 1}}', "systemInstruction"),
    (b'{"contents": [], "cachedContent": 5}', "cachedContent"),
    (b"[" * 5000 + b"]" * 5000, None),
]


@pytest.mark.parametrize(("raw", "says"), BAD_BODIES)
@pytest.mark.parametrize("method", ["generateContent", "streamGenerateContent", "countTokens"])
async def test_hostile_bodies_get_400_in_googles_shape(start, fake, raw, says, method):
    rp = await start()
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{rp.url}/v1beta/models/{MODEL}:{method}?alt=sse", data=raw,
                          headers={"x-goog-api-key": "k", "Content-Type": "application/json"}) as r:  # fmt: skip
            body = await r.json()
    assert r.status == 400, body
    assert body["error"]["code"] == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    assert says is None or says in body["error"]["message"]
    assert not fake.requests


async def test_an_unknown_method_is_404_and_upstream_errors_pass_as_they_came(start, fake):
    rp = await start()
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{rp.url}/v1beta/models/{MODEL}:embedContent", json={}) as r:
            body = await r.json()
        assert r.status == 404 and body["error"]["status"] == "NOT_FOUND"
        ok = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        async with s.post(f"{rp.url}/v1beta/models/{MODEL}:generateContent", json=ok) as r:  # no key
            body = await r.json()
        assert r.status == 403 and body["error"]["status"] == "PERMISSION_DENIED"


async def test_a_client_listing_the_mcp_recall_tool_gets_no_second_one(start, fake):
    rp = await start()
    mcp_tool = {"name": "mcp_tokenpilot_recall_artifact", "parametersJsonSchema": {"type": "object"}}
    await ask(
        sdk(rp), False, [{"role": "user", "parts": [{"text": "hi"}]}], config=config(tools=[SHELL, mcp_tool])
    )
    names = [d["name"] for d in fake.requests[0].body["tools"][0]["functionDeclarations"]]
    assert sorted(names) == ["mcp_tokenpilot_recall_artifact", "run_shell_command"]
    assert is_recall_tool("mcp_tokenpilot_recall_artifact") and not is_recall_tool("mcp_recall_artifacts")


def test_usage_metadata_is_counted_with_thoughts_as_output():
    s = SessionStats()
    s.record_usage({"promptTokenCount": 5000, "cachedContentTokenCount": 4096, "candidatesTokenCount": 30,
                    "thoughtsTokenCount": 70, "totalTokenCount": 5100})  # fmt: skip
    assert (s.prompt_tokens, s.cached_tokens, s.output_tokens) == (5000, 4096, 100)


# ---------------------------------------------------------------------------
# Translation: nothing lost
# ---------------------------------------------------------------------------
_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_args = st.dictionaries(st.sampled_from("abc"), st.one_of(st.integers(), _text), max_size=2)
_user_part = st.one_of(
    _text.map(lambda t: {"text": t}),
    st.just({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}),
    st.just({"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}}),
    st.just({"fileData": {"fileUri": "gs://b/x.txt", "mimeType": "text/plain"}}),
)
_model_part = st.one_of(
    _text.map(lambda t: {"text": t}),
    _text.map(lambda t: {"text": t, "thought": True}),
    _text.map(lambda t: {"text": t, "thoughtSignature": "c2ln"}),
)
_call = st.tuples(st.sampled_from(["run_shell_command", "read_file"]), _args, st.booleans(), st.booleans())
_response = st.one_of(
    _text.map(lambda t: {"output": t}), _text.map(lambda t: {"error": t}), _args, st.just({})
)


@st.composite
def gemini_bodies(draw: st.DrawFn) -> dict[str, Any]:
    contents: list[dict[str, Any]] = []
    for turn in range(draw(st.integers(1, 5))):
        contents.append({"role": "user", "parts": draw(st.lists(_user_part, min_size=1, max_size=3))})
        calls = draw(st.lists(_call, max_size=3))
        parts = draw(st.lists(_model_part, max_size=2))
        for k, (name, args, own_id, signed) in enumerate(calls):
            fc: dict[str, Any] = {"name": name, "args": args, **({"id": f"c{turn}{k}"} if own_id else {})}
            parts.append({"functionCall": fc, **({"thoughtSignature": "c2ln"} if signed else {})})
        contents.append({"role": "model", "parts": parts or [{"text": "ok"}]})
        if calls:
            answers = [{"functionResponse": {"name": name, "response": draw(_response),
                                             **({"id": f"c{turn}{k}"} if own else {})}}
                       for k, (name, _, own, _) in enumerate(calls)]  # fmt: skip
            contents.append({"role": "user", "parts": answers + draw(st.lists(_user_part, max_size=1))})
    body: dict[str, Any] = {"contents": contents, "generationConfig": {"temperature": 0}}
    if draw(st.booleans()):
        body["systemInstruction"] = {
            "parts": [{"text": t} for t in draw(st.lists(_text, min_size=1, max_size=2))]
        }
    if draw(st.booleans()):
        body["tools"] = [{"functionDeclarations": [SHELL, {"name": "read_file", "parameters": {"type": "object"}}]},
                         {"googleSearch": {}}]  # fmt: skip
    return body


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gemini_bodies())
def test_translation_round_trips_every_body(body):
    check_body(body)
    messages, tools = to_core(copy.deepcopy(body))
    system_instruction, contents = contents_from_core(messages)
    assert contents == body["contents"]
    assert system_instruction == body.get("systemInstruction")
    assert (tools_from_core(tools) if tools is not None else None) == body.get("tools")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gemini_bodies(), st.integers(0, 4))
def test_through_the_core_every_call_is_answered_and_the_prefix_only_grows(body, cut):
    """The default facade on a growing conversation: each managed body keeps Gemini's
    call/response count, and its contents extend the previous ones (no eviction runs this
    short; `recall_artifact` may join the tools once, which the core counts as a break)."""
    from tokenpilot import TokenPilot
    from tokenpilot_proxy.demo.gemini_upstream import call_count_errors

    pilot = TokenPilot()
    prev = ""
    for n in sorted({max(1, len(body["contents"]) - cut), len(body["contents"])}):
        part = {**body, "contents": body["contents"][:n]}
        if part["contents"][-1].get("role") == "model":
            continue  # a client sends after its own turn, never after the model's
        messages, tools = to_core(copy.deepcopy(part))
        out = upstream_body(part, pilot.prepare(messages, tools, session_id="s"))
        assert call_count_errors(out["contents"]) == []
        text = gemini_prompt_text({"contents": out["contents"]})
        assert text.startswith(prev)
        prev = text


# ---------------------------------------------------------------------------
# Hostile bodies, generated: never a 5xx
# ---------------------------------------------------------------------------
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), _text)
_loose_part = st.one_of(
    _scalar,
    st.fixed_dictionaries({}, optional={"text": _scalar, "thought": _scalar, "thoughtSignature": _scalar}),
    st.fixed_dictionaries(
        {
            "functionCall": st.one_of(
                _scalar,
                st.fixed_dictionaries(
                    {}, optional={"name": _scalar, "args": st.one_of(_scalar, _args), "id": _scalar}
                ),
            )
        }
    ),  # fmt: skip
    st.fixed_dictionaries(
        {
            "functionResponse": st.one_of(
                _scalar,
                st.fixed_dictionaries(
                    {}, optional={"name": _scalar, "response": st.one_of(_scalar, _response), "id": _scalar}
                ),
            )
        }
    ),  # fmt: skip
    st.fixed_dictionaries(
        {
            "inlineData": st.one_of(
                _scalar, st.fixed_dictionaries({}, optional={"mimeType": _scalar, "data": _scalar})
            )
        }
    ),  # fmt: skip
)
_loose_content = st.one_of(
    _scalar,
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.one_of(_scalar, st.sampled_from(["user", "model"])),
            "parts": st.one_of(_scalar, st.lists(_loose_part, max_size=4)),
        },
    ),  # fmt: skip
)
_loose_body = st.one_of(
    _scalar,
    gemini_bodies(),
    gemini_bodies().map(lambda b: {"generateContentRequest": b}),
    st.fixed_dictionaries(
        {},
        optional={
            "contents": st.one_of(_scalar, st.lists(_loose_content, max_size=5)),
            "systemInstruction": st.one_of(_scalar, _loose_content),
            "tools": st.one_of(
                _scalar,
                st.lists(
                    st.one_of(
                        _scalar,
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "functionDeclarations": st.one_of(
                                    _scalar,
                                    st.lists(
                                        st.one_of(
                                            _scalar,
                                            st.fixed_dictionaries(
                                                {}, optional={"name": _scalar, "parameters": _scalar}
                                            ),
                                        ),
                                        max_size=2,
                                    ),
                                )
                            },
                        ),
                    ),
                    max_size=2,
                ),
            ),  # fmt: skip
            "cachedContent": _scalar,
            "generateContentRequest": _scalar,
        },
    ),
)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tokenpilot_proxy.demo import LoopThread

    loop = LoopThread()
    fake = FakeGemini(responder=lambda body: Reply("fine"))
    loop.run(fake.start())
    store = tmp_path_factory.mktemp("store")
    settings = ProxySettings(upstream=fake.url, port=0, store_dir=store, state_dir=None, flush_interval_s=0)
    rp = loop.run(RunningProxy(settings, shutdown_timeout_s=1).start())
    yield rp.url
    loop.run(rp.stop())
    loop.run(fake.close())
    loop.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_loose_body, method=st.sampled_from(["generateContent", "streamGenerateContent", "countTokens"]))
def test_no_generated_body_gets_a_5xx(served, body, method):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        f"{served}/v1beta/models/{MODEL}:{method}?alt=sse", data=json.dumps(body).encode(),
        headers={"x-goog-api-key": "k", "Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - the local proxy
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    assert status < 500, raw[:500]
    if status >= 400:
        err = json.loads(raw)["error"]
        assert isinstance(err["message"], str) and err["code"] == status and "status" in err


async def test_snake_case_fields_as_googles_curl_examples_write_them_are_managed(start, fake):
    """Google's JSON takes proto field names too (`system_instruction`, `function_response`);
    they are read like the SDKs' camelCase, and an argument or schema keeps its own keys."""
    rp = await start()
    call = {"function_call": {"name": "run_shell_command", "args": {"file_data": "x", "mime_type": "y"}}}
    result = {"function_response": {"name": "run_shell_command", "response": {"output": BIG}}}
    body = {
        "system_instruction": {"parts": [{"text": system("2026-12-07")}]},
        "contents": [
            {"role": "user", "parts": [{"text": "build it"}]},
            {"role": "model", "parts": [call]},
            {"role": "user", "parts": [result]},
        ],
        "tools": [{"function_declarations": [{**_snake(SHELL), "parameters_json_schema": {
            "type": "object", "properties": {"mime_type": {"type": "string"}}}}]}],
    }  # fmt: skip
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{rp.url}/v1beta/models/{MODEL}:generateContent", json=body,
                          headers={"x-goog-api-key": "k"}) as r:  # fmt: skip
            assert r.status == 200, await r.text()
    sent = fake.requests[0].body
    assert "{{TP_DATE" in sent["systemInstruction"]["parts"][0]["text"] and "system_instruction" not in sent
    assert sent["contents"][1]["parts"][0]["functionCall"]["args"] == {"file_data": "x", "mime_type": "y"}
    output = sent["contents"][2]["parts"][0]["functionResponse"]["response"]["output"]
    assert "art_" in output and len(output) < len(BIG) / 2, "the snake_case output was reduced"
    decl = next(d for d in sent["tools"][0]["functionDeclarations"] if d["name"] == "run_shell_command")
    assert decl["parametersJsonSchema"]["properties"] == {"mime_type": {"type": "string"}}


async def test_a_snake_case_cached_content_is_forwarded_unmanaged(start, fake):
    rp = await start()
    body = {
        "contents": [{"role": "user", "parts": [{"text": "go on"}]}],
        "cached_content": "cachedContents/x",
    }
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{rp.url}/v1beta/models/{MODEL}:generateContent", json=body,
                          headers={"x-goog-api-key": "k"}) as r:  # fmt: skip
            assert r.status == 200
    assert fake.requests[0].body == {"contents": body["contents"], "cachedContent": "cachedContents/x"}
