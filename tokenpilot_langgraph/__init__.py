"""TokenPilot for LangGraph: the ingestion gate at the tool node, the managed view at the
model node, a native `recall_artifact` tool and the estimator as a side-branch node.

    from tokenpilot_langgraph import create_tokenpilot_agent
    graph = create_tokenpilot_agent(model, tools, checkpointer=InMemorySaver())
    graph.invoke({"messages": [("user", "...")]}, {"configurable": {"thread_id": "t1"}})
"""

import importlib.util as _util

_MISSING = [m for m in ("langchain_core", "langgraph") if _util.find_spec(m) is None]
if _MISSING:  # say what to install, not only which module failed to import
    raise ImportError(
        f"tokenpilot_langgraph needs {' and '.join(_MISSING)}: pip install 'tokenpilot[langgraph]'",
        name=_MISSING[0],
    )

from tokenpilot_langgraph.agent import create_tokenpilot_agent, default_pilot  # noqa: E402
from tokenpilot_langgraph.convert import from_openai, to_langchain, to_openai, tool_specs  # noqa: E402
from tokenpilot_langgraph.nodes import (  # noqa: E402
    EstimatorNode,
    ModelNode,
    Renderer,
    TokenPilotReactState,
    completes_batch,
    estimator_route,
    tokenpilot_pre_model_hook,
)
from tokenpilot_langgraph.runtime import all_thread_stats, thread_stats  # noqa: E402
from tokenpilot_langgraph.state import STATE_KEY, TokenPilotAgentState, TokenPilotChannel, merge_tokenpilot  # noqa: E402
from tokenpilot_langgraph.stats import CallStats, ThreadStats  # noqa: E402
from tokenpilot_langgraph.tool import RecallArtifactTool, recall_tool  # noqa: E402
from tokenpilot_langgraph.tool_node import IngestionGate, tokenpilot_tool_node  # noqa: E402

__all__ = [
    "STATE_KEY",
    "CallStats",
    "EstimatorNode",
    "IngestionGate",
    "ModelNode",
    "RecallArtifactTool",
    "Renderer",
    "ThreadStats",
    "TokenPilotAgentState",
    "TokenPilotChannel",
    "TokenPilotReactState",
    "all_thread_stats",
    "completes_batch",
    "create_tokenpilot_agent",
    "default_pilot",
    "estimator_route",
    "from_openai",
    "merge_tokenpilot",
    "recall_tool",
    "thread_stats",
    "to_langchain",
    "to_openai",
    "tokenpilot_pre_model_hook",
    "tokenpilot_tool_node",
    "tool_specs",
]
