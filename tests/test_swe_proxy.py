"""Text-action agents through the proxy, as through the bench: SWE-agent's observations
(user messages a declared marker recognises) are reduced and recallable, every other
user message goes as it came, and SWE-agent's rolling elision is held to the batch
boundary instead of breaking the prefix on every call (issue #26)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

FOOTER = "\n(Open file: /repo/a.py)\n(Current directory: /repo)\nbash-$"
SYSTEM = {"role": "system", "content": "SETTING: You are an autonomous programmer. " * 40}
TASK = {"role": "user", "content": "We're solving this issue: the parser drops the last line." + FOOTER}


def big_output(k: int) -> str:
    return "\n".join(f"{k}:{i}: " + "token_value " * 12 for i in range(600))  # ~90 KB


def action(k: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"Let's look.\n```\ncat part{k}.py\n```"}


def elided(text: str) -> str:
    return f"Old environment output: ({text.count(chr(10)) + 1} lines omitted)"


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as s:
        yield s


async def send(http: aiohttp.ClientSession, rp: Any, messages: list[dict[str, Any]]) -> int:
    body = {"model": "fake-model", "messages": messages, "stream": False, "prompt_cache_key": "swe:0"}
    async with http.post(
        rp.url + "/v1/chat/completions", data=json.dumps(body), headers={"Content-Type": "application/json"}
    ) as r:
        await r.read()
        return r.status


def sent(upstream: Any) -> list[dict[str, Any]]:
    return upstream.chat_requests()[-1].body["messages"]


async def test_observations_are_reduced_by_the_proxy_and_the_persons_words_are_not(
    upstream, start_proxy, http
):
    rp = await start_proxy(upstream.url)
    words = {"role": "user", "content": "Please keep this whole: " + big_output(9)}  # the person's, large
    msgs = [SYSTEM, TASK, action(0), {"role": "user", "content": big_output(0) + FOOTER}, action(1), words]
    assert await send(http, rp, msgs) == 200
    out = sent(upstream)
    obs = next(m for m in out if m["role"] == "user" and "0:0:" in str(m["content"]))
    assert len(obs["content"]) < len(msgs[3]["content"]) // 2 and "art_" in obs["content"]
    assert obs["content"].endswith("bash-$")
    assert any(m["role"] == "user" and m["content"] == TASK["content"] for m in out)
    assert any(m["role"] == "user" and m["content"] == words["content"] for m in out)


async def test_the_rolling_elision_is_held_by_the_proxy(upstream, start_proxy, http):
    rp = await start_proxy(upstream.url)
    outputs = [big_output(k)[:1500] + FOOTER for k in range(8)]  # small enough to pass unreduced
    history = [SYSTEM, TASK]
    prompts = []
    for k in range(8):
        history += [action(k), {"role": "user", "content": outputs[k]}]
        prompt = [dict(m) for m in history]
        for j in range(max(0, k - 1)):  # all but the last two observations elided
            prompt[3 + 2 * j] = {"role": "user", "content": elided(outputs[j])}
        assert await send(http, rp, prompt) == 200
        prompts.append(json.dumps(sent(upstream)))
    breaks = sum(1 for a, b in zip(prompts, prompts[1:]) if not b.startswith(a[:-1]))
    elisions = 8 - 2
    assert 1 <= breaks < elisions  # fewer breaks than the caller's elisions
    assert elided(outputs[0]) in prompts[-1] or outputs[0] in prompts[-1]
