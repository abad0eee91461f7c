"""tokenpilot_langgraph in agents someone else builds: `create_react_agent(pre_model_hook=...)`
and `langchain.agents.create_agent(middleware=[TokenPilotMiddleware()])`."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph import (
    PROMPT,
    TASKS,
    THREAD,
    TOOLS,
    html_page,
    is_prefix,
    make_pilot,
    payload,
    recall_seen_id,
    replies,
)

from tokenpilot import RECALL_TOOL_NAME
from tokenpilot._canonical import artifact_id_for
from tokenpilot_langgraph import (
    STATE_KEY,
    TokenPilotReactState,
    thread_stats,
    tokenpilot_pre_model_hook,
    tokenpilot_tool_node,
)
from tokenpilot_langgraph.testing import ScriptedChatModel, answer, tool_call

URL = "https://news.example/today"
RECALL_SCRIPT = [tool_call("fetch_page", {"url": URL}), recall_seen_id, answer("ok")]


def check_run(model: ScriptedChatModel, pilot: Any, state: dict[str, Any], first: int = 0) -> None:
    """What every integration must give: reduced view, full state, recall, stable prefix."""
    page = html_page(URL)
    reqs = model.requests[first:]
    fetched = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == "fetch_page"][0]
    assert fetched.content == page  # full history in state
    assert fetched.artifact["tokenpilot"]["artifact_id"] == artifact_id_for(page)
    seen = [m for m in reqs[1].messages if isinstance(m, ToolMessage)][0]
    assert artifact_id_for(page) in seen.content and len(seen.content) < len(page) / 3
    recalled = [m for m in reqs[2].messages if isinstance(m, ToolMessage)][-1]
    assert recalled.name == RECALL_TOOL_NAME and recalled.content.endswith(page)
    assert isinstance(reqs[0].messages[0], SystemMessage) and "{{TP_DATE_1}}" in reqs[0].messages[0].content
    for a, b in zip(reqs, reqs[1:]):
        assert payload(a)[0] == payload(b)[0]
        assert is_prefix(payload(a)[1], payload(b)[1])
    assert RECALL_TOOL_NAME in payload(reqs[0])[0]


# ---------------------------------------------------------------------------
# an existing StateGraph, with the lines the README tells users to add
# ---------------------------------------------------------------------------
def test_custom_state_graph_with_readme_lines() -> None:
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from tokenpilot_langgraph import (
        EstimatorNode,
        ModelNode,
        TokenPilotChannel,
        estimator_route,
    )

    model, pilot = ScriptedChatModel(replies=RECALL_SCRIPT + replies(TASKS[:1])), make_pilot()

    class State(MessagesState, TokenPilotChannel): ...

    builder = StateGraph(State)
    builder.add_node("agent", ModelNode(model, TOOLS, pilot, prompt=PROMPT).as_runnable())
    builder.add_node("tools", tokenpilot_tool_node(TOOLS, pilot))
    builder.add_node("estimator", EstimatorNode(pilot).as_runnable())
    route = estimator_route(pilot)
    builder.add_conditional_edges(START, route, ["agent", "estimator"])
    builder.add_conditional_edges("tools", route, ["agent", "estimator"])
    builder.add_edge("estimator", END)
    builder.add_conditional_edges("agent", tools_condition)
    graph = builder.compile(checkpointer=InMemorySaver())
    graph.invoke({"messages": [HumanMessage("Read today's news page")]}, THREAD)
    check_run(model, pilot, graph.get_state(THREAD).values)
    graph.invoke({"messages": [HumanMessage(TASKS[0][0])]}, THREAD)
    assert pilot.lifecycle_stats("thread-1")["estimator_runs"] >= 2
    assert graph.get_state(THREAD).values[STATE_KEY]["lifecycle_at"][1] in (0, 1)


def test_a_state_without_the_tokenpilot_channel_warns_with_the_fix() -> None:
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from tokenpilot_langgraph import ModelNode
    from tokenpilot_langgraph.nodes import MISSING_CHANNEL, _warned

    _warned.discard("thread-1")
    model, pilot = ScriptedChatModel(replies=RECALL_SCRIPT + replies(TASKS[:1])), make_pilot()
    builder = StateGraph(MessagesState)  # no TokenPilotChannel: the update is dropped
    builder.add_node("agent", ModelNode(model, TOOLS, pilot, prompt=PROMPT).as_runnable())
    builder.add_node("tools", tokenpilot_tool_node(TOOLS, pilot))
    builder.add_edge(START, "agent")
    builder.add_edge("tools", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    graph = builder.compile(checkpointer=InMemorySaver())
    with pytest.warns(RuntimeWarning, match="TokenPilotChannel"):
        graph.invoke({"messages": [HumanMessage("Read today's news page")]}, THREAD)
    assert "class State(MessagesState, TokenPilotChannel)" in MISSING_CHANNEL


# ---------------------------------------------------------------------------
# (g) create_react_agent + pre_model_hook
# ---------------------------------------------------------------------------
def react_agent(model: ScriptedChatModel, pilot: Any) -> Any:
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in langgraph 1.x
        return create_react_agent(
            model,
            tokenpilot_tool_node(TOOLS, pilot),
            pre_model_hook=tokenpilot_pre_model_hook(pilot, prompt=PROMPT, tools=TOOLS, checkpoint=True),
            state_schema=TokenPilotReactState,
            checkpointer=InMemorySaver(),
        )


def test_pre_model_hook_renders_view_every_call() -> None:
    model, pilot = ScriptedChatModel(replies=RECALL_SCRIPT + replies(TASKS[:1])), make_pilot()
    agent = react_agent(model, pilot)
    agent.invoke({"messages": [HumanMessage("Read today's news page")]}, THREAD)
    state = agent.get_state(THREAD).values
    check_run(model, pilot, state)
    # llm_input_messages is the latest view, not a stale one
    assert len(state["llm_input_messages"]) == len(model.requests[-1].messages)
    assert state[STATE_KEY]["seq"] == 3

    agent.invoke({"messages": [HumanMessage(TASKS[0][0])]}, THREAD)
    assert len(model.requests) == 3 + len(TASKS[0][1]) + 1
    # the manual estimator ran on worker threads between renders
    assert pilot.lifecycle_stats("thread-1")["estimator_runs"] >= 2
    # usage of each reply is read back at the next render
    st = thread_stats(pilot, "thread-1")
    assert all(c.input_tokens is not None for c in st.calls[:-1])


async def test_pre_model_hook_async() -> None:
    model, pilot = ScriptedChatModel(replies=list(RECALL_SCRIPT)), make_pilot()
    agent = react_agent(model, pilot)
    out = await agent.ainvoke({"messages": [HumanMessage("Read today's news page")]}, THREAD)
    check_run(model, pilot, out)


# ---------------------------------------------------------------------------
# (h) langchain.agents.create_agent + TokenPilotMiddleware (optional extra)
# ---------------------------------------------------------------------------
langchain_agents = pytest.importorskip(
    "langchain.agents", reason="langchain (tokenpilot[langchain]) not installed"
)


def middleware_agent(model: ScriptedChatModel, pilot: Any, **kw: Any) -> Any:
    from tokenpilot_langgraph.middleware import TokenPilotMiddleware

    return langchain_agents.create_agent(
        model,
        TOOLS,
        system_prompt=PROMPT,
        middleware=[TokenPilotMiddleware(pilot, **kw)],
        checkpointer=InMemorySaver(),
    )


def test_middleware_path() -> None:
    model, pilot = ScriptedChatModel(replies=RECALL_SCRIPT + replies(TASKS[:1])), make_pilot()
    agent = middleware_agent(model, pilot, prompt_cache_key=True)
    agent.invoke({"messages": [HumanMessage("Read today's news page")]}, THREAD)
    state = agent.get_state(THREAD).values
    check_run(model, pilot, state)
    assert {r.kwargs.get("prompt_cache_key") for r in model.requests} == {"thread-1"}
    assert state[STATE_KEY]["seq"] == 3

    agent.invoke({"messages": [HumanMessage(TASKS[0][0])]}, THREAD)
    stats = pilot.lifecycle_stats("thread-1")
    assert stats["estimator_runs"] >= 2
    assert (
        agent.get_state(THREAD).values[STATE_KEY]["lifecycle"]["stats"]["estimator_runs"]
        == stats["estimator_runs"]
    )
    st = thread_stats(pilot, "thread-1")
    assert st.calls[-1].cache_read_tokens and st.cache_read_tokens > 0.5 * st.input_tokens
    # the canonical tool list (sorted, recall included) replaced the agent's own
    names = [t["function"]["name"] for t in json.loads(payload(model.requests[0])[0])]
    assert names == sorted([t.name for t in TOOLS] + [RECALL_TOOL_NAME])


async def test_middleware_path_async() -> None:
    model, pilot = ScriptedChatModel(replies=list(RECALL_SCRIPT)), make_pilot()
    agent = middleware_agent(model, pilot)
    out = await agent.ainvoke({"messages": [HumanMessage("Read today's news page")]}, THREAD)
    check_run(model, pilot, out)
