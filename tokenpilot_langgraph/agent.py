"""`create_tokenpilot_agent`: a ReAct agent graph with TokenPilot in every place it belongs.

    START ──route──▶ agent ──tools_condition──▶ tools ──route──▶ agent …
              └────▶ estimator (same superstep as agent, only when a batch completes)

`agent` renders the managed view and calls the model; `tools` is a `ToolNode` with the
ingestion gate and `recall_artifact`; `estimator` runs the lifecycle estimator beside
the model call. State: the full message history plus the `tokenpilot` channel, so any
checkpointer (InMemorySaver, SqliteSaver, ...) resumes a thread with identical renders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import tools_condition

from tokenpilot import Config, TokenPilot
from tokenpilot.lifecycle.schedule import LifecycleConfig
from tokenpilot.pilot import default_estimator
from tokenpilot_langgraph.nodes import EstimatorNode, ModelNode, estimator_route
from tokenpilot_langgraph.state import TokenPilotAgentState
from tokenpilot_langgraph.tool_node import tokenpilot_tool_node


def default_pilot(config: Config | None = None, *, keep: str = "balanced", **kwargs: Any) -> TokenPilot:
    """A TokenPilot for graphs: eviction every 3 turns, the estimator run by the graph;
    `keep` is the retention dial (`LifecycleConfig.for_keep`: all, balanced, lean)."""
    kwargs.setdefault("lifecycle", LifecycleConfig.for_keep(keep, schedule="manual"))
    if "estimator" not in kwargs:
        kwargs["estimator"] = default_estimator()
    return TokenPilot(config, **kwargs)


def create_tokenpilot_agent(
    model: Any,
    tools: Sequence[Any],
    *,
    pilot: TokenPilot | None = None,
    checkpointer: Any = None,
    prompt: str | SystemMessage | None = None,
    store: Any = None,
    prompt_cache_key: bool | None = None,
    estimator_wait_s: float = 60.0,
    interrupt_before: list[str] | None = None,
    interrupt_after: list[str] | None = None,
    debug: bool = False,
    name: str | None = None,
    keep: str = "balanced",
) -> Any:
    """Build and compile the agent graph. `pilot` defaults to `default_pilot(keep=keep)`.

    The compiled graph carries the pilot as `graph.tokenpilot` (for
    `thread_stats(graph.tokenpilot, thread_id)`). A pilot whose lifecycle schedule is not
    "manual" runs its estimator itself; the estimator node is then never scheduled.
    """
    pilot = pilot or default_pilot(keep=keep)
    tools = list(tools)
    graph = StateGraph(TokenPilotAgentState)
    graph.add_node(
        "agent",
        ModelNode(model, tools, pilot, prompt=prompt, prompt_cache_key=prompt_cache_key).as_runnable(),
    )
    graph.add_node("tools", tokenpilot_tool_node(tools, pilot))
    graph.add_node("estimator", EstimatorNode(pilot, wait_s=estimator_wait_s).as_runnable())
    route = estimator_route(pilot)
    graph.add_conditional_edges(START, route, ["agent", "estimator"])
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_conditional_edges("tools", route, ["agent", "estimator"])
    graph.add_edge("estimator", END)
    compiled = graph.compile(
        checkpointer=checkpointer,
        store=store,
        interrupt_before=interrupt_before,
        interrupt_after=interrupt_after,
        debug=debug,
        name=name or "tokenpilot_agent",
    )
    compiled.tokenpilot = pilot  # type: ignore[attr-defined]
    return compiled
