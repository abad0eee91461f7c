"""The ingestion gate at the tool node: every tool result meets the core's gate as it
enters state.

State keeps the *original* ToolMessage (the full history stays in state, DESIGN §3);
what the model sees is rendered by `prepare` from the same content, so both agree. The
gate runs the core's `ingest_tool_result` on a copy of the session's gate state: the
original is stored under its content hash at once (recoverable even if the process
dies before the next render), and `ToolMessage.artifact["tokenpilot"]` records
`{"artifact_id", "reduced", "passes", "note"}`. The id is the one `prepare` uses (a
content hash, `artifact_id_for(content)`). LangChain never sends `artifact` to a model.

Identical repeated calls: the core withholds an identical call's identical output
after `call_cap` repeats. That needs the output, so the tool runs anyway; the wrapper
marks such a result (`note == "loop"`) and `prepare`'s loop guard does the withholding.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from tokenpilot import RECALL_TOOL_NAME, TokenPilot
from tokenpilot._canonical import artifact_id_for, canonical_json
from tokenpilot.ingest.gate import IngestState, ToolCallInfo, ingest_tool_result
from tokenpilot_langgraph.convert import to_openai
from tokenpilot_langgraph.state import STATE_KEY, recall_update, restore_session, saved_of, session_id
from tokenpilot_langgraph.tool import CURRENT_SESSION, recall_tool

log = logging.getLogger("tokenpilot")

Execute = Callable[[ToolCallRequest], ToolMessage | Command]
AsyncExecute = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]


class IngestionGate:
    """`wrap_tool_call` / `awrap_tool_call` for a `ToolNode` (or `AgentMiddleware`).

    `checkpoint=True` also writes recalls to the `tokenpilot` state channel (the graph's
    state must have it, see `TokenPilotChannel`).
    """

    def __init__(self, pilot: TokenPilot, *, checkpoint: bool = True) -> None:
        self.pilot = pilot
        self.checkpoint = checkpoint

    def _session(self, request: ToolCallRequest) -> str:
        state = request.state if isinstance(request.state, dict) else {}
        config = getattr(request.runtime, "config", None)
        sid = session_id(self.pilot, config, state.get("messages") or [])
        restore_session(self.pilot, sid, saved_of(state))
        return sid

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolMessage | Command:
        sid = self._session(request)
        token = CURRENT_SESSION.set(sid)
        try:
            result = execute(request)
        finally:
            CURRENT_SESSION.reset(token)
        return self._gate(request, sid, result)

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolMessage | Command:
        sid = self._session(request)
        token = CURRENT_SESSION.set(sid)
        try:
            result = await execute(request)
        finally:
            CURRENT_SESSION.reset(token)
        return self._gate(request, sid, result)

    # -- the gate -------------------------------------------------------------------
    def _gate(self, request: ToolCallRequest, sid: str, result: Any) -> Any:
        if not isinstance(result, ToolMessage):
            return result  # a Command: the tool manages state itself
        call = request.tool_call
        if call.get("name") == RECALL_TOOL_NAME:
            return self._recalled(request, sid, result)
        try:
            marked = self._mark(sid, call, result)
        except Exception as exc:  # the gate is an optimisation: never lose a tool result
            log.warning("tokenpilot: ingestion gate failed, result kept as is: %s", exc)
            return result
        return marked

    def _mark(self, sid: str, call: Any, result: ToolMessage) -> ToolMessage:
        msg = to_openai([result])[0]
        info = ToolCallInfo(str(call.get("name", "")), json.dumps(call.get("args") or {}, ensure_ascii=False))
        state = self._gate_state(sid)
        ingested = ingest_tool_result(
            msg,
            info,
            state=state,
            pipeline=self.pilot.pipeline,
            put=lambda text: self.pilot.store.put(sid, text),
        )
        content = msg.get("content")
        aid = ingested.artifact_id or artifact_id_for(
            content if isinstance(content, str) else canonical_json(content) if content is not None else ""
        )
        tag = {
            "artifact_id": aid,
            "reduced": ingested.artifact_id is not None,
            "passes": list(ingested.passes),
            "note": ingested.note,
        }
        return _with_tag(result, tag)

    def _gate_state(self, sid: str) -> IngestState:
        """A copy of the session's gate state (the real one advances only in `prepare`)."""
        if sid not in self.pilot.session_ids:
            return IngestState()
        s = self.pilot.session(sid)
        with s.lock:
            return IngestState.from_dict(s.state.to_dict())

    def _recalled(self, request: ToolCallRequest, sid: str, result: ToolMessage) -> Any:
        if not self.checkpoint or result.status == "error":
            return result
        aid = str((request.tool_call.get("args") or {}).get("artifact_id", ""))
        state = request.state if isinstance(request.state, dict) else {}
        update = recall_update(self.pilot, sid, saved_of(state), aid)
        return Command(update={"messages": [result], STATE_KEY: update})


def _with_tag(result: ToolMessage, tag: dict[str, Any]) -> ToolMessage:
    art = result.artifact
    if art is None:
        return result.model_copy(update={"artifact": {"tokenpilot": tag}})
    if isinstance(art, dict):
        return result.model_copy(update={"artifact": {**art, "tokenpilot": tag}})
    return result  # a tool's own non-dict artifact: leave it alone


def tokenpilot_tool_node(
    tools: Sequence[Any], pilot: TokenPilot, *, checkpoint: bool = True, **kwargs: Any
) -> ToolNode:
    """A `ToolNode` with the ingestion gate and the native `recall_artifact` tool."""
    tools = list(tools)
    if not any(getattr(t, "name", None) == RECALL_TOOL_NAME for t in tools):
        tools.append(recall_tool(pilot))
    gate = IngestionGate(pilot, checkpoint=checkpoint)
    return ToolNode(tools, wrap_tool_call=gate.wrap, awrap_tool_call=gate.awrap, **kwargs)
