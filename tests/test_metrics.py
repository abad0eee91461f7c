"""`GET /metrics`: Prometheus' text format, read back with prometheus-client's own parser.

The usage counters must say what `/tokenpilot/stats` says (and the dashboard's dollars),
merge across replicas that share a Redis store, keep the `model` label bounded, and the
latency histograms and store failures must count this process's answers.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from drills.local_redis import LocalRedis
from tokenpilot.model_prices import load_price_file, prices_for
from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.demo import FakeUpstream
from tokenpilot_proxy.server import RunningProxy

LOG = "".join(f"step {i}: linking object_{i % 53}.o into the release binary\n" for i in range(1, 2501))
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
GREP = {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}


@pytest.fixture
async def upstream():
    async with FakeUpstream(cache_min_tokens=0, cache_step_tokens=1) as up:
        yield up


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def start(tmp_path):
    running: list[RunningProxy] = []

    async def go(upstream_url: str, **kw: Any) -> RunningProxy:
        kw.setdefault("store_dir", tmp_path / "store")
        kw.setdefault("state_dir", tmp_path / "state")
        proxy = await RunningProxy(ProxySettings(upstream=upstream_url, port=0, **kw)).start()
        running.append(proxy)
        return proxy

    yield go
    for proxy in running:
        await proxy.stop()


def history(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You build and ship."},
        {"role": "user", "content": "build"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "b1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"make"}'}}]},
        {"role": "tool", "tool_call_id": "b1", "content": LOG},
    ]  # fmt: skip
    for i in range(turns):
        msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": "next"}]
    return msgs


async def chat(http: aiohttp.ClientSession, url: str, key: str, msgs: list, tools: list, model: str) -> None:
    body = {"model": model, "messages": msgs, "tools": tools, "prompt_cache_key": key}
    async with http.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """Every sample by (name, frozen labels), parsed by prometheus-client."""
    async with http.get(url + "/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=")
        text = await r.text()
    out: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    out["_types"] = {f.name: f.type for f in text_string_to_metric_families(text)}
    return out


def total(samples: dict[str, Any], name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for k, v in samples.items() if k != "_types" and k[0] == name and want <= set(k[1]))


async def test_metrics_parse_and_match_the_stats(upstream, start, http):
    proxy = await start(upstream.url, list_sessions=True)
    for turn in range(3):
        await chat(http, proxy.url, "ship", history(turn), TOOLS, "gpt-4.1-mini")
    stats = (await (await http.get(proxy.url + "/tokenpilot/stats")).json())["sessions"]["ship"]
    (aid,) = stats["artifacts"]
    async with http.get(
        f"{proxy.url}/tokenpilot/artifacts/{aid}",
        params={"session": "ship"},
        headers={"X-TokenPilot-Recall": "agent"},
    ) as r:
        assert r.status == 200
    await chat(http, proxy.url, "ship", history(3), [*TOOLS, GREP], "gpt-4.1-mini")  # a break
    await chat(http, proxy.url, "other", history(0), TOOLS, "deepseek-chat")

    got = await scrape(http, proxy.url)
    stats = (await (await http.get(proxy.url + "/tokenpilot/stats")).json())["sessions"]
    assert got["_types"]["tokenpilot_requests"] == "counter"
    assert got["_types"]["tokenpilot_http_request_duration_seconds"] == "histogram"
    for name, field in (
        ("tokenpilot_requests_total", "calls"),
        ("tokenpilot_prompt_tokens_total", "prompt_tokens"),
        ("tokenpilot_cached_tokens_total", "cached_tokens"),
        ("tokenpilot_output_tokens_total", "output_tokens"),
        ("tokenpilot_tokens_saved_total", "tokens_saved"),
        ("tokenpilot_recalls_total", "recalls"),
        ("tokenpilot_prefix_breaks_total", "prefix_breaks"),
        ("tokenpilot_evictions_total", "evictions"),
    ):
        for sid, model in (("ship", "gpt-4.1-mini"), ("other", "deepseek-chat")):
            assert total(got, name, model=model) == stats[sid][field], (name, sid)
    assert total(got, "tokenpilot_requests_total") == 5
    assert total(got, "tokenpilot_recalls_total") == 1 and total(got, "tokenpilot_prefix_breaks_total") == 1
    assert total(got, "tokenpilot_cached_tokens_total") > 0
    # dollars at the model's list price, the same figures as the dashboard's
    async with http.get(proxy.url + "/tokenpilot/dashboard/data") as r:
        data = await r.json()
    for sid, model in (("ship", "gpt-4.1-mini"), ("other", "deepseek-chat")):
        assert total(got, "tokenpilot_dollars_spent_total", model=model) == pytest.approx(
            data["sessions"][sid]["spent_usd"], abs=1e-6
        )
        assert total(got, "tokenpilot_dollars_saved_total", model=model) == pytest.approx(
            data["sessions"][sid]["saved_usd"], abs=1e-6
        )
    assert total(got, "tokenpilot_dollars_saved_total", model="gpt-4.1-mini") > 0
    # latencies of this process: one observation per answered call and per prepare
    chat_route = {"route": "/v1/chat/completions", "method": "POST", "status": "200"}
    assert total(got, "tokenpilot_http_request_duration_seconds_count", **chat_route) == 5
    assert total(got, "tokenpilot_http_request_duration_seconds_bucket", le="+Inf", **chat_route) == 5
    assert total(got, "tokenpilot_prepare_duration_seconds_count") == 5
    assert total(got, "tokenpilot_sessions") == 2


async def test_metrics_keep_the_model_label_bounded(upstream, start, http):
    proxy = await start(upstream.url)
    for i in range(25):
        await chat(http, proxy.url, f"s{i}", history(0), TOOLS, f"made-up-model-{i}")
    got = await scrape(http, proxy.url)
    models = {dict(k[1])["model"] for k in got if k != "_types" and k[0] == "tokenpilot_requests_total"}
    assert len(models) == 21 and "other" in models
    assert total(got, "tokenpilot_requests_total") == 25


async def test_metrics_count_store_failures_of_this_process(upstream, start, http, monkeypatch):
    proxy = await start(upstream.url)

    def full_disk(*_a: Any, **_k: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(proxy.proxy.state, "save_state", full_disk)  # every state write fails
    await chat(http, proxy.url, "k", history(0), TOOLS, "gpt-4o")
    got = await scrape(http, proxy.url)
    assert total(got, "tokenpilot_store_failures_total", kind="state_save") >= 1
    assert total(got, "tokenpilot_requests_total") == 1  # the call still went through


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not on PATH")
async def test_metrics_merge_the_replicas_that_share_a_store(upstream, start, http):
    with LocalRedis() as redis:
        a = await start(upstream.url, store_url=redis.url, flush_interval_s=0)
        b = await start(upstream.url, store_url=redis.url, flush_interval_s=0)
        await chat(http, a.url, "shared", history(0), TOOLS, "claude-sonnet-4")
        await chat(http, b.url, "shared", history(1), TOOLS, "claude-sonnet-4")
        await chat(http, b.url, "only-b", history(0), TOOLS, "claude-sonnet-4")
        await a.proxy.flush()
        await b.proxy.flush()
        for replica in (a, b):  # each answers the fleet's totals
            got = await scrape(http, replica.url)
            assert total(got, "tokenpilot_requests_total", model="claude-sonnet-4") == 3, replica.url
            assert total(got, "tokenpilot_sessions") == 2


def test_price_file_overrides_the_table(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"my-model": {"input": 1.0, "cached_input": 0.1, "output": 2.0}}))
    table = load_price_file(path)
    assert prices_for("my-model-2026", table).prices.miss == 1.0
    assert prices_for("openai/gpt-4o-mini", table).prices.hit == 0.075  # provider prefix ignored
    assert not prices_for("unheard-of", table).known
    path.write_text(json.dumps({"bad": {"input": "free"}}))
    with pytest.raises(ValueError, match="'bad'.input"):
        load_price_file(path)


@pytest.mark.parametrize(
    ("model", "miss", "output"),
    [
        ("gpt-5.4", 2.50, 15.00),  # not gpt-5's $1.25: a newer family is its own row
        ("gpt-5.4-mini-2026-03-17", 0.75, 4.50),
        ("gpt-5.4-nano", 0.20, 1.25),
        ("gpt-5.5", 5.00, 30.00),
        ("gpt-5-mini", 0.25, 2.00),
        ("anthropic/claude-opus-4-6", 5.00, 25.00),  # not claude-opus-4's $15
        ("claude-opus-4-1-20250805", 15.00, 75.00),
        ("claude-sonnet-4-5", 3.00, 15.00),
    ],
)
def test_a_model_is_priced_by_its_own_family_not_a_shorter_prefix(model, miss, output):
    price = prices_for(model)
    assert price.known and (price.prices.miss, price.prices.output) == (miss, output)


def test_prices_come_from_the_maintained_list_with_the_users_own_first(tmp_path):
    """Issue #41: genai-prices prices what the snapshot never listed; a price file still wins;
    the paper's prices (the bench's) are a profile of their own and unchanged."""
    from tokenpilot.model_prices import TABLE, listed_price
    from tokenpilot.pricing import DEFAULT_PRICES

    pytest.importorskip("genai_prices")  # Python 3.11+: on 3.10 the snapshot alone prices
    assert not any(k.startswith("gemini") for k in TABLE)
    gemini = prices_for("google/gemini-2.5-flash")
    assert (
        gemini.known and gemini == listed_price("gemini-2.5-flash") and gemini.prices.hit < gemini.prices.miss
    )
    claude = prices_for("claude-sonnet-4-5")
    assert claude.profile == "anthropic" and claude.prices.write == pytest.approx(3.75)
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"gemini-2.5": {"input": 9.0, "cached_input": 0.9, "output": 9.0}}))
    assert prices_for("gemini-2.5-flash", load_price_file(path, base={})).prices.miss == 9.0
    assert (DEFAULT_PRICES.hit, DEFAULT_PRICES.miss, DEFAULT_PRICES.output) == (0.075, 0.75, 4.50)


def test_saved_tokens_count_only_what_could_have_been_sent():
    """Issue #41: a request too large for the model's window would have been refused, not
    billed: the saving past the window is no saving."""
    from tokenpilot.model_prices import context_window, sendable_saving

    pytest.importorskip("genai_prices")
    window = context_window("gpt-5.4-mini")
    assert window is not None and window >= 100_000
    assert sendable_saving(50_000, 10_000, "gpt-5.4-mini") == 50_000  # both sides fit: all of it
    assert sendable_saving(5 * window, 10_000, "gpt-5.4-mini") == window - 10_000
    assert sendable_saving(5 * window, 10_000, "unheard-of-model") == 5 * window  # unknown window: as counted
