"""A misbehaving Gemini upstream, through the proxy: what the client gets is Gemini's own
error or a clean one in Google's shape, a started stream ends with an error event, and
the next request is served.

`Raw` stands in for Gemini on 127.0.0.1: it answers each request with what a test
queued (a status and body, or stream chunks, optionally cut off), else a normal reply.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tokenpilot_proxy.wire import MAX_UPSTREAM_JSON_DEPTH

MODEL = "gemini-2.5-flash"
OK = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "fine"}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1, "totalTokenCount": 11},
}
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    chunks: list[bytes] = field(default_factory=list)  # a stream's raw bytes, written in order
    cut: bool = False  # drop the connection after the chunks


@dataclass
class Raw:
    queue: deque[Answer] = field(default_factory=deque)
    seen: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(json.loads(await request.read()))
        answer = self.queue.popleft() if self.queue else None
        if answer is None:
            if request.match_info["target"].endswith(":streamGenerateContent"):
                answer = Answer(chunks=[b"data: " + json.dumps(OK).encode() + b"\r\n\r\n"])
            else:
                answer = Answer(body=json.dumps(OK).encode())
        if not answer.chunks:
            return web.Response(status=answer.status, body=answer.body, content_type="application/json")
        resp = web.StreamResponse(status=answer.status, headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in answer.chunks:
            await resp.write(chunk)
        if answer.cut:
            assert request.transport is not None
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1beta/models/{target}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url


@pytest.fixture
async def raw():
    r = Raw()
    await r.start()
    yield r
    assert r._runner is not None
    await r._runner.cleanup()


@pytest.fixture
async def proxy(raw, start_proxy):
    return await start_proxy(raw.url)


async def post(proxy: Any, method: str, body: Any = BODY, query: str = "") -> tuple[int, str, bytes]:
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{proxy.url}/v1beta/models/{MODEL}:{method}{query}", json=body,
                          headers={"x-goog-api-key": "k"}) as r:  # fmt: skip
            return r.status, r.headers.get("Content-Type", ""), await r.read()


async def served_again(proxy: Any) -> None:
    status, _, body = await post(proxy, "generateContent")
    assert status == 200 and json.loads(body)["candidates"][0]["content"]["parts"][0]["text"] == "fine"


def events(raw_stream: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw_stream.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [ln[5:].strip() for ln in block.split(b"\n") if ln.startswith(b"data:")]
        if data:
            out.append(json.loads(b"\n".join(data)))
    return out


async def test_an_upstream_error_comes_back_as_gemini_said_it(raw, proxy):
    said = {"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}}
    raw.queue.append(Answer(status=429, body=json.dumps(said).encode()))
    status, _, body = await post(proxy, "generateContent")
    assert status == 429 and json.loads(body) == said
    await served_again(proxy)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html>bad gateway</html>", "not JSON"),
        (b"[" * (MAX_UPSTREAM_JSON_DEPTH + 10) + b"]" * (MAX_UPSTREAM_JSON_DEPTH + 10), "nested deeper"),
    ],
)
async def test_an_unreadable_200_is_a_502_in_googles_shape(raw, proxy, body, says):
    raw.queue.append(Answer(body=body))
    status, _, answer = await post(proxy, "generateContent")
    err = json.loads(answer)["error"]
    assert status == 502 and err["code"] == 502 and err["status"] == "UNAVAILABLE" and says in err["message"]
    await served_again(proxy)


@pytest.mark.parametrize("cut", [True, False], ids=["connection-dropped", "closed-unfinished"])
async def test_a_stream_that_stops_early_ends_with_an_error_event(raw, proxy, cut):
    first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Half an ans"}]}}]}
    raw.queue.append(Answer(chunks=[b"data: " + json.dumps(first).encode() + b"\r\n\r\n"], cut=cut))
    status, ctype, body = await post(proxy, "streamGenerateContent", query="?alt=sse")
    assert status == 200 and ctype.startswith("text/event-stream")
    got = events(body)
    assert got[0] == first, "what came before the failure was relayed as it came"
    err = got[-1]["error"]
    assert err["status"] in ("UNAVAILABLE", "DEADLINE_EXCEEDED") and "upstream" in err["message"]
    await served_again(proxy)


async def test_a_streamed_error_event_is_relayed_and_counted(raw, proxy):
    said = {"error": {"code": 500, "message": "An internal error has occurred", "status": "INTERNAL"}}
    raw.queue.append(Answer(chunks=[b"data: " + json.dumps(said).encode() + b"\r\n\r\n"]))
    status, _, body = await post(proxy, "streamGenerateContent", query="?alt=sse")
    assert status == 200 and events(body) == [said]
    (stats,) = proxy.proxy.stats.values()
    assert stats.errors == 1
    await served_again(proxy)


async def test_a_refused_prompt_ends_the_stream_cleanly(raw, proxy):
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 10}}
    raw.queue.append(Answer(chunks=[b"data: " + json.dumps(blocked).encode() + b"\r\n\r\n"]))
    status, _, body = await post(proxy, "streamGenerateContent", query="?alt=sse")
    assert status == 200 and events(body) == [blocked], "no error added: Gemini ended the answer itself"


async def test_a_recall_whose_next_turn_fails_ends_with_an_error(raw, proxy):
    """The model asks for a recall; the proxy answers it, and the upstream then fails: the
    client, which saw nothing of the recall, gets the failure."""
    big = "".join(f"line {i:05d}: output of a long build\n" for i in range(3000))
    history = [
        {"role": "user", "parts": [{"text": "build it"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command", "args": {"command": "make"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": big}}}]},
    ]  # fmt: skip
    status, _, _ = await post(proxy, "generateContent", {"contents": history})  # stores the original
    sent = raw.seen[-1]["contents"][-1]["parts"][0]["functionResponse"]["response"]["output"]
    aid = sent.split('artifact_id="', 1)[1].split('"', 1)[0]
    recall = {"functionCall": {"name": "recall_artifact", "args": {"artifact_id": aid}}}
    ask = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Reading."}, recall]},
                           "finishReason": "STOP"}]}  # fmt: skip
    said = {"error": {"code": 503, "message": "The model is overloaded", "status": "UNAVAILABLE"}}
    raw.queue.extend(
        [Answer(body=json.dumps(ask).encode()), Answer(status=503, body=json.dumps(said).encode())]
    )
    status, _, body = await post(proxy, "generateContent", {"contents": history})
    assert status == 503 and json.loads(body) == said
    answered = raw.seen[-1]["contents"][-1]["parts"][0]["functionResponse"]
    assert answered["name"] == "recall_artifact" and answered["response"]["output"].split("\n", 1)[1] == big
