"""`recall_artifact` as a native LangChain tool.

Its schema is the core's `RECALL_TOOL` byte for byte, so the tool list the model sees
is the same whether the core or LangChain serialises it. The session is the LangGraph
`thread_id` from the tool's RunnableConfig (or, without a checkpointer, the session the
ingestion gate announces for this tool call).
"""

from __future__ import annotations

import contextvars
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import ConfigDict

from tokenpilot import RECALL_TOOL, RECALL_TOOL_NAME, TokenPilot
from tokenpilot_langgraph.state import thread_id

# Set by the ingestion gate around each tool execution: the session of that call.
CURRENT_SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tokenpilot_session", default=None
)


class RecallArtifactTool(BaseTool):
    """Returns the original behind an `art_…` id quoted in a reduced output or eviction stub."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = RECALL_TOOL_NAME
    description: str = RECALL_TOOL["function"]["description"]
    args_schema: dict[str, Any] = RECALL_TOOL["function"]["parameters"]
    pilot: TokenPilot

    def _run(self, config: RunnableConfig, **arguments: Any) -> str:
        sid = thread_id(config) or CURRENT_SESSION.get()
        # The core passes recall_artifact results to the model unreduced.
        return self.pilot.execute_recall(arguments, session_id=sid)

    async def _arun(self, config: RunnableConfig, **arguments: Any) -> str:
        return self._run(config, **arguments)


def recall_tool(pilot: TokenPilot) -> RecallArtifactTool:
    """The native `recall_artifact` tool bound to `pilot`."""
    return RecallArtifactTool(pilot=pilot)
