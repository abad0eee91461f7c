"""LangChain's own middleware as bench peers: what runs is LangChain's code, through its hooks."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

pytest.importorskip(
    "langchain.agents.middleware", reason="the peers need langchain: pip install 'tokenpilot[peers]'"
)

from langchain.agents.middleware import ContextEditingMiddleware, SummarizationMiddleware  # noqa: E402

from tokenpilot.cli import main  # noqa: E402
from tokenpilot.measure.bench import run_bench  # noqa: E402
from tokenpilot.measure.bench.methods import Rendered, Vanilla  # noqa: E402
from tokenpilot.measure.bench.peers import peer_methods  # noqa: E402
from tokenpilot.measure.bench.peers.langchain import LangChainClearToolUses, LangChainSummarization  # noqa: E402
from tokenpilot.measure.bench.replay import replay  # noqa: E402
from tokenpilot.measure.traces.model import RecordedCall, Session  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a coding agent."}


def _session(steps: int = 10, out_chars: int = 8000, sid: str = "s") -> Session:
    """One task: the user asks, then `steps` tool calls each with a big output; a call per step."""
    msgs = [SYSTEM, {"role": "user", "content": "Fix the failing test in parser.py"}]
    calls = []
    for k in range(steps):
        calls.append(RecordedCall(0, len(msgs), timestamp=1000.0 + 10 * k))
        args = json.dumps({"path": f"src/mod_{k}.py"})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"call_{k}", "type": "function", "function": {"name": "read", "arguments": args}}
                ],
            }
        )
        body = "\n".join(f"line {i} of mod_{k}: value_{k}_{i}" for i in range(out_chars // 30))
        msgs.append({"role": "tool", "tool_call_id": f"call_{k}", "content": body})
    calls.append(RecordedCall(0, len(msgs), timestamp=1000.0 + 10 * steps))
    msgs.append({"role": "assistant", "content": "Fixed: value_9_3 was off by one."})
    return Session(sid, "inline", "openai_chat", msgs, calls=calls, task_starts=[1])


def _render_all(method, session: Session) -> list[Rendered]:
    ms = method.session(session.id)
    return [ms.render(session.prompt(c), session.tools, c.timestamp) for c in session.calls]


def test_clear_tool_uses_runs_langchains_wrap_model_call(monkeypatch):
    calls = []
    real = ContextEditingMiddleware.wrap_model_call

    def spy(self, request, handler):
        calls.append(len(request.messages))
        return real(self, request, handler)

    monkeypatch.setattr(ContextEditingMiddleware, "wrap_model_call", spy)
    session = _session()
    out = _render_all(LangChainClearToolUses(trigger=5_000), session)
    assert calls == [len(session.prompt(c)) - 1 for c in session.calls]  # every call, system aside
    last = out[-1].messages
    tools = [m for m in last if m.get("role") == "tool"]
    assert [m["content"] for m in tools[:-3]] == ["[cleared]"] * (len(tools) - 3)
    assert all(m["content"].startswith("line 0") for m in tools[-3:])  # LangChain keeps 3


def test_clear_tool_uses_changes_only_what_langchain_changed():
    session = _session()
    prompt = session.prompt(session.calls[-1])
    sent = _render_all(LangChainClearToolUses(trigger=5_000), session)[-1].messages
    assert len(sent) == len(prompt)
    for before, after in zip(prompt, sent):
        if after.get("content") == "[cleared]":
            assert before["role"] == "tool" and {**after, "content": before["content"]} == before
        else:
            assert after is before  # the agent's own dict, bytes untouched


def test_clear_tool_uses_at_its_default_does_not_fire_below_100k_chars_over_4():
    session = _session(steps=10, out_chars=8000)  # ~80k chars: ~20k tokens by LangChain's count
    out = _render_all(LangChainClearToolUses(), session)
    assert all(r.messages == session.prompt(c) for r, c in zip(out, session.calls))


def test_summarization_runs_before_model_and_its_summary_persists(monkeypatch):
    fired = []
    real = SummarizationMiddleware.before_model

    def spy(self, state, runtime):
        update = real(self, state, runtime)
        fired.append(update is not None)
        return update

    monkeypatch.setattr(SummarizationMiddleware, "before_model", spy)
    session = _session(steps=14, out_chars=1500)
    out = _render_all(LangChainSummarization(trigger=3_000, keep_messages=6), session)
    first = fired.index(True)
    assert len(fired) == len(session.calls) and first > 0
    summarised = out[first].messages
    assert summarised[0] == SYSTEM
    assert summarised[1]["role"] == "user"
    assert summarised[1]["content"].startswith("Here is a summary of the conversation to date:")
    assert "tool: line 0 of mod_" in summarised[1]["content"]  # the extract of what it summarised
    assert out[first].side_calls and out[first].side_calls[0].output_tokens > 0
    nxt = out[first + 1].messages
    if not fired[first + 1]:  # no new summary: the state kept the old one, and grows append-only
        assert nxt[: len(summarised)] == summarised and not out[first + 1].side_calls


def test_the_summariser_calls_are_priced():
    session = _session(steps=14, out_chars=6000)
    rec = replay([session], LangChainSummarization(trigger=8_000, keep_messages=6)).record()
    assert rec["side_calls"] >= 1
    priced = replay(
        [session], _WithoutSideCalls(LangChainSummarization(trigger=8_000, keep_messages=6))
    ).record()
    assert rec["cost_usd"] > priced["cost_usd"]


class _WithoutSideCalls:
    """The same method with its own calls dropped: what the bill would be if they were free."""

    def __init__(self, inner):
        self.inner, self.name, self.kind = inner, inner.name, inner.kind

    def session(self, session_id):
        return _FreeSideCalls(self.inner.session(session_id))


class _FreeSideCalls:
    def __init__(self, inner):
        self.inner = inner

    def render(self, prompt, tools, ts):
        return replace(self.inner.render(prompt, tools, ts), side_calls=())

    def recall_text(self, aid):
        return self.inner.recall_text(aid)

    def close(self):
        self.inner.close()


def test_every_langchain_peer_is_deterministic_and_a_random_one_is_caught():
    sessions = [_session(sid="a"), _session(steps=14, out_chars=1500, sid="b")]

    def methods():
        return [
            Vanilla(),
            LangChainClearToolUses(trigger=5_000),
            LangChainSummarization(trigger=3_000, keep_messages=6),
            _Random(),
        ]

    res = {r.method: r.record() for r in run_bench({"x": sessions}, methods=methods, determinism=True)}
    assert res["vanilla"]["deterministic"] is True
    assert res["langchain_clear_tool_uses"]["deterministic"] is True
    assert res["langchain_summarization"]["deterministic"] is True
    assert res["random"]["deterministic"] is False


class _Random:
    name, kind = "random", "sketch"

    def session(self, session_id):
        rng = random.Random()  # seeded from the OS: a fresh run renders other bytes

        class S:
            def render(self, prompt, tools, ts):
                out = [*prompt[:-1], {**prompt[-1], "content": f"{prompt[-1].get('content')} {rng.random()}"}]
                return Rendered(out, tools, len(out))

            def recall_text(self, aid):
                return None

            def close(self):
                return None

        return S()


def test_peer_methods_lists_the_langchain_rows_by_name():
    names = [
        m.name
        for m in peer_methods({"langchain_clear_tool_uses", "langchain_clear_30k", "langchain_summarization"})
    ]
    assert names == ["langchain_clear_tool_uses", "langchain_clear_30k", "langchain_summarization"]
    assert all(m.kind == "peer" for m in peer_methods({"langchain_summarization"}))


def test_bench_cli_runs_named_peers_and_reports_same_bytes(capsys):
    assert main(["bench", "--sessions", "1", "--methods", "vanilla,langchain_clear_30k"]) == 0
    out = capsys.readouterr().out
    assert "langchain_clear_30k" in out
    assert "same bytes on a second run with fresh methods: yes, all 2 methods" in out
