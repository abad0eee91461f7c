"""OpenClaw's own contextPruning (mode "cache-ttl") as a bench method, run from its dist.

The expected texts follow OpenClaw 2026.9's rules (tool-result-truncation.ts): once
`now - lastCacheTouchAt >= ttl` and the context is at least 30% of the window (chars / 4
tokens), tool results before the third-last assistant message over 4,000 chars keep their
first and last 1,500 chars; if still at 50% or more, the oldest are cleared until under.
Node 24 and OpenClaw come from the e2e cache (tests/test_openclaw_e2e.py's installer).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tokenpilot._canonical import canonical_json
from tokenpilot.measure.bench.methods import Vanilla, default_methods, method_names
from tokenpilot.measure.bench.peers import openclaw_pruning as ocp
from tokenpilot.measure.bench.replay import replay
from tokenpilot.measure.traces.model import RecordedCall, Session

PLACEHOLDER = "[Old tool result content cleared]"


@pytest.fixture(scope="module")
def openclaw() -> Iterator[Path]:
    """The cached OpenClaw package, found by the peer through $TOKENPILOT_OPENCLAW_DIR."""
    from test_openclaw_e2e import _ensure_tools

    node_bin, exe = _ensure_tools()  # skips, saying why, when neither cached nor installable
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ocp.ENV_DIR, str(exe.parent.parent))
        mp.setenv("PATH", f"{node_bin}:{os.environ.get('PATH', '')}")
        assert ocp.missing() is None
        yield exe.parent.parent


# ---------------------------------------------------------------------------
# an agent session: tool calls with big results, then plain replies
# ---------------------------------------------------------------------------
def _output(k: int, chars: int) -> str:
    lines, n = [], 0
    while n < chars:
        line = f"result {k} line {len(lines)}: " + "abcdefghij" * 4
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)[:chars]


def _session(results: list[str], replies: int, times: list[float]) -> Session:
    """One call per assistant message: a tool call per result, then `replies` answers and
    a last one; `times[i]` is when call i was sent."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "go"},
    ]
    outputs = []
    for k, text in enumerate(results):
        fn = {"name": "exec", "arguments": json.dumps({"command": f"cat f{k}"})}
        outputs.append(len(msgs))
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{k}", "type": "function", "function": fn}],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": text})
    for j in range(replies):
        outputs.append(len(msgs))
        msgs += [{"role": "assistant", "content": f"reply {j}"}, {"role": "user", "content": f"more {j}"}]
    outputs.append(len(msgs))
    msgs.append({"role": "assistant", "content": "bye"})
    assert len(times) == len(outputs)
    calls = [RecordedCall(0, end, timestamp=t) for end, t in zip(outputs, times)]
    return Session("s", "inline", "openai_chat", msgs, calls=calls)


def _render_all(method: Any, s: Session) -> list[list[dict[str, Any]]]:
    ms = method.session(s.id)
    try:
        return [ms.render(s.prompt(c), [], c.timestamp).messages for c in s.calls]
    finally:
        ms.close()


def _tools(view: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in view if m["role"] == "tool"]


def _soft(text: str) -> str:
    return f"{text[:1500]}\n...\n{text[-1500:]}\n\n[Tool result trimmed: kept first 1500 chars and last 1500 chars of {len(text)} chars.]"


# four 70k-char results (35% of a 200k window), calls 10 s apart, then 299 s and 300 s idle
SOFT_TIMES = [0, 10, 20, 30, 40, 339, 639, 649]


def test_soft_trims_old_results_once_the_cache_ttl_has_passed(openclaw):
    results = [_output(k, 70_000) for k in range(4)]
    s = _session(results, 3, SOFT_TIMES)
    views = _render_all(ocp.OpenClawContextPruning(), s)
    for c, view in zip(s.calls[:6], views[:6]):  # idle 299 s at most: nothing pruned
        assert view == s.prompt(c)
    # idle exactly 300 s (OpenClaw compares >=): results before the third-last assistant
    assert _tools(views[6]) == [*map(_soft, results[:3]), results[3]]
    assert [m for m in views[6] if m["role"] != "tool"] == [
        m for m in s.prompt(s.calls[6]) if m["role"] != "tool"
    ]
    # 10 s later the cache is warm: the trims stay, the fourth (now old too) is left alone
    assert _tools(views[7]) == [*map(_soft, results[:3]), results[3]]


def test_hard_clears_oldest_results_while_over_half_the_window(openclaw):
    results = [_output(k, 3_800) for k in range(110)]  # under the soft-trim size: only clearing helps
    times = [10.0 * i for i in range(113)]
    times[-2] += 600  # the cache goes cold before the second-last call
    s = _session(results, 2, times)
    views = _render_all(ocp.OpenClawContextPruning(), s)
    assert _tools(views[-3]) == results
    prompt = s.prompt(s.calls[-2])
    # OpenClaw's count: text chars, tool-call arguments as compact JSON; no system prompt
    total = sum(
        len(m["content"] or "")
        + sum(
            len(json.dumps(json.loads(tc["function"]["arguments"]), separators=(",", ":")))
            for tc in m.get("tool_calls") or ()
        )
        for m in prompt[1:]
    )
    cleared = 0
    while total / 800_000 >= 0.5:  # oldest first, among results before the third-last assistant
        total += len(PLACEHOLDER) - len(results[cleared])
        cleared += 1
    assert 0 < cleared < 109
    assert _tools(views[-2]) == [PLACEHOLDER] * cleared + results[cleared:]
    assert _tools(views[-1]) == [PLACEHOLDER] * cleared + results[cleared:]


def test_nothing_is_pruned_under_thirty_percent_of_the_window(openclaw):
    s = _session([_output(k, 50_000) for k in range(4)], 3, [0, 10, 20, 30, 40, 50, 5000, 5010])
    views = _render_all(ocp.OpenClawContextPruning(), s)
    assert views == [s.prompt(c) for c in s.calls]
    # the same session in a 100k window is at 50%: pruned after the idle hour
    small = _render_all(ocp.OpenClawContextPruning(context_window_tokens=100_000), s)
    assert _tools(small[6])[:3] != _tools(views[6])[:3]


def test_line_separators_in_outputs_reach_openclaw_intact(openclaw):
    """U+2028 ends a line for Node's readline: the pipe must carry it escaped."""
    results = [f"a\u2028b\rc\u2029{k}\n" + _output(k, 70_000) for k in range(4)]
    s = _session(results, 3, SOFT_TIMES)
    views = _render_all(ocp.OpenClawContextPruning(), s)
    assert _tools(views[6]) == [*map(_soft, results[:3]), results[3]]


def test_the_ttl_is_openclaws_setting(openclaw):
    s = _session([_output(k, 70_000) for k in range(4)], 3, SOFT_TIMES)
    views = _render_all(ocp.OpenClawContextPruning(ttl="10m"), s)
    assert views == [s.prompt(c) for c in s.calls]  # 300 s idle is under ten minutes


def test_same_session_twice_gives_the_same_bytes(openclaw):
    s = _session([_output(k, 70_000) for k in range(4)], 3, SOFT_TIMES)
    first = [canonical_json(v) for v in _render_all(ocp.OpenClawContextPruning(), s)]
    second = [canonical_json(v) for v in _render_all(ocp.OpenClawContextPruning(), s)]
    assert first == second
    assert first[6] != canonical_json(s.prompt(s.calls[6]))


def test_replays_to_a_record_and_by_name(openclaw):
    s = _session([_output(k, 70_000) for k in range(4)], 3, SOFT_TIMES)
    assert "openclaw_context_pruning" in method_names()
    [vanilla, peer] = [
        m
        for m in default_methods(peers={"openclaw_context_pruning"})
        if m.name in ("vanilla", "openclaw_context_pruning")
    ]
    assert (vanilla.kind, peer.kind) == ("vanilla", "peer")
    ours = replay([s], peer, profile="anthropic")
    base = replay([s], Vanilla(), profile="anthropic")
    rec = ours.record()
    assert rec["method"] == "openclaw_context_pruning" and rec["calls"] == len(s.calls)
    prompts = [c.prompt_tokens for c in ours.calls]
    assert prompts[:6] == [c.prompt_tokens for c in base.calls][:6]
    assert prompts[6] < base.calls[6].prompt_tokens
    assert [c.prefix_break for c in ours.calls] == [False] * 6 + [True, False]  # rewritten once


# ---------------------------------------------------------------------------
# without Node: conversion and discovery
# ---------------------------------------------------------------------------
def test_converts_chat_messages_to_openclaw_agent_messages():
    history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "let me look",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "A"}]},
    ]
    assert ocp.to_openclaw(history) == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "let me look"},
                {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a"}},
            ],
        },
        {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "read",
            "content": [{"type": "text", "text": "A"}],
            "isError": False,
        },
    ]


def test_missing_names_the_directory_it_was_given(tmp_path, monkeypatch):
    monkeypatch.setenv(ocp.ENV_DIR, str(tmp_path))
    why = ocp.missing()
    assert why is not None and ocp.ENV_DIR in why and str(tmp_path) in why


def test_a_changed_dist_layout_stops_the_driver_with_the_missing_name(openclaw, tmp_path):
    (tmp_path / "package.json").write_text('{"name": "openclaw", "version": "0.0.0"}')
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "tool-result-truncation-x.mjs").write_text("function f() {}\nexport { f as n };\n")
    node, _ = ocp.find_node()
    assert node is not None
    with pytest.raises(RuntimeError, match="pruneExpiredCacheTtlToolResults: OpenClaw's layout changed"):
        ocp._Driver(node, tmp_path)
