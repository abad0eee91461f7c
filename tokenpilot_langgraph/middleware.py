"""`TokenPilotMiddleware` for `langchain.agents.create_agent` (extra: `tokenpilot[langchain]`).

- `wrap_model_call`: renders the managed view (system prompt, tools, history) on every
  call, binds the canonical tool list and, for OpenAI models, `prompt_cache_key`;
  a due estimator runs on a worker thread *during* the model call and is joined before
  the response returns, so its result applies at the next render and is checkpointed
  with this one.
- `wrap_tool_call`: the ingestion gate (see `tool_node.py`).
- registers the native `recall_artifact` tool; state gains the `tokenpilot` channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

try:
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "TokenPilotMiddleware needs langchain>=1.0: pip install 'tokenpilot[langchain]'"
    ) from exc
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langgraph.config import get_config
from langgraph.types import Command
from typing_extensions import NotRequired

from tokenpilot import TokenPilot
from tokenpilot_langgraph.agent import default_pilot
from tokenpilot_langgraph.convert import tool_specs
from tokenpilot_langgraph.nodes import Rendered, Renderer, wants_cache_key
from tokenpilot_langgraph.runtime import runtime_for
from tokenpilot_langgraph.state import STATE_KEY, lifecycle_update, merge_tokenpilot
from tokenpilot_langgraph.tool import recall_tool
from tokenpilot_langgraph.tool_node import IngestionGate


class TokenPilotMiddlewareState(AgentState):
    tokenpilot: NotRequired[Annotated[dict[str, Any], merge_tokenpilot]]


class TokenPilotMiddleware(AgentMiddleware):
    """TokenPilot for `create_agent(model, tools, middleware=[TokenPilotMiddleware()])`."""

    state_schema = TokenPilotMiddlewareState

    def __init__(
        self,
        pilot: TokenPilot | None = None,
        *,
        prompt_cache_key: bool | None = None,
        checkpoint: bool = True,
        keep: str = "balanced",
    ) -> None:
        super().__init__()
        self.pilot = pilot or default_pilot(keep=keep)
        self.tools = [recall_tool(self.pilot)]
        self.cache_key = prompt_cache_key
        self.checkpoint = checkpoint
        self.renderer = Renderer(self.pilot, (), checkpoint=checkpoint)
        self.gate = IngestionGate(self.pilot, checkpoint=checkpoint)

    # -- model ------------------------------------------------------------------
    def _render(self, request: ModelRequest) -> tuple[Rendered, ModelRequest, bool]:
        system = [request.system_message] if request.system_message is not None else []
        r = self.renderer.render(
            request.messages, request.state, get_config(), system=system, specs=tool_specs(request.tools)
        )
        k = 0
        while k < len(r.view) and isinstance(r.view[k], SystemMessage):
            k += 1
        head: list[BaseMessage] = list(r.view[:k])
        use_key = wants_cache_key(request.model) if self.cache_key is None else self.cache_key
        settings = dict(request.model_settings)
        if use_key:
            settings["prompt_cache_key"] = r.session_id
        new = request.override(
            system_message=head[0] if head else None,  # type: ignore[typeddict-item]
            messages=[*head[1:], *r.view[k:]],
            tools=list(r.prepared.tools),
            model_settings=settings,
        )
        due = self.pilot.estimator_due(r.session_id)
        if due:
            runtime_for(self.pilot).start_worker(r.session_id, lambda: self.pilot.run_estimator(r.session_id))
        return r, new, due

    def _finish(self, r: Rendered, response: Any, estimated: bool) -> ExtendedModelResponse:
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        for m in response.result:
            if isinstance(m, AIMessage):
                r.record.note_usage(m)
        if not self.checkpoint:
            return ExtendedModelResponse(model_response=response)
        update = dict(r.update or {})
        lc = lifecycle_update(self.pilot, r.session_id, r.seq) if estimated else None
        if lc is not None:
            update = merge_tokenpilot(update, lc)
        return ExtendedModelResponse(model_response=response, command=Command(update={STATE_KEY: update}))

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ExtendedModelResponse:
        r, new, due = self._render(request)
        try:
            response = handler(new)
        finally:
            runtime_for(self.pilot).join_worker(r.session_id)
        return self._finish(r, response, due)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ExtendedModelResponse:
        r, new, due = self._render(request)
        try:
            response = await handler(new)
        finally:
            await asyncio.to_thread(runtime_for(self.pilot).join_worker, r.session_id)
        return self._finish(r, response, due)

    # -- tools --------------------------------------------------------------------
    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return self.gate.wrap(request, handler)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await self.gate.awrap(request, handler)


__all__ = ["TokenPilotMiddleware", "TokenPilotMiddlewareState"]
