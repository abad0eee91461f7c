"""`tokenpilot doctor` for every host: the host's config, the proxy, and why a prefix broke.

Each break cause of issue #27 is one scripted session through a real `RunningProxy`
(fake upstream on 127.0.0.1); doctor then reads what the proxy recorded (its stats, or
its state directory when it lists no session) and must name the cause, the first
differing message and what to do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from test_layout import _cli_without_openclaw_extra

from tokenpilot_openclaw.cli import main as cli_main
from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.demo import FakeUpstream
from tokenpilot_proxy.doctor import check_codex, read_toml, run_host_doctor
from tokenpilot_proxy.server import RunningProxy

SYSTEM = "You are a careful coding agent. Follow the repository's conventions. " * 40
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
GREP = {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}
CODEX_BLOCK = """model_provider = "tokenpilot"

[model_providers.tokenpilot]
name = "TokenPilot"
base_url = "{url}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "{wire}"
"""


@pytest.fixture
async def upstream():
    async with FakeUpstream(cache_min_tokens=0, cache_step_tokens=1) as up:
        yield up


@pytest.fixture
async def proxy(upstream, tmp_path):
    settings = ProxySettings(
        upstream=upstream.url, port=0, store_dir=tmp_path / "store", state_dir=tmp_path / "state"
    )
    running = await RunningProxy(settings).start()
    yield running
    await running.stop()


def user(text: str, marker: bool = False) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "text", "text": text}
    if marker:
        part["cache_control"] = {"type": "ephemeral"}
    return {"role": "user", "content": [part]}


Send = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Awaitable[None]]


async def date_in_system_prompt(send: Send) -> None:
    """The client adds a system message with the time and a request id on its second call."""
    base = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "fix the build"}]
    await send(base, TOOLS)
    stamped = {"role": "system", "content": "Current time: 2026-12-05T10:11:12Z, request id req_8f3a9c2e1b77"}
    await send([base[0], stamped, base[1], {"role": "assistant", "content": "on it"},
                {"role": "user", "content": "go on"}], TOOLS)  # fmt: skip


async def tool_list_changed(send: Send) -> None:
    """A tool joins the list mid-session (an MCP server connected late)."""
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "find the bug"}]
    await send(msgs, TOOLS)
    await send(msgs + [{"role": "assistant", "content": "looking"}, {"role": "user", "content": "and?"}],
               [*TOOLS, GREP])  # fmt: skip


REMINDER = "<system-reminder>the date is 2026-12-05</system-reminder>"


async def client_markers(send: Send) -> None:
    """The client puts a reminder block on its newest message, and moves it each call."""
    await send([{"role": "system", "content": SYSTEM}, user("first question " + REMINDER)], TOOLS)
    await send([{"role": "system", "content": SYSTEM}, user("first question "),
                {"role": "assistant", "content": "first answer"}, user("second " + REMINDER)], TOOLS)  # fmt: skip


async def history_rewritten(send: Send) -> None:
    """The caller compacts: an earlier answer is replaced by a summary."""
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a long first answer with all the details"},
            {"role": "user", "content": "q2"}]  # fmt: skip
    await send(msgs, TOOLS)
    summary = {"role": "assistant", "content": "summary of the earlier work"}
    await send([*msgs[:2], summary, msgs[3], {"role": "assistant", "content": "a2"},
                {"role": "user", "content": "q3"}], TOOLS)  # fmt: skip


SCENARIOS = {
    "volatile value": (date_in_system_prompt, "#1 (system)", "2026-12-05T10:11:12Z", "Config.volatile_patterns"),
    "tools changed": (tool_list_changed, "tool list [bash, recall_artifact] -> [bash, recall_artifact, grep]",
                      "", "send the same tool list on every call"),
    "client markers": (client_markers, "#1 (user)", "system-reminder", "keep reminders in the newest message"),
    "history rewritten": (history_rewritten, "#2 (assistant)", "summary of the earlier work",
                          "contextPruning.mode off"),
}  # fmt: skip


def doctor_args(tmp_path: Path, url: str, **kw: Any) -> argparse.Namespace:
    settings = tmp_path / "claude" / "settings.json"
    settings.parent.mkdir(exist_ok=True)
    settings.write_text(json.dumps({"env": {"ANTHROPIC_BASE_URL": url}, "model": "sonnet"}))
    base = dict(host=["claude-code"], proxy_url=None, auth_token_env=None, state_dir=tmp_path / "state",
                claude_settings=settings, codex_home=None, config=None, skip_openclaw=True, no_start=True,
                json=True)  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


async def run_doctor(args: argparse.Namespace, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict]]:
    capsys.readouterr()
    status = await asyncio.to_thread(run_host_doctor, args)
    return status, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("cause", list(SCENARIOS))
async def test_doctor_names_the_cause_of_each_break(cause, proxy, tmp_path, capsys):
    script, where, changed, fix = SCENARIOS[cause]
    key = f"session-{cause.replace(' ', '-')}"
    async with aiohttp.ClientSession() as http:

        async def send(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
            body = {"model": "gpt-4.1", "messages": messages, "tools": tools, "prompt_cache_key": key}
            async with http.post(proxy.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()

        await script(send)
    await proxy.proxy.flush()  # the usage of the last call (its break was saved when prepared)

    # the proxy lists no session (no token, no --list-sessions): doctor reads its state directory
    status, rows = await run_doctor(doctor_args(tmp_path, proxy.url), capsys)
    checks = {r["check"]: r for r in rows}
    assert checks["ANTHROPIC_BASE_URL"]["status"] == "ok" and checks["proxy"]["status"] == "ok"
    assert checks[f"session {key}"]["detail"].startswith("2 calls, cache hit rate ")
    (brk,) = [r for r in rows if r["check"] == f"prefix break in {key} at call 2"]
    assert brk["status"] == "warn"
    assert f"likely cause: {cause} (" in brk["detail"], brk["detail"]
    said, todo = brk["detail"].split("; what to do: ")
    assert where in said and changed in said and fix in todo, brk["detail"]
    # every other scripted cause is not named for this session
    others = [c for c in SCENARIOS if c != cause]
    assert not any(f"likely cause: {c} (" in brk["detail"] for c in others)
    assert status == 0


async def test_cache_markers_the_client_moves_break_nothing_through_the_chat_path(proxy, upstream, tmp_path):
    """LiteLLM's placement (its newest message marked, the mark moved at each call): the
    proxy counts no break, and the upstream reads each marker on the message that carried it."""
    key = "session-moving-markers"
    async with aiohttp.ClientSession() as http:
        for messages in (
            [{"role": "system", "content": SYSTEM}, user("first question", marker=True)],
            [{"role": "system", "content": SYSTEM}, user("first question"),
             {"role": "assistant", "content": "first answer"}, user("second", marker=True)],
        ):  # fmt: skip
            body = {"model": "gpt-4.1", "messages": messages, "tools": TOOLS, "prompt_cache_key": key}
            async with http.post(proxy.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
    await proxy.proxy.flush()
    (stats,) = [st for sid, st in proxy.proxy.stats.items() if key in sid]
    assert stats.prefix_breaks == 0
    sent = upstream.chat_requests()[-1].body["messages"]
    assert [i for i, m in enumerate(sent) if "cache_control" in json.dumps(m)] == [3]
    assert sent[1]["content"] == [{"type": "text", "text": "first question"}]


async def test_doctor_for_codex_reads_its_provider_block(proxy, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", proxy.url + "/v1")  # what Codex ignores: said so
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text(CODEX_BLOCK.format(url=proxy.url, wire="responses"))
    status, rows = await run_doctor(doctor_args(tmp_path, proxy.url, host=["codex"], codex_home=home), capsys)
    checks = {r["check"]: r for r in rows}
    assert status == 0 and checks["model_providers.tokenpilot.wire_api"]["status"] == "ok"
    assert checks["model_providers.tokenpilot.base_url"]["detail"] == proxy.url + "/v1"
    assert checks["OPENAI_BASE_URL"]["status"] == "warn" and "ignores" in checks["OPENAI_BASE_URL"]["detail"]
    assert checks["proxy"]["status"] == "ok"

    (home / "config.toml").write_text(CODEX_BLOCK.format(url=proxy.url, wire="chat"))
    found, _ = check_codex(home)
    assert [c.status for c in found if c.what.endswith("wire_api")] == ["FAIL"]
    (home / "config.toml").write_text('model = "gpt-5"\n')
    found, url = check_codex(home)
    assert url is None and "built-in OpenAI provider" in found[-1].detail


def test_doctor_for_codex_not_enabled_says_so_in_words(tmp_path):
    """A config.toml with no model_provider: not `None has no [model_providers.None] block`."""
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text('model = "gpt-5.4-mini"\n')
    found, url = check_codex(home)
    assert url is None and found[-1].status == "FAIL"
    assert "None" not in found[-1].detail and "tokenpilot enable codex" in found[-1].detail


def test_codex_config_read_without_tomllib_too(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    path.write_text(CODEX_BLOCK.format(url="http://127.0.0.1:8787", wire="responses") + "# note\n")
    monkeypatch.setitem(sys.modules, "tomllib", None)  # Python 3.10 has none
    got = read_toml(path)
    assert got["model_provider"] == "tokenpilot"
    assert got["model_providers"]["tokenpilot"]["wire_api"] == "responses"


async def test_doctor_for_claude_code_without_the_base_url_fails(tmp_path, capsys):
    args = doctor_args(tmp_path, "http://127.0.0.1:9")
    args.claude_settings.write_text(json.dumps({"env": {}}))
    status, rows = await run_doctor(args, capsys)
    assert status == 1
    (row,) = [r for r in rows if r["check"] == "ANTHROPIC_BASE_URL"]
    assert row["status"] == "FAIL" and "tokenpilot enable claude-code" in row["detail"]


def test_doctor_is_registered_beside_the_openclaw_alias_without_the_extra(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli_main(["openclaw", "doctor", "--help"])  # the alias stays
    assert "--skip-openclaw" in capsys.readouterr().out
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text('model = "gpt-5"\n')
    got = _cli_without_openclaw_extra("doctor", "--host", "codex", home=tmp_path)
    assert "Traceback" not in got.stderr, got.stderr
    assert got.returncode == 1 and "built-in OpenAI provider" in got.stdout
