"""The replay's segment memo: priced renders depend on their content, never on which
Python objects carry it (a proxy's forwarded bodies are fresh parses every call)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tokenpilot.measure.bench.methods import Method, MethodSession, Rendered, default_methods
from tokenpilot.measure.bench.peers import missing_peers, peer_methods
from tokenpilot.measure.bench.replay import _Segments, render_digests, replay
from tokenpilot.measure.cachesim import message_segments
from tokenpilot.measure.workload import generate

TAU = Path("/work/shared/traces/tau_bench")


@dataclass(slots=True)
class _Fresh:
    """`inner`, with every render copied through JSON: same bytes, new objects, each
    dropped after its call as a proxy's parsed body is."""

    inner: Any
    kind: ClassVar[str] = "method"

    @property
    def name(self) -> str:
        return self.inner.name

    def for_profile(self, profile: str) -> _Fresh:
        for_profile = getattr(self.inner, "for_profile", None)
        return _Fresh(for_profile(profile)) if for_profile is not None else self

    def hindsight(self, *args: Any) -> _Fresh:
        hindsight = getattr(self.inner, "hindsight", None)
        return _Fresh(hindsight(*args)) if hindsight is not None else self

    def session(self, session_id: str) -> MethodSession:
        return _FreshSession(self.inner.session(session_id))


class _FreshSession:
    def __init__(self, inner: MethodSession) -> None:
        self.inner = inner

    def render(
        self, prompt: list[dict[str, Any]], tools: list[dict[str, Any]], timestamp: float | None
    ) -> Rendered:
        r = self.inner.render(prompt, tools, timestamp)
        messages, tools_out = json.loads(json.dumps([r.messages, r.tools]))
        return Rendered(messages, tools_out, r.stable, r.artifact_ids, r.side_calls)

    def recall_text(self, artifact_id: str) -> str | None:
        return self.inner.recall_text(artifact_id)

    def close(self) -> None:
        self.inner.close()


def _sessions() -> list:
    sessions = generate(seed=0, sessions=1)
    if TAU.is_dir():  # OpenAI-format tool calls: assistant messages whose content is None
        from tokenpilot.measure.traces import load

        sessions += load(str(TAU))[:3]
    return sessions


def _methods() -> list[Method]:
    """Every built-in method, and each deterministic peer whose code is installed here."""
    methods = default_methods()
    gaps = missing_peers()
    from tokenpilot.measure.bench.peers import peer_method_names

    # LightMem2 (all its rows) writes `Date.now()` into its recovery hints, so two runs never
    # match; its renders are fresh objects already (a Node process's JSON)
    usable = [
        n for n, mod in peer_method_names().items() if mod not in gaps and not n.startswith("lightmem2")
    ]
    return methods + (peer_methods(usable) if usable else [])


@pytest.fixture(scope="module")
def sessions():
    return _sessions()


def _priced(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in ("cost_usd", "prefix_breaks", "hit_tokens", "miss_tokens", "retention")}


@pytest.mark.parametrize("method", _methods(), ids=lambda m: m.name)
def test_fresh_objects_price_the_same(sessions, method):
    """A method's renders, priced again as fresh JSON objects, give the same cost,
    breaks and request digests."""
    fresh = _Fresh(method)
    plain = replay(sessions, method, trace_set="memo")
    again = replay(sessions, fresh, trace_set="memo")
    assert _priced(again.record()) == _priced(plain.record())
    assert again.digests == plain.digests
    kw = {"mode": "continuous", "profile": "openai", "recalls": plain.recalls}
    assert render_digests(sessions, fresh, **kw) == plain.digests


def test_a_freed_tool_calls_list_never_hands_back_another_message():
    """Regression: the memo keyed `tool_calls` by id but kept only `content` (None
    here) alive, so a new list at a freed list's address got the old segments."""
    memo = _Segments(breakpoints=False)
    for i in range(200):
        msg = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": str(i)}}
            ],
        }
        assert memo.of(msg, 3) == message_segments(dict(msg), 3)
        del msg  # freed, as a proxy's parsed body is after its call


def test_a_changed_value_under_the_same_key_is_recomputed():
    """A hit needs every value to be the very object the memo keeps, not an equal id."""
    memo = _Segments(breakpoints=False)
    calls = [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    first = memo.of({"role": "assistant", "content": None, "tool_calls": calls}, 2)
    assert memo.of({"role": "assistant", "content": None, "tool_calls": calls}, 2) is first
    other = memo.of({"role": "assistant", "content": "note", "tool_calls": calls}, 2)
    assert other != first
    extra = memo.of({"role": "assistant", "content": None, "tool_calls": calls, "name": "x"}, 2)
    assert extra == message_segments(
        {"role": "assistant", "content": None, "tool_calls": calls, "name": "x"}, 2
    )
