"""tokenpilot_langgraph: the graph built by `create_tokenpilot_agent`, driven by a scripted model.

Every request the model receives is recorded, so the tests check what a provider would
see: a byte-stable prefix between evictions, reduced tool output with the original one
recall away, the estimator beside the agent node on batch boundaries, identical bytes
after a checkpoint resume in a fresh TokenPilot, and the same final context as
`tokenpilot bench` replaying the same session.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from tokenpilot import RECALL_TOOL, RECALL_TOOL_NAME, ArtifactStore, Config, TokenPilot
from tokenpilot._canonical import artifact_id_for, canonical_json
from tokenpilot.estimator import OfflineEstimator
from tokenpilot.measure.bench.methods import Rendered, TokenPilotMethod
from tokenpilot.measure.bench.replay import replay
from tokenpilot.measure.traces.model import RecordedCall, Session
from tokenpilot_langgraph import (
    STATE_KEY,
    create_tokenpilot_agent,
    default_pilot,
    thread_stats,
    to_openai,
    tool_specs,
)
from tokenpilot_langgraph.testing import ScriptedChatModel, ScriptedRequest, answer, tool_call

# A date in the system prompt: the core renders it as a placeholder plus a values block.
PROMPT = "You are a careful assistant. Current date: 2025-06-01."
THREAD = {"configurable": {"thread_id": "thread-1"}}


# ---------------------------------------------------------------------------
# The scenario: four unrelated tasks, 30 model calls, HTML pages and shell logs.
# ---------------------------------------------------------------------------
def html_page(title: str, scripts: int = 48) -> str:
    """A page like a real fetch: inline scripts, a big nav, a little content (> 20 KB)."""
    data = "".join(
        f"<script>window.__data{i} = {json.dumps({'k': i, 'v': 'x' * 200})};</script>" for i in range(scripts)
    )
    nav = "<nav>" + "".join(f"<a href='/section/{i}'>Section {i}</a>" for i in range(120)) + "</nav>"
    body = "".join(
        f"<p>{title} paragraph {i}: the measured value is {i * 37 % 101} units.</p>" for i in range(60)
    )
    return (
        f"<html><head><title>{title}</title>{data}<style>body{{color:red}}</style></head>"
        f"<body>{nav}<main><h1>{title}</h1>{body}</main><footer>(c) site</footer></body></html>"
    )


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page and return its HTML."""
    return html_page(url)


@tool
def write_file(path: str, content: str) -> str:
    """Write a file."""
    return f"wrote {len(content)} bytes to {path}"


@tool
def run_shell(command: str) -> str:
    """Run a shell command."""
    # lines that differ in words, not only in numbers: a log of one repeated line would be
    # folded at ingestion (log folding), leaving eviction nothing to do in these tests
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")
    return "\n".join(
        f"line {i}: output of {command} {words[i % 9]} {words[i * 4 % 9]} {'.' * 50}" for i in range(80)
    )


TOOLS = [fetch_page, write_file, run_shell]

TASKS: list[tuple[str, list[tuple[str, dict[str, Any]]], str]] = [
    (
        "Summarise the Iceland travel guide into iceland_notes.md",
        [
            ("fetch_page", {"url": "https://travel.example/iceland"}),
            ("fetch_page", {"url": "https://travel.example/iceland/weather"}),
            ("run_shell", {"command": "ls guides"}),
            ("fetch_page", {"url": "https://travel.example/iceland/food"}),
            ("run_shell", {"command": "wc -l guides/iceland"}),
            ("run_shell", {"command": "grep -c fjord guides/iceland"}),
            ("write_file", {"path": "iceland_notes.md", "content": "Iceland notes"}),
        ],
        "Wrote iceland_notes.md.",
    ),
    (
        "Compute the quarterly revenue totals from the finance dashboard into revenue.csv",
        [
            ("fetch_page", {"url": "https://finance.example/dashboard"}),
            ("run_shell", {"command": "python totals.py"}),
            ("fetch_page", {"url": "https://finance.example/q3"}),
            ("run_shell", {"command": "python check.py"}),
            ("run_shell", {"command": "python totals.py --verify"}),
            ("write_file", {"path": "revenue.csv", "content": "q,total"}),
        ],
        "Wrote revenue.csv.",
    ),
    (
        "Draft a birthday poem for grandma Rosa into poem.txt",
        [
            ("fetch_page", {"url": "https://poems.example/birthday"}),
            ("fetch_page", {"url": "https://poems.example/rhymes"}),
            ("run_shell", {"command": "aspell check poem_draft"}),
            ("fetch_page", {"url": "https://poems.example/meter"}),
            ("run_shell", {"command": "cat poem_draft"}),
            ("write_file", {"path": "poem.txt", "content": "Roses for Rosa"}),
        ],
        "Wrote poem.txt.",
    ),
    (
        "Benchmark the sorting library on large integer arrays into bench_report.md",
        [
            ("run_shell", {"command": "pytest benchmarks -k sort"}),
            ("fetch_page", {"url": "https://docs.example/sortlib"}),
            ("run_shell", {"command": "python bench_sort.py"}),
            ("run_shell", {"command": "python bench_sort.py --large"}),
            ("fetch_page", {"url": "https://docs.example/sortlib/tuning"}),
            ("run_shell", {"command": "python bench_sort.py --tuned"}),
            ("write_file", {"path": "bench_report.md", "content": "results"}),
        ],
        "Wrote bench_report.md.",
    ),
]


def replies(tasks: list[Any] = TASKS) -> list[AIMessage]:
    out: list[AIMessage] = []
    for _, calls, final in tasks:
        out += [tool_call(name, args) for name, args in calls] + [answer(final)]
    return out


N_CALLS = sum(len(calls) + 1 for _, calls, _ in TASKS)


def make_pilot(path: Any = None) -> TokenPilot:
    """The graph's pilot: manual estimator schedule, deterministic offline estimator.
    The test prompt is short, so placeholders are asked for at any length."""
    store = ArtifactStore(path) if path is not None else None
    return default_pilot(Config(min_shared_tokens=0), estimator=OfflineEstimator(), store=store)


def build(model: ScriptedChatModel, pilot: TokenPilot, checkpointer: Any = None) -> Any:
    return create_tokenpilot_agent(
        model, TOOLS, pilot=pilot, checkpointer=checkpointer or InMemorySaver(), prompt=PROMPT
    )


def run_tasks(graph: Any, tasks: list[Any], config: dict[str, Any] = THREAD) -> None:
    for task, _, _ in tasks:
        graph.invoke({"messages": [HumanMessage(task)]}, config)


def payload(req: ScriptedRequest) -> tuple[str, list[str]]:
    """A request as bytes: the tool list, and each message."""
    return json.dumps(req.tools, ensure_ascii=False), [
        json.dumps(m, ensure_ascii=False) for m in req.openai_messages()
    ]


def is_prefix(a: list[str], b: list[str]) -> bool:
    return len(a) <= len(b) and b[: len(a)] == a


# ---------------------------------------------------------------------------
# (a) byte-stable prefix, broken only by evictions, which stats count
# ---------------------------------------------------------------------------
def test_prefix_byte_identical_between_evictions() -> None:
    model, pilot = ScriptedChatModel(replies=replies()), make_pilot()
    run_tasks(build(model, pilot), TASKS)
    assert len(model.requests) == N_CALLS
    st = thread_stats(pilot, "thread-1")
    assert len(st.calls) == N_CALLS

    breaks = []
    for i in range(1, N_CALLS):
        tools_a, msgs_a = payload(model.requests[i - 1])
        tools_b, msgs_b = payload(model.requests[i])
        assert tools_a == tools_b  # the tool list never changes
        stable_a = msgs_a[: st.calls[i - 1].tail_start]  # without the per-call tail (none here)
        assert "{{TP_DATE_1}}" in msgs_a[0]
        if not is_prefix(stable_a, msgs_b):
            breaks.append(i)
    evictions = [i for i, c in enumerate(st.calls) if c.prepare.prefix_break]
    assert breaks == evictions
    said = str(st)  # a person's summary, not a dict's repr
    assert said.startswith(f"thread thread-1: {N_CALLS} model call(s)") and "{" not in said
    assert f"{st.prefix_breaks} prefix break(s)" in said and st.summary()["model_calls"] == N_CALLS
    assert all(st.calls[i].prepare.prefix_break == "eviction" for i in breaks)
    assert 1 <= st.eviction_breaks == st.prefix_breaks == len(breaks)
    assert pilot.lifecycle_stats("thread-1")["prefix_breaks"] == len(breaks)
    # the model sees far less than the history in state
    assert st.last is not None and st.last.prepare.tokens < st.last.prepare.raw_tokens / 4
    # cache reads reported by the model are read back into the stats
    assert st.cache_read_tokens > 0.6 * st.input_tokens
    assert st.calls[1].cache_read_tokens and st.calls[1].input_tokens


# ---------------------------------------------------------------------------
# (b) reduced at ingestion, original in state and store, back through the native tool
# ---------------------------------------------------------------------------
def recall_seen_id(req: ScriptedRequest) -> AIMessage:
    ids = re.findall(r"art_[0-9a-f]{24}", req.text())
    assert ids, "the reduced output must quote its artifact id"
    return tool_call(RECALL_TOOL_NAME, {"artifact_id": ids[-1]})


def test_html_reduced_at_ingestion_and_recalled_through_native_tool() -> None:
    page = html_page("https://news.example/today")
    assert len(page) > 20_000 and "<script>" in page and "<nav>" in page
    model = ScriptedChatModel(
        replies=[tool_call("fetch_page", {"url": "https://news.example/today"}), recall_seen_id, answer("ok")]
    )
    pilot = make_pilot()
    graph = build(model, pilot)
    graph.invoke({"messages": [HumanMessage("Read today's news page")]}, THREAD)

    # state keeps the original; the artifact tag names the id prepare uses
    state = graph.get_state(THREAD).values
    fetched = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == "fetch_page"][0]
    assert fetched.content == page
    tag = fetched.artifact["tokenpilot"]
    aid = artifact_id_for(page)
    assert tag["artifact_id"] == aid and tag["reduced"] is True and "html_slimming" in tag["passes"]
    assert pilot.store.get("thread-1", aid) == page

    # the model saw the reduced form, quoting the same id
    seen = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)][0]
    assert aid in seen.content and "<script>" not in seen.content and len(seen.content) < len(page) / 3

    # the recall went through the native tool and the model got the original, in full
    recalled = [m for m in model.requests[2].messages if isinstance(m, ToolMessage)][-1]
    assert recalled.name == RECALL_TOOL_NAME
    assert recalled.content.endswith(page) and len(recalled.content) - len(page) < 80

    # recall_artifact is in the tool list from the first call, identical to the core's spec
    for req in model.requests:
        names = [t["function"]["name"] for t in req.tools]
        assert RECALL_TOOL_NAME in names
        spec = req.tools[names.index(RECALL_TOOL_NAME)]
        assert canonical_json(spec) == canonical_json(RECALL_TOOL)
    assert len({json.dumps(r.tools) for r in model.requests}) == 1
    # the recall is checkpointed (the core's recall gate counts it)
    assert state[STATE_KEY]["seq"] == 3


def test_prompt_cache_key_bound_per_thread() -> None:
    model = ScriptedChatModel(replies=[answer("a"), answer("b")])
    pilot = make_pilot()
    graph = create_tokenpilot_agent(
        model, TOOLS, pilot=pilot, checkpointer=InMemorySaver(), prompt=PROMPT, prompt_cache_key=True
    )
    graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "A"}})
    graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "B"}})
    assert [r.kwargs.get("prompt_cache_key") for r in model.requests] == ["A", "B"]
    assert graph.tokenpilot is pilot


# ---------------------------------------------------------------------------
# (c) the estimator: only on batch boundaries, always in the agent's superstep
# ---------------------------------------------------------------------------
def test_estimator_runs_on_batch_boundaries_beside_the_agent() -> None:
    model, pilot = ScriptedChatModel(replies=replies()), make_pilot()
    graph = build(model, pilot)
    steps: dict[tuple[int, int], list[str]] = {}
    for run, (task, _, _) in enumerate(TASKS):
        for ev in graph.stream({"messages": [HumanMessage(task)]}, THREAD, stream_mode="debug"):
            if ev["type"] == "task":
                steps.setdefault((run, ev["step"]), []).append(ev["payload"]["name"])
    ordered = [sorted(names) for _, names in sorted(steps.items())]
    agent_calls = [names for names in ordered if "agent" in names]
    assert len(agent_calls) == N_CALLS
    assert all("agent" in names for names in ordered if "estimator" in names)  # never alone
    estimated_at = [i for i, names in enumerate(agent_calls) if "estimator" in names]
    # render n holds n complete turns; batch_turns=3: a batch completes at renders 3, 6, 9, ...
    assert estimated_at == list(range(3, N_CALLS, 3))
    assert pilot.lifecycle_stats("thread-1")["estimator_runs"] == len(estimated_at)
    assert not pilot.estimator_due("thread-1")
    # evictions land on the render after an estimator run, never elsewhere
    st = thread_stats(pilot, "thread-1")
    for i, c in enumerate(st.calls):
        if c.prepare.prefix_break:
            assert i - 1 in estimated_at


# ---------------------------------------------------------------------------
# (d) checkpoint resume with a fresh TokenPilot renders the same bytes
# ---------------------------------------------------------------------------
def reference_payloads(tmp_path: Any) -> list[tuple[str, list[str]]]:
    model = ScriptedChatModel(replies=replies())
    run_tasks(build(model, make_pilot(tmp_path / "ref-store")), TASKS)
    return [payload(r) for r in model.requests]


@pytest.mark.parametrize("saver", ["memory", "sqlite"])
def test_checkpoint_resume_in_fresh_pilot_renders_identical_bytes(tmp_path: Any, saver: str) -> None:
    reference = reference_payloads(tmp_path)
    db = tmp_path / "checkpoints.sqlite"
    memory = InMemorySaver()

    def checkpointer() -> Any:
        if saver == "memory":
            return memory
        return SqliteSaver(sqlite3.connect(str(db), check_same_thread=False))

    got: list[tuple[str, list[str]]] = []
    done = 0
    # three "processes": tasks 1 | 2-3 | 4; task 3 ends with an estimator result not yet applied
    for chunk in (TASKS[:1], TASKS[1:3], TASKS[3:]):
        n = sum(len(c) + 1 for _, c, _ in chunk)
        model = ScriptedChatModel(replies=replies(TASKS)[done : done + n])
        pilot = make_pilot(tmp_path / "store")  # a new TokenPilot each time, same artifact dir
        graph = build(model, pilot, checkpointer())
        assert "thread-1" not in pilot.session_ids
        run_tasks(graph, chunk)
        if done:  # the checkpoint was imported, not re-ingested from scratch
            assert thread_stats(pilot, "thread-1").calls[0].prepare.ingested == 2  # answer + new task
        got += [payload(r) for r in model.requests]
        done += n
    assert len(got) == len(reference)
    for i, (a, b) in enumerate(zip(got, reference)):
        assert a == b, f"request {i} differs after resume"


def test_resume_keeps_recall_gate_state(tmp_path: Any) -> None:
    """A recall made before a restart still counts for the core's recall gate after it."""
    url = "https://news.example/today"
    script = [tool_call("fetch_page", {"url": url}), recall_seen_id, recall_seen_id, answer("ok")]
    memory = InMemorySaver()
    model = ScriptedChatModel(replies=script[:2])
    graph = build(model, make_pilot(tmp_path / "s"), memory)
    with pytest.raises(IndexError):  # the script ends after the first recall: a crash mid-run
        graph.invoke({"messages": [HumanMessage("news")]}, THREAD)
    saved = graph.get_state(THREAD).values[STATE_KEY]
    assert len(saved["recalls"]) == 1
    pilot = make_pilot(tmp_path / "s")
    model2 = ScriptedChatModel(replies=[recall_seen_id, answer("ok")])
    build(model2, pilot, memory).invoke(None, THREAD)
    source = f"fetch_page:{url}"
    assert pilot.session("thread-1").state.recall_counts.get(source) == 2


# ---------------------------------------------------------------------------
# (e) the graph ends where `tokenpilot bench` says the same session ends
# ---------------------------------------------------------------------------
class ManualScheduleMethod:
    """TokenPilot as the graph schedules it: the estimator runs right after the render that
    completed a batch (beside the model call), and its result applies at the next render."""

    name = "tokenpilot_manual"

    def __init__(self) -> None:
        self.renders: list[list[dict[str, Any]]] = []

    def session(self, session_id: str) -> Any:
        pilot = make_pilot()
        renders = self.renders

        class _S:
            def render(self, prompt: list[dict[str, Any]], tools: list[dict[str, Any]], ts: Any) -> Rendered:
                p = pilot.prepare(prompt, tools, session_id=session_id)
                if pilot.estimator_due(session_id):
                    pilot.run_estimator(session_id)
                renders.append(p.messages)
                return Rendered(p.messages, p.tools, p.tail_start)

            def recall_text(self, artifact_id: str) -> str | None:
                r = pilot.store.recall(session_id, artifact_id)
                return r.text if r.found else None

            def close(self) -> None:
                return None

        return _S()


def as_bench_session(graph: Any) -> Session:
    history = graph.get_state(THREAD).values["messages"]
    msgs = [{"role": "system", "content": PROMPT}, *to_openai(history)]
    calls = [RecordedCall(0, i) for i, m in enumerate(msgs) if m["role"] == "assistant"]
    starts = [i for i, m in enumerate(msgs) if m["role"] == "user"]
    return Session("thread-1", "langgraph", "openai", msgs, tool_specs(TOOLS), calls, task_starts=starts)


def test_final_context_matches_bench_replay() -> None:
    model, pilot = ScriptedChatModel(replies=replies()), make_pilot()
    graph = build(model, pilot)
    run_tasks(graph, TASKS)
    session = as_bench_session(graph)
    assert len(session.calls) == N_CALLS == 30 and len(session.task_starts) == 4

    aligned = ManualScheduleMethod()
    same_schedule = replay([session], aligned)
    # every request the graph sent is the bench's render of the same call, byte for byte
    assert len(aligned.renders) == N_CALLS
    for req, render in zip(model.requests, aligned.renders):
        assert req.openai_messages() == render
    # and the stock bench method (estimator inline, one render earlier) ends just as small
    stock = replay([session], TokenPilotMethod(config=Config(min_shared_tokens=0)))
    assert same_schedule.calls[-1].prompt_tokens == stock.calls[-1].prompt_tokens
    assert same_schedule.record()["prefix_breaks"] == stock.record()["prefix_breaks"]
    final = thread_stats(pilot, "thread-1").calls[-1].prepare
    assert final.tokens < final.raw_tokens / 4


# ---------------------------------------------------------------------------
# (f) sync and async: invoke, ainvoke, astream render the same bytes
# ---------------------------------------------------------------------------
async def test_sync_and_async_paths_render_identically() -> None:
    tasks = TASKS[:2]
    models = {name: ScriptedChatModel(replies=replies(tasks)) for name in ("invoke", "ainvoke", "astream")}
    pilots = {name: make_pilot() for name in models}
    graphs = {name: build(models[name], pilots[name]) for name in models}
    streamed: list[str] = []
    for task, _, _ in tasks:
        graphs["invoke"].invoke({"messages": [HumanMessage(task)]}, THREAD)
        await graphs["ainvoke"].ainvoke({"messages": [HumanMessage(task)]}, THREAD)
        async for chunk in graphs["astream"].astream({"messages": [HumanMessage(task)]}, THREAD):
            streamed += list(chunk)
    expected = [payload(r) for r in models["invoke"].requests]
    assert len(expected) == sum(len(c) + 1 for _, c, _ in tasks)
    for name in ("ainvoke", "astream"):
        assert [payload(r) for r in models[name].requests] == expected, name
    assert "estimator" in streamed
    runs = {name: p.lifecycle_stats("thread-1")["estimator_runs"] for name, p in pilots.items()}
    assert len(set(runs.values())) == 1 and runs["invoke"] >= 3


async def test_async_tool_gate_tags_results() -> None:
    model = ScriptedChatModel(replies=[tool_call("fetch_page", {"url": "u"}), answer("ok")])
    graph = build(model, make_pilot())
    out = await graph.ainvoke({"messages": [HumanMessage("get u")]}, THREAD)
    tm = [m for m in out["messages"] if isinstance(m, ToolMessage)][0]
    assert tm.artifact["tokenpilot"]["reduced"] is True


def test_without_checkpointer_uses_a_content_derived_session() -> None:
    model = ScriptedChatModel(replies=[tool_call("fetch_page", {"url": "u"}), recall_seen_id, answer("ok")])
    pilot = make_pilot()
    graph = create_tokenpilot_agent(model, TOOLS, pilot=pilot, prompt=PROMPT)
    graph.invoke({"messages": [HumanMessage("get u")]})
    assert len(pilot.session_ids) == 1
    recalled = [m for m in model.requests[2].messages if isinstance(m, ToolMessage)][-1]
    assert recalled.content.endswith(html_page("u"))


def test_identical_repeated_calls_are_withheld_by_the_core_loop_guard() -> None:
    """The tool still runs (the guard needs its output); the gate marks it, prepare withholds it."""
    same = [tool_call("run_shell", {"command": "make test"}) for _ in range(7)]
    model, pilot = ScriptedChatModel(replies=[*same, answer("stuck")]), make_pilot()
    graph = build(model, pilot)
    graph.invoke({"messages": [HumanMessage("run the tests until they pass")]}, THREAD)
    results = [m for m in graph.get_state(THREAD).values["messages"] if isinstance(m, ToolMessage)]
    notes = [m.artifact["tokenpilot"]["note"] for m in results]
    assert notes[:5] == ["", "dedup", "dedup", "dedup", "dedup"] and notes[5:] == ["loop", "loop"]
    assert all(m.content == results[0].content for m in results)  # state keeps every original
    seen = [m for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert "withheld to break a loop" in seen[-1].content and "withheld" not in seen[4].content


def test_scripted_usage_counts_one_unit_cache_read_never_above_input() -> None:
    model, pilot = ScriptedChatModel(replies=replies()), make_pilot()
    run_tasks(build(model, pilot), TASKS)
    calls = thread_stats(pilot, "thread-1").calls
    assert all(c.input_tokens and c.cache_read_tokens <= c.input_tokens for c in calls)
    assert any(c.cache_read_tokens for c in calls[1:])
