"""Prefix-cache simulator: each profile's rules, miss causes, sharing, hidden prefix, speed."""

from __future__ import annotations

import time

import pytest

from tokenpilot.errors import ConfigError
from tokenpilot.measure.cachesim import (
    PROFILES,
    CacheSimulator,
    Segment,
    excerpt,
    request_segments,
    segment_tokens,
    segments_tokens,
)
from tokenpilot.pricing import Prices, cost


def syn(label: str, n: int) -> Segment:
    return Segment.synthetic(label, n)


TOOLS = [
    {"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": {}}},
    {"type": "function", "function": {"name": "exec", "description": "Run a command", "parameters": {}}},
]


def system(date: str) -> dict:
    return {
        "role": "system",
        "content": "You are a helpful agent.\n" * 300 + f"Current date: {date}\nTime zone: UTC\n",
    }


# -- openai ------------------------------------------------------------------------------


def test_openai_granularity_and_minimum() -> None:
    sim = CacheSimulator("openai")
    first = sim.simulate([syn("a", 1000)], 0)
    assert (first.hit_tokens, first.miss_tokens, first.write_tokens, first.cause) == (
        0,
        1000,
        0,
        "cold start",
    )
    below = sim.simulate([syn("a", 1000), syn("b", 300)], 1)
    assert below.hit_tokens == 0 and below.cause.startswith("below minimum")
    grown = sim.simulate([syn("a", 1000), syn("b", 300), syn("c", 50)], 2)
    assert grown.hit_tokens == 1280  # 1300 cached tokens, in 128-token steps
    assert grown.cause is None
    assert grown.prompt_tokens == grown.hit_tokens + grown.miss_tokens == 1350


def test_openai_token_level_prefix_inside_a_differing_segment() -> None:
    sim = CacheSimulator("openai")
    common = "alpha beta gamma delta " * 600
    sim.simulate([Segment("messages[0].content", common + "first ending")], 0)
    res = sim.simulate([Segment("messages[0].content", common + "second ending")], 1)
    shared = segment_tokens(Segment("x", common))
    assert shared - 128 <= res.hit_tokens <= shared
    assert res.hit_tokens % 128 == 0
    assert res.cause.startswith('messages[0].content: "')
    assert "second ending" in res.cause


def test_openai_ttl_expiry_and_refresh() -> None:
    sim = CacheSimulator("openai")
    segs = [syn("p", 4096)]
    sim.simulate(segs, 0)
    assert sim.simulate(segs, 500).hit_tokens == 4096  # within 600 s idle
    assert sim.simulate(segs, 1000).hit_tokens == 4096  # refreshed at 500
    res = sim.simulate(segs, 1712)
    assert res.hit_tokens == 0
    assert res.cause == "expired (idle 712 s > ttl 600 s)"


def test_system_prompt_change_cause_names_the_changed_line() -> None:
    sim = CacheSimulator("openai")
    msgs = [system("2026-12-02"), {"role": "user", "content": "hello"}]
    sim.simulate(request_segments(msgs, TOOLS), 0)
    res = sim.simulate(request_segments([system("2026-12-03"), msgs[1]], TOOLS), 10)
    assert res.cause == 'system: "Current date: 2026-12-03"'
    assert res.hit_tokens > 1024  # tools and the unchanged start of the system prompt still hit


def test_tools_order_and_added_tool_causes() -> None:
    sim = CacheSimulator("openai")
    msgs = [system("2026-12-02")]
    sim.simulate(request_segments(msgs, TOOLS), 0)
    assert sim.simulate(request_segments(msgs, TOOLS[::-1]), 1).cause == "tools: order changed"
    extra = {"type": "function", "function": {"name": "recall_artifact", "parameters": {}}}
    assert sim.simulate(request_segments(msgs, [*TOOLS, extra]), 2).cause == "tools: added recall_artifact"


def test_append_only_history_has_no_cause() -> None:
    sim = CacheSimulator("openai")
    msgs = [system("2026-12-02"), {"role": "user", "content": "one"}]
    sim.simulate(request_segments(msgs, TOOLS), 0)
    msgs += [{"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}]
    res = sim.simulate(request_segments(msgs, TOOLS), 5)
    assert res.cause is None
    assert res.hit_tokens > 0


# -- anthropic ---------------------------------------------------------------------------


def test_anthropic_hits_only_written_breakpoints_and_writes_the_rest() -> None:
    sim = CacheSimulator("anthropic")
    a, b, c = syn("a", 1500), syn("b", 500), syn("c", 700)
    first = sim.simulate([a], 0)
    assert (first.hit_tokens, first.write_tokens, first.miss_tokens) == (0, 1500, 0)
    second = sim.simulate([a, b], 1)
    assert (second.hit_tokens, second.write_tokens) == (1500, 500)
    # Diverging after a: the longest written breakpoint that is a prefix is a's end.
    third = sim.simulate([a, c], 2)
    assert (third.hit_tokens, third.write_tokens) == (1500, 700)
    assert third.cause == "c: changed"


def test_anthropic_minimum_and_lookback() -> None:
    sim = CacheSimulator("anthropic")
    small = sim.simulate([syn("s", 800)], 0)
    assert (small.hit_tokens, small.write_tokens, small.miss_tokens) == (0, 0, 800)
    base = [syn("base", 2000)]
    sim.simulate(base, 1)
    many = base + [syn(f"m{i}", 10) for i in range(25)]
    res = sim.simulate(many, 2)
    assert res.hit_tokens == 0 and res.cause.startswith("lookback")
    # An explicit breakpoint early in the request (cache_control on the system prompt) finds it.
    marked = CacheSimulator("anthropic")
    marked.simulate(base, 0)
    assert (
        marked.simulate([Segment.synthetic("base", 2000, breakpoint=True)] + many[1:], 1).hit_tokens == 2000
    )


def test_anthropic_sliding_ttl_and_one_hour_option() -> None:
    sim = CacheSimulator("anthropic")
    a, b = syn("a", 2000), syn("b", 100)
    sim.simulate([a], 0)
    assert sim.simulate([a, b], 250).hit_tokens == 2000
    assert sim.simulate([a, b], 500).hit_tokens == 2100  # slid: 250 s idle
    expired = sim.simulate([a, b], 900)
    assert expired.hit_tokens == 0 and expired.cause == "expired (idle 400 s > ttl 300 s)"
    sim.simulate([a], 1000, ttl_s=3600)
    assert sim.simulate([a, b], 3000).hit_tokens == 2000


# -- deepseek / vllm -----------------------------------------------------------------------


def test_deepseek_units_minimum_and_cached_output() -> None:
    sim = CacheSimulator("deepseek")
    s, out, tail = syn("s", 100), syn("out", 50), syn("t", 30)
    assert sim.simulate([s], 0, output=[out]).hit_tokens == 0
    res = sim.simulate([s, out, tail], 1)
    assert res.hit_tokens == 128  # 150 cached (prompt + reply), in 64-token units
    assert CacheSimulator("deepseek").simulate([syn("x", 40)], 0).hit_tokens == 0
    tiny = CacheSimulator("deepseek")
    tiny.simulate([syn("x", 40)], 0)
    assert tiny.simulate([syn("x", 40), syn("y", 10)], 1).cause.startswith("below minimum")


def test_vllm_blocks_and_lru_capacity() -> None:
    sim = CacheSimulator("vllm", capacity_tokens=1000)
    a, b = syn("a", 600), syn("b", 600)
    sim.simulate([a], 0)
    assert sim.simulate([a, syn("t", 5)], 1).hit_tokens == 592  # 16-token blocks
    sim.simulate([b], 2)  # over capacity: a (least recently used) goes
    assert sim.cached_tokens <= 1000
    res = sim.simulate([a], 3)
    assert res.hit_tokens == 0 and res.cause.startswith("evicted (LRU")


# -- sharing, hidden prefix, scaling ---------------------------------------------------------


def test_cross_session_sharing_is_keyed_by_content() -> None:
    sim = CacheSimulator("openai")
    prefix = [system("2026-12-02")]
    sim.simulate(request_segments([*prefix, {"role": "user", "content": "session one"}], TOOLS), 0)
    other = sim.simulate(request_segments([*prefix, {"role": "user", "content": "session two"}], TOOLS), 1)
    assert other.hit_tokens >= segments_tokens(request_segments(prefix, TOOLS)) - 128
    assert "session two" in other.cause
    # A different model never shares entries.
    fresh = sim.simulate(request_segments(prefix, TOOLS), 2, namespace="other-model")
    assert fresh.hit_tokens == 0 and fresh.cause == "cold start"


def test_hidden_prefix_is_a_fixed_synthetic_first_segment() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    segs = request_segments(msgs, hidden_prefix_tokens=5000)
    assert segs[0].tokens == 5000 and segs[0].label == "hidden prefix"
    assert segments_tokens(segs) == 5000 + segments_tokens(request_segments(msgs))
    sim = CacheSimulator("openai")
    sim.simulate(segs, 0)
    again = sim.simulate(
        request_segments([{"role": "user", "content": "other"}], hidden_prefix_tokens=5000), 1
    )
    assert again.hit_tokens == 4992
    differs = sim.simulate(request_segments(msgs, hidden_prefix_tokens=5100), 2)
    assert differs.hit_tokens == 0


def test_scale_and_sizes_convert_to_provider_tokens() -> None:
    sim = CacheSimulator("openai")
    a, b = syn("a", 2000), syn("b", 100)
    sim.simulate([a], 0, scale=1.5)
    res = sim.simulate([a, b], 1, scale=1.5)
    assert res.prompt_tokens == 3150 and res.hit_tokens == 2944  # 3000 → 128-token steps
    sized = CacheSimulator("openai")
    sizes = {a.key: 1500.0, b.key: 50.0}
    sized.simulate([a], 0, sizes=sizes)
    assert sized.simulate([a, b], 1, sizes=sizes).hit_tokens == 1408


def test_excerpt_and_unknown_profile() -> None:
    assert excerpt("line one\nCurrent date: 2026-12-03\nmore", 28) == "Current date: 2026-12-03"
    assert excerpt('{"content":"hello there","role":"user"}', 14) == "hello there"
    with pytest.raises(ConfigError):
        CacheSimulator("nope")
    assert set(PROFILES) == {"openai", "anthropic", "deepseek", "gemini", "vllm"}


def test_gemini_caches_from_its_models_minimum() -> None:
    """Gemini's implicit cache: a prefix match counts from 2,048 tokens on 2.5 models and
    from 4,096 on 3.x, per model (a 3,000-token prefix hits on one and not the other)."""
    prefix = Segment("system", "x", 3000)
    assert PROFILES["gemini"].minimum("gemini-2.5-flash") == 2048
    assert PROFILES["gemini"].minimum("models/gemini-3.1-pro-preview") == 4096
    for model, hit in (("gemini-2.5-flash", 3000), ("gemini-3-pro", 0)):
        sim = CacheSimulator("gemini")
        sim.simulate([prefix, Segment("m0", "a", 50)], 0.0, namespace=model)
        res = sim.simulate([prefix, Segment("m1", "b", 50)], 1.0, namespace=model)
        assert res.hit_tokens == hit, model


def test_pricing() -> None:
    p = Prices()
    assert p.write_price("anthropic") == pytest.approx(0.9375)
    assert p.write_price("openai") == pytest.approx(0.75)
    assert cost(1_000_000, 1_000_000, 0, 1_000_000, p) == pytest.approx(0.075 + 0.75 + 4.5)
    assert cost(0, 0, 1_000_000, 0, Prices(write=2.0)) == pytest.approx(2.0)


def test_long_session_simulates_fast() -> None:
    """150 calls growing to ~160k tokens: segments are tokenised once, calls cost a walk."""
    chunk = "def handler(event, context):\n    return process(event['payload'], retries=3)\n" * 60
    msgs: list[dict] = [{"role": "user", "content": "start"}]
    sim = CacheSimulator("anthropic")
    t0 = time.perf_counter()
    last = None
    for i in range(150):
        msgs.append({"role": "assistant", "content": f"step {i}"})
        msgs.append({"role": "user", "content": f"{i}\n{chunk}"})
        last = sim.simulate(request_segments(msgs, TOOLS, hidden_prefix_tokens=20_000), float(i))
    elapsed = time.perf_counter() - t0
    assert last is not None and last.prompt_tokens > 150_000
    assert last.hit_tokens > 0.99 * last.prompt_tokens - 2000
    assert elapsed < 10.0
