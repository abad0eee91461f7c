"""The dashboard in a real headless Chromium, while a scripted agent works through the proxy.

The page must show what `/tokenpilot/stats` says (every figure carries its exact value
in `data-v`), move on by itself when the agent makes more calls, show an original
beside its reduced form, and keep behind `--auth-token-env` (a browser gets in with
`?token=` once, then a cookie). Screenshots land in the test's tmp dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cdp import Chromium, chromium_binary

from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.demo import FakeUpstream
from tokenpilot_proxy.server import RunningProxy

pytestmark = pytest.mark.skipif(
    chromium_binary() is None, reason="chromium is not installed (apt-get install -y chromium)"
)

LOG = "".join(f"line {i}: compiling module_{i % 37}.c ... ok\n" for i in range(1, 3001))  # ~110 KB
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
EDIT = {"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}
TOKEN = "dash-token-1"
# figures the page shows that /tokenpilot/stats has too, per session and in total
SHARED = ("calls", "prompt_tokens", "cached_tokens", "tokens_saved", "tokens_sent", "tokens_raw",
          "evictions", "recalls", "prefix_breaks", "hit_rate")  # fmt: skip


@pytest.fixture
async def upstream():
    async with FakeUpstream(cache_min_tokens=0, cache_step_tokens=1) as up:
        yield up


@pytest.fixture
async def http_session():
    async with aiohttp.ClientSession() as http:
        yield http


@pytest.fixture
async def browser(tmp_path):
    chrome = await Chromium(tmp_path / "profile").start()
    yield chrome
    await chrome.close()


async def proxy_for(upstream: FakeUpstream, tmp_path: Path, **kw: Any) -> RunningProxy:
    settings = ProxySettings(
        upstream=upstream.url, port=0, store_dir=tmp_path / "store", state_dir=tmp_path / "state", **kw
    )
    return await RunningProxy(settings).start()


class Agent:
    """A scripted coding agent: one big build log, then short turns; a tool joins later."""

    def __init__(
        self, http: aiohttp.ClientSession, url: str, key: str, headers: dict[str, str] | None = None
    ):
        self.http, self.url, self.key, self.headers = http, url, key, headers or {}
        self.tools = list(TOOLS)
        self.history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "build it"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"make"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": LOG},
        ]  # fmt: skip

    async def call(self, n: int = 1) -> None:
        for _ in range(n):
            body = {"model": "claude-sonnet-4-5", "messages": self.history, "tools": self.tools,
                    "prompt_cache_key": self.key}  # fmt: skip
            async with self.http.post(
                self.url + "/v1/chat/completions", json=body, headers=self.headers
            ) as r:
                assert r.status == 200, await r.text()
                answer = (await r.json())["choices"][0]["message"]["content"]
            self.history += [{"role": "assistant", "content": answer}, {"role": "user", "content": "go on"}]

    async def recall(self, aid: str) -> str:
        async with self.http.get(
            f"{self.url}/tokenpilot/artifacts/{aid}",
            params={"session": self.key},
            headers={**self.headers, "X-TokenPilot-Recall": "agent"},  # as the OpenClaw plugin sends it
        ) as r:
            assert r.status == 200
            return (await r.json())["text"]


async def stats_of(http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> dict:
    async with http.get(url + "/tokenpilot/stats", headers=headers or {}) as r:
        assert r.status == 200
        return await r.json()


DOM_FIGURES = """(() => {
  const out = {totals: {}, sessions: {}};
  for (const el of document.querySelectorAll('#main > .cards [data-k]')) out.totals[el.dataset.k.slice(7)] = el.dataset.v;
  for (const tr of document.querySelectorAll('tr[data-session]')) {
    const row = out.sessions[tr.dataset.session] = {};
    for (const el of tr.querySelectorAll('[data-k]')) row[el.dataset.k] = el.dataset.v;
  }
  return out;
})()"""


async def settled(browser: Chromium, stats: dict, timeout_s: float = 30.0) -> None:
    """Wait until the page (polling by itself) shows `stats`; then assert it does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        dom = await browser.evaluate(DOM_FIGURES)
        try:
            assert_dom_matches(dom, stats)
            return
        except AssertionError:
            if loop.time() > deadline:
                raise
        await asyncio.sleep(0.2)


def assert_dom_matches(dom: dict, stats: dict) -> None:
    for k in SHARED:
        assert float(dom["totals"][k]) == pytest.approx(stats["totals"][k], abs=1e-4), k
    assert set(dom["sessions"]) == set(stats["sessions"])
    for sid, row in dom["sessions"].items():
        for k in SHARED:
            assert float(row[k]) == pytest.approx(stats["sessions"][sid][k], abs=1e-4), (sid, k)


async def test_dashboard_figures_match_stats_and_move_while_the_agent_works(
    upstream, browser, tmp_path, http_session
):
    proxy = await proxy_for(upstream, tmp_path, list_sessions=True)
    try:
        agent = Agent(http_session, proxy.url, "build-session")
        await agent.call(2)
        stats = await stats_of(http_session, proxy.url)
        (aid,) = stats["sessions"]["build-session"]["artifacts"]
        assert await agent.recall(aid) == LOG
        agent.tools = [*TOOLS, EDIT]  # a tool joins: a prefix break the page shows with its cause
        await agent.call(2)
        other = Agent(http_session, proxy.url, "second-session")
        await other.call(1)

        await browser.goto(proxy.url + "/tokenpilot/dashboard")
        stats = await stats_of(http_session, proxy.url)
        calls = stats["totals"]["calls"]
        assert calls == 5 and stats["totals"]["recalls"] == 1 and stats["totals"]["prefix_breaks"] == 1
        dom = await browser.evaluate(DOM_FIGURES)
        assert_dom_matches(dom, stats)
        assert float(dom["totals"]["saved_usd"]) > 0 and float(dom["totals"]["spent_usd"]) > 0
        assert await browser.evaluate("document.querySelectorAll('svg.chart polyline').length") >= 3

        # the agent works on; the page follows without a reload (a poll may land between a
        # call's count and its usage: the next one shows both, so wait for the figures to agree)
        await agent.call(3)
        stats = await stats_of(http_session, proxy.url)
        assert stats["totals"]["calls"] == calls + 3
        await settled(browser, stats)
        breaks = stats["sessions"]["build-session"]["breaks"]
        assert [b["likely"] for b in breaks] == ["tools changed"] and breaks[0]["tools_added"] == ["edit"]
        await browser.evaluate("document.querySelector('details[data-detail=\"build-session\"]').open = true")
        text = await browser.evaluate("document.body.innerText")
        assert "tools changed" in text and "send the same tool list" in text
        assert "#?" not in text and "(?)" not in text  # every break's place is said in words
        # the charts: a dot per measured point, steps between them (issue #41)
        shape = await browser.evaluate(
            "[...document.querySelectorAll('details[data-detail=\"build-session\"] svg.chart')].map(svg => ["
            "svg.querySelectorAll('circle.pt').length,"
            "[...svg.querySelectorAll('polyline')].every(l => { const p = l.getAttribute('points').trim()"
            ".split(/\\s+/).map(q => q.split(',').map(Number));"
            "return p.slice(1).every((q, i) => q[0] === p[i][0] || q[1] === p[i][1]); })])"
        )
        assert shape and all(dots > 0 and steps for dots, steps in shape), shape
        shot = await browser.screenshot(tmp_path / "dashboard.png")
        assert shot.stat().st_size > 10_000
        if docs := _docs_copy():
            shutil.copyfile(shot, docs)

        # the artifact page: the original beside what the model was sent
        await browser.evaluate(f"document.querySelector('a[href*=\"{aid}\"]').click()")
        await browser.wait_for("!!document.querySelector('pre[data-pane=\"original\"]')")
        panes = await browser.evaluate(
            "[...document.querySelectorAll('pre[data-pane]')].map(p => [p.dataset.pane, p.textContent])"
        )
        got = dict(panes)
        assert got["original"] == LOG
        assert aid in got["reduced"] and len(got["reduced"]) < len(LOG) // 10
        await browser.screenshot(tmp_path / "artifact.png")
        after = await stats_of(http_session, proxy.url)
        assert after["totals"]["recalls"] == 1  # looking at an original is not the agent's recall
    finally:
        await proxy.stop()


async def test_dashboard_behind_the_token_lets_a_browser_in_once_with_it(
    upstream, browser, tmp_path, http_session, monkeypatch
):
    monkeypatch.setenv("TP_DASH_TOKEN", TOKEN)
    proxy = await proxy_for(upstream, tmp_path, auth_token_env="TP_DASH_TOKEN")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        agent = Agent(http_session, proxy.url, "guarded", auth)
        await agent.call(2)
        for path in ("/tokenpilot/dashboard", "/tokenpilot/dashboard/view", "/tokenpilot/dashboard/data"):
            async with http_session.get(proxy.url + path) as r:
                assert r.status == 401, path
        async with http_session.get(proxy.url + "/tokenpilot/dashboard?token=wrong") as r:
            assert r.status == 401

        await browser.goto(f"{proxy.url}/tokenpilot/dashboard?token={TOKEN}")
        assert await browser.evaluate("location.search") == ""  # the token left the address bar
        await agent.call(1)  # the page's own polling (with the cookie) shows the new call
        stats = await stats_of(http_session, proxy.url, auth)
        assert stats["totals"]["calls"] == 3
        await settled(browser, stats)
        # the cookie opens the dashboard only, nothing else of the proxy
        cookie = await browser.evaluate("fetch('/tokenpilot/stats').then(r => r.status)")
        assert cookie == 401
        async with http_session.get(proxy.url + "/tokenpilot/dashboard/data", headers=auth) as r:
            data = json.loads(await r.text())
        assert data["sessions"]["guarded"]["calls"] == 3
    finally:
        await proxy.stop()


def _docs_copy() -> Path | None:
    """Where to copy the screenshot for the README (`TOKENPILOT_DASHBOARD_PNG`), if anywhere."""
    target = os.environ.get("TOKENPILOT_DASHBOARD_PNG")
    return Path(target) if target else None
