"""`tokenpilot mcp --store redis://…`: the MCP server reads the store proxy replicas share.

The Redis store lists its sessions (latest write first) for a reader outside the proxy;
the server finds an artifact in whichever session holds it, lists a session's originals
with the tool each came from (from the state the proxy saved), and answers over stdio
with the SDK's own client exactly what the proxy's own tool answers.
"""

from __future__ import annotations

import json
import sys

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tokenpilot import Config, TokenPilot
from tokenpilot.history.session_state import session_to_dict
from tokenpilot.store.open import open_redis
from tokenpilot_mcp import StoreReader

LOG = "".join(f"{i:05d} INFO step {i} ok\n" for i in range(3000))


def _history(output: str) -> list[dict]:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "./build"}'},
    }
    return [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]


@pytest.fixture
def written(own_redis_url):
    """A store as a proxy leaves it: one session's reduced output, its state saved."""
    store = open_redis(own_redis_url)
    pilot = TokenPilot(Config(), store=store)
    prepared = pilot.prepare(_history(LOG), session_id="s1")
    store.save_state("s1", {"id": "s1", "session": session_to_dict(pilot.session("s1"))})
    store.put("s2", "another session's original\n")
    yield own_redis_url, pilot, prepared.stats.artifacts[0]
    store.close()


def test_the_reader_finds_lists_and_recalls_from_redis(written):
    url, pilot, aid = written
    reader = StoreReader(url)
    try:
        assert [sid for sid, _ in reader.sessions()] == ["s2", "s1"], "the latest written first"
        assert reader.session_of(aid) == "s1"
        for args in ({"artifact_id": aid}, {"artifact_id": aid, "start_line": 10, "end_line": 12}):
            answer = reader.recall(json.dumps(args))
            assert answer.text == pilot.execute_recall(json.dumps(args), session_id="s1") and not answer.error
        kept = reader.kept("s1")
        assert [(k.artifact_id, k.tool, k.lines, k.message) for k in kept] == [(aid, "bash", 3000, 3)]
    finally:
        reader.close()


async def test_the_server_answers_over_stdio_from_redis(written):
    url, pilot, aid = written
    params = StdioServerParameters(command=sys.executable, args=["-m", "tokenpilot_mcp", "--store", url])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        got = await session.call_tool("recall_artifact", {"artifact_id": aid, "pattern": "step 2999 "})
        assert not got.isError
        assert got.content[0].text == pilot.execute_recall(
            json.dumps({"artifact_id": aid, "pattern": "step 2999 "}), session_id="s1"
        )
        assert got.content[0].text.endswith("02999 INFO step 2999 ok\n")
        missing = await session.call_tool("recall_artifact", {"artifact_id": "art_0123456789abcdef"})
        assert missing.isError and "no artifact" in missing.content[0].text
        listing = await session.read_resource("tokenpilot://sessions/s1")
        assert f"| {aid} | bash | " in listing.contents[0].text
