"""`tokenpilot_mcp`: the MCP server over a store the real proxy wrote, through the SDK's own client.

A proxy in front of the fake upstream reduces a big tool output and keeps its original; the
MCP server (`python -m tokenpilot_mcp`, over stdio and over streamable HTTP) then lists
`recall_artifact` exactly as the proxy defines it, answers it with the proxy's own text
(`TokenPilot.execute_recall`), errors flagged `isError`, lists each session's originals as
resources, survives a store that is down, keeps to a pinned `--session`, refuses HTTP
callers without the bearer token, and imports none of the hosts (proxy, OpenClaw, LangGraph).
"""

from __future__ import annotations

import ast
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("aiohttp")
httpx = pytest.importorskip("httpx")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import McpError  # noqa: E402

from drills.crashdrill import free_port  # noqa: E402
from tokenpilot import RECALL_TOOL, TokenPilot  # noqa: E402
from tokenpilot.store.artifacts import ArtifactStore  # noqa: E402
from tokenpilot_mcp import StoreReader  # noqa: E402
from tokenpilot_proxy import ProxySettings  # noqa: E402
from tokenpilot_proxy.demo import FakeUpstream, LoopThread, Reply  # noqa: E402
from tokenpilot_proxy.server import RunningProxy  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TOOL = "bash"
LOG_LINES = 3000
LOG = "".join(
    f"{i:05d} ERROR disk full on /dev/sd{i % 4} after {i % 13} ms\n"
    if i % 250 == 7
    else f"{i:05d} INFO worker-{i % 7} processed batch {i} in {i % 13} ms status=ok\n"
    for i in range(LOG_LINES)
)
ERROR_LINES = [(n, line) for n, line in enumerate(LOG.splitlines(keepends=True), 1) if "ERROR" in line]
ART_RE = re.compile(r"art_[0-9a-f]+")
STARTUP_S = 30.0


@dataclass(frozen=True)
class ProxyStore:
    """What the proxy left behind: its folders, the one session and the original it kept."""

    root: Path
    store: Path
    state: Path
    session: str
    aid: str
    reduced: str  # the tool message as the upstream received it


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> ProxyStore:
    """One chat completion through the real proxy; stopped afterwards, so its state is flushed."""
    root = tmp_path_factory.mktemp("mcp")
    loop = LoopThread()
    fake = FakeUpstream(responder=lambda body: Reply("done"))
    try:
        loop.run(fake.start())
        settings = ProxySettings(
            upstream=fake.url,
            port=0,
            store_dir=root / "store",
            state_dir=root / "state",
            flush_interval_s=0,
        )
        rp = loop.run(RunningProxy(settings, shutdown_timeout_s=1).start())
        try:
            body = {
                "model": "gpt-fake",
                "messages": [
                    {"role": "user", "content": "generate the data and tell me what failed"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {
                                    "name": TOOL,
                                    "arguments": json.dumps({"command": "python gen.py"}),
                                },
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "call_1", "content": LOG},
                ],
                "tools": [{"type": "function", "function": {"name": TOOL, "parameters": {"type": "object"}}}],
            }
            req = urllib.request.Request(
                rp.url + "/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers={"content-type": "application/json", "Authorization": "Bearer sk-test"},
            )
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
                assert json.load(r)["choices"][0]["message"]["content"] == "done"
        finally:
            loop.run(rp.stop())
        (sent,) = fake.chat_requests()
    finally:
        loop.run(fake.close())
        loop.close()
    reduced = next(m["content"] for m in sent.body["messages"] if m["role"] == "tool")
    assert isinstance(reduced, str) and len(reduced) < len(LOG) / 4, "the tool output was not reduced"
    ids = set(ART_RE.findall(reduced))
    assert len(ids) == 1, ids
    sessions = ArtifactStore(root / "store").sessions()
    assert len(sessions) == 1, sessions
    assert list((root / "state").iterdir()), "the stopped proxy saved no session state"
    return ProxyStore(root, root / "store", root / "state", sessions[0][0], ids.pop(), reduced)


def server_args(
    w: ProxyStore, *extra: str, store: Path | None = None, state: Path | None = None
) -> list[str]:
    return [
        "-m",
        "tokenpilot_mcp",
        "--store-dir",
        str(store or w.store),
        "--state-dir",
        str(state or w.state),
        *extra,
    ]


@asynccontextmanager
async def mcp_stdio(args: list[str], errlog: Path) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with `python <args>` over stdio."""
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ), cwd=str(REPO))
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.serverInfo.name == "tokenpilot"
            yield session


def native(w: ProxyStore, arguments: dict[str, Any], session: str | None = None) -> str:
    """The proxy's own answer to these arguments (`TokenPilot.execute_recall`)."""
    pilot = TokenPilot(store=ArtifactStore(w.store))
    return pilot.execute_recall(json.dumps(arguments), session_id=session or w.session)


def text_of(result: Any) -> str:
    (content,) = result.content
    assert content.type == "text"
    return content.text


# ---------------------------------------------------------------------------
# stdio: the tool, its answers, the resources
# ---------------------------------------------------------------------------
async def test_the_tool_is_the_proxys_recall_artifact(written: ProxyStore, tmp_path: Path):
    async with mcp_stdio(server_args(written), tmp_path / "stderr") as s:
        tools = (await s.list_tools()).tools
    assert [t.name for t in tools] == [RECALL_TOOL["function"]["name"]] == ["recall_artifact"]
    (tool,) = tools
    assert tool.inputSchema == RECALL_TOOL["function"]["parameters"]
    assert tool.description == RECALL_TOOL["function"]["description"]
    assert tool.annotations is not None and tool.annotations.readOnlyHint is True


async def test_recall_answers_are_the_proxys_own(written: ProxyStore, tmp_path: Path):
    aid = written.aid
    lines = LOG.splitlines(keepends=True)
    async with mcp_stdio(server_args(written), tmp_path / "stderr") as s:

        async def call(arguments: dict[str, Any]) -> tuple[str, bool]:
            result = await s.call_tool("recall_artifact", arguments)
            return text_of(result), result.isError

        # whole: the note, then the original byte for byte
        text, error = await call({"artifact_id": aid})
        note, rest = text.split("\n", 1)
        assert not error and rest == LOG
        assert note.startswith("[tokenpilot:") and aid in note and f"{LOG_LINES}" in note
        assert text == native(written, {"artifact_id": aid})

        # by range: exactly those lines
        text, error = await call({"artifact_id": aid, "start_line": 1201, "end_line": 1205})
        assert not error and text.split("\n", 1)[1] == "".join(lines[1200:1205])
        assert text == native(written, {"artifact_id": aid, "start_line": 1201, "end_line": 1205})

        # by pattern: exactly the matching lines, with their line numbers
        text, error = await call({"artifact_id": aid, "pattern": "ERROR"})
        body = text.split("\n", 1)[1]
        assert not error and len(ERROR_LINES) == 12
        assert body.splitlines() == [f"{n}: {line.rstrip(chr(10))}" for n, line in ERROR_LINES]
        assert text == native(written, {"artifact_id": aid, "pattern": "ERROR"})

        # a pattern RE2 cannot run is searched as plain text: an answer, not an error
        fallback = {"artifact_id": aid, "pattern": r"(a)\1"}
        text, error = await call(fallback)
        assert not error and "plain text" in text
        assert text == native(written, fallback)

        # each refusal: the proxy's text, flagged as a tool error
        refused = {
            "unknown id": ({"artifact_id": "art_0123456789abcdef01234567"}, "no artifact"),
            "id a number": ({"artifact_id": 12345}, "'artifact_id' must be a string"),
            "id missing": ({"start_line": 1}, "'artifact_id' is missing"),
            "past the end": ({"artifact_id": aid, "start_line": LOG_LINES + 1}, "past the end"),
            "end before start": ({"artifact_id": aid, "start_line": 50, "end_line": 10}, "before start_line"),
            "pattern too long": ({"artifact_id": aid, "pattern": "x" * 1001}, "pattern too long"),
        }
        for what, (arguments, says) in refused.items():
            text, error = await call(arguments)
            assert error is True, what
            assert says in text, (what, text)
            assert text == native(written, arguments), what

        # a tool this server does not have
        result = await s.call_tool("recall_artifacts", {"artifact_id": aid})
        assert result.isError is True and "recall_artifact" in text_of(result)

        # and after all of that it still answers
        text, error = await call({"artifact_id": aid, "start_line": LOG_LINES, "end_line": LOG_LINES})
        assert not error and text.split("\n", 1)[1] == lines[-1]


async def test_sessions_and_originals_are_resources(written: ProxyStore, tmp_path: Path):
    sid, aid = written.session, written.aid
    assert StoreReader(written.store, written.state).sessions()[0][0] == sid
    async with mcp_stdio(server_args(written), tmp_path / "stderr") as s:
        listed = (await s.list_resources()).resources
        assert [str(r.uri) for r in listed] == [f"tokenpilot://sessions/{sid}"]

        (listing,) = (await s.read_resource(f"tokenpilot://sessions/{sid}")).contents
        assert listing.mimeType == "text/markdown"
        (row,) = [line for line in listing.text.splitlines() if aid in line]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:4] == [aid, TOOL, f"{len(LOG):,}", f"{LOG_LINES:,}"], row

        (original,) = (await s.read_resource(f"tokenpilot://sessions/{sid}/{aid}")).contents
        assert original.text == LOG

        with pytest.raises(McpError, match="not a TokenPilot resource"):
            await s.read_resource("tokenpilot://nope")
        with pytest.raises(McpError, match="no artifact"):
            await s.read_resource(f"tokenpilot://sessions/{sid}/art_0123456789abcdef01234567")
        # the errors did not end the session
        assert [t.name for t in (await s.list_tools()).tools] == ["recall_artifact"]
        again = await s.call_tool("recall_artifact", {"artifact_id": aid, "start_line": 1, "end_line": 1})
        assert not again.isError and text_of(again).split("\n", 1)[1] == LOG.splitlines(keepends=True)[0]


# ---------------------------------------------------------------------------
# a store that is down; a pinned session
# ---------------------------------------------------------------------------
async def test_a_store_that_is_down_gives_tool_errors_not_a_crash(tmp_path: Path):
    pytest.importorskip("redis")
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    args = ["-m", "tokenpilot_mcp", "--store", url]
    async with mcp_stdio(args, tmp_path / "stderr") as s:
        for _ in range(2):
            result = await s.call_tool("recall_artifact", {"artifact_id": "art_0123456789abcdef01234567"})
            assert result.isError is True
            assert "could not be read" in text_of(result), text_of(result)
        with pytest.raises(McpError, match="could not be read"):
            await s.list_resources()
        with pytest.raises(McpError, match="could not be read"):
            await s.read_resource("tokenpilot://sessions/x/art_0123456789abcdef01234567")
        assert [t.name for t in (await s.list_tools()).tools] == ["recall_artifact"]
        bad = await s.call_tool("recall_artifact", {"artifact_id": 7})
        assert bad.isError is True and "must be a string" in text_of(bad)


async def test_a_pinned_session_reads_only_its_own(written: ProxyStore, tmp_path: Path):
    store, state = tmp_path / "store", tmp_path / "state"
    shutil.copytree(written.store, store)
    shutil.copytree(written.state, state)
    own = ArtifactStore(store)
    other = own.put("other", "text of the other session\nline two\n")
    own.close()
    pinned = server_args(written, "--session", "other", store=store, state=state)
    async with mcp_stdio(pinned, tmp_path / "stderr") as s:
        result = await s.call_tool("recall_artifact", {"artifact_id": written.aid})
        assert result.isError is True and "no artifact" in text_of(result)
        assert text_of(result) == native(written, {"artifact_id": written.aid}, session="other")

        mine = await s.call_tool("recall_artifact", {"artifact_id": other})
        assert mine.isError is False
        assert text_of(mine).split("\n", 1)[1] == "text of the other session\nline two\n"

        assert [str(r.uri) for r in (await s.list_resources()).resources] == ["tokenpilot://sessions/other"]
    # unpinned, the same store serves both
    async with mcp_stdio(server_args(written, store=store, state=state), tmp_path / "stderr2") as s:
        for aid in (written.aid, other):
            assert (await s.call_tool("recall_artifact", {"artifact_id": aid})).isError is False
        uris = {str(r.uri) for r in (await s.list_resources()).resources}
        assert uris == {"tokenpilot://sessions/other", f"tokenpilot://sessions/{written.session}"}


# ---------------------------------------------------------------------------
# streamable HTTP behind a bearer token
# ---------------------------------------------------------------------------
def _wait_for_port(proc: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing answered on port {port} within {STARTUP_S:.0f} s")


def _post(url: str, headers: dict[str, str]) -> tuple[int, str]:
    """POST a tools/list as a bare HTTP client would, to the printed URL itself (no redirect)."""
    payload = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    base = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("POST", parts.path or "/", body=payload, headers={**base, **headers})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


async def test_http_needs_the_bearer_token(written: ProxyStore):
    port = free_port()
    cmd = [sys.executable, *server_args(written, "--http", "--port", str(port), "--auth-token-env", "TOK")]
    env = {**os.environ, "TOK": "secret"}
    proc = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        _wait_for_port(proc, port)
        async with (
            httpx.AsyncClient(headers={"Authorization": "Bearer secret"}, timeout=30) as client,
            streamable_http_client(url, http_client=client) as (read, write, _),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            assert [t.name for t in (await s.list_tools()).tools] == ["recall_artifact"]
            args = {"artifact_id": written.aid, "pattern": "ERROR"}
            result = await s.call_tool("recall_artifact", args)
            assert result.isError is False
            assert text_of(result) == native(written, args)
            missing = await s.call_tool("recall_artifact", {"artifact_id": "art_0123456789abcdef01234567"})
            assert missing.isError is True and "no artifact" in text_of(missing)

        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "secret"}):
            status, body = _post(url, headers)
            assert status == 401, (headers, status, body)
            assert "bearer token" in body and written.aid not in body
        status, body = _post(url, {"Authorization": "Bearer secret"})
        assert status == 200 and "recall_artifact" in body
    finally:
        proc.kill()
        proc.wait(10)


def test_http_off_loopback_needs_a_token(written: ProxyStore):
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if k != "TOK"}
    refused = subprocess.run(
        [sys.executable, *server_args(written, "--http", "--host", "0.0.0.0", "--port", port)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
    )
    assert refused.returncode == 2, refused
    assert "--auth-token-env" in refused.stderr and "0.0.0.0" in refused.stderr
    unset = subprocess.run(
        [sys.executable, *server_args(written, "--http", "--port", port, "--auth-token-env", "TOK")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
    )
    assert unset.returncode == 2, unset
    assert "TOK" in unset.stderr


# ---------------------------------------------------------------------------
# the boundary: the MCP server needs the core only
# ---------------------------------------------------------------------------
HOSTS = ("tokenpilot_proxy", "tokenpilot_openclaw", "tokenpilot_langgraph")


def imported_modules(tree: ast.AST) -> set[str]:
    """Every absolute module an AST imports, at any depth (function-level imports and
    `importlib.import_module("...")` / `__import__("...")` with a literal name included)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def test_the_mcp_package_imports_no_host():
    probe = imported_modules(ast.parse("def f():\n    from tokenpilot_proxy.demo import Reply\n"))
    assert probe == {"tokenpilot_proxy.demo"}  # the scan sees a function-level import
    files = sorted((REPO / "tokenpilot_mcp").rglob("*.py"))
    assert {f.name for f in files} >= {"__init__.py", "reader.py", "server.py", "serve.py", "cli.py"}
    seen: dict[str, set[str]] = {}
    for f in files:
        seen[f.name] = imported_modules(ast.parse(f.read_text(), filename=str(f)))
    assert any(m.startswith("tokenpilot.") for mods in seen.values() for m in mods)
    wrong = {name: sorted(m for m in mods if m.split(".")[0] in HOSTS) for name, mods in seen.items()}
    assert not any(wrong.values()), wrong
