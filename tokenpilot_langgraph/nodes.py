"""The managed view at the model, and the estimator beside it.

- `Renderer`: history in state -> `TokenPilot.prepare` -> the model's view (LangChain
  messages) on *every* call; the full history stays in state.
- `ModelNode`: a graph node that renders, binds the canonical tool list (and
  `prompt_cache_key` = thread for OpenAI models) and calls the model.
- `EstimatorNode` + `estimator_route`: with `LifecycleConfig(schedule="manual")` the
  route into the agent node also schedules the estimator node in the same superstep
  when this render completes a batch; the estimator waits for the agent's render, then
  runs while the model call is in flight. Its result applies at the next render and is
  checkpointed in the same superstep.
- `tokenpilot_pre_model_hook`: the same view for `create_react_agent(pre_model_hook=...)`.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.prebuilt.chat_agent_executor import AgentState

from tokenpilot import Prepared, TokenPilot
from tokenpilot.messages.turns import segment_turns
from tokenpilot_langgraph.convert import prompt_messages, to_langchain, to_openai, tool_specs
from tokenpilot_langgraph.runtime import runtime_for
from tokenpilot_langgraph.state import (
    STATE_KEY,
    TokenPilotChannel,
    lifecycle_update,
    restore_session,
    saved_of,
    session_id,
    session_update,
)
from tokenpilot_langgraph.stats import CallStats

log = logging.getLogger("tokenpilot")


class TokenPilotReactState(AgentState, TokenPilotChannel):
    """`create_react_agent` state with the `tokenpilot` channel (hook with `checkpoint=True`)."""


def _messages(state: Any) -> list[BaseMessage]:
    msgs = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    return list(msgs or [])


def _step(config: RunnableConfig | None) -> tuple[str, int]:
    """(graph namespace, superstep) of the running node: equal for two nodes of one superstep."""
    cfg = config or {}
    ns = str((cfg.get("configurable") or {}).get("checkpoint_ns", ""))
    parent = ns.rsplit("|", 1)[0] if "|" in ns else ""  # drop this task's own "node:task_id"
    step = (cfg.get("metadata") or {}).get("langgraph_step")
    return parent, int(step) if isinstance(step, int) else -1


@dataclass(slots=True)
class Rendered:
    """One render: the session, the core's request, the model's view, the state write."""

    session_id: str
    prepared: Prepared
    view: list[BaseMessage]
    update: dict[str, Any] | None
    seq: int
    record: CallStats


class Renderer:
    """Renders the core's view of a LangChain history (shared by node, hook, middleware)."""

    def __init__(
        self,
        pilot: TokenPilot,
        tools: Sequence[Any] = (),
        *,
        prompt: str | SystemMessage | None = None,
        checkpoint: bool = True,
    ) -> None:
        self.pilot = pilot
        self.prompt = prompt
        self.checkpoint = checkpoint
        self.specs = tool_specs(tools, include_recall=not pilot.config.register_recall_tool)

    def render(
        self,
        messages: Sequence[BaseMessage],
        state: Any,
        config: RunnableConfig | None,
        *,
        system: Sequence[BaseMessage] = (),
        specs: Sequence[Mapping[str, Any]] | None = None,
    ) -> Rendered:
        pilot, rt = self.pilot, runtime_for(self.pilot)
        sid = session_id(pilot, config, messages)  # from state messages, as the tool gate does
        ns, step = _step(config)
        try:
            history = [*system, *messages]
            saved = saved_of(state) if self.checkpoint else None
            if self.checkpoint and saved is None and rt.seq.get(sid, 0) > 0:
                _warn_missing_channel(sid)
            restore_session(pilot, sid, saved)
            converted = to_openai(history)
            prepared = pilot.prepare(
                prompt_messages(self.prompt) + converted,
                list(self.specs if specs is None else specs),
                session_id=sid,
            )
            view = to_langchain(prepared.messages, history, converted)
            if self.checkpoint:
                update, seq = session_update(pilot, sid, saved)
            else:
                update, seq = None, rt.seq.get(sid, 0) + 1
        except BaseException:
            rt.mark_rendered(sid, ns, step, -1)  # release a waiting estimator node
            raise
        rt.mark_rendered(sid, ns, step, seq)
        record = CallStats(prepared.stats, prepared.tail_start)
        rt.thread_stats(sid).calls.append(record)
        return Rendered(sid, prepared, view, update, seq, record)


MISSING_CHANNEL = (
    "tokenpilot_langgraph: the graph state has no 'tokenpilot' channel, so TokenPilot's state "
    "is dropped after every step and checkpoints cannot resume it. Add the channel to your "
    "state: class State(MessagesState, TokenPilotChannel): ..."
)
_warned: set[str] = set()


def _warn_missing_channel(session: str) -> None:
    """Once per thread: an update written on the last render did not come back in state."""
    if session in _warned:
        return
    _warned.add(session)
    warnings.warn(MISSING_CHANNEL, RuntimeWarning, stacklevel=3)
    log.warning("%s (thread %s)", MISSING_CHANNEL, session)


def wants_cache_key(model: Any) -> bool:
    """OpenAI chat models take `prompt_cache_key` (routes a thread to the same cache)."""
    name = type(model).__name__
    llm_type = str(getattr(model, "_llm_type", "") or "")
    return "OpenAI" in name or "openai" in llm_type


def bind_model(model: Any, prepared: Prepared, cache_key: str | None) -> Runnable:
    """The model with the canonical tool list (byte-stable) and the thread's cache key."""
    kwargs = {"prompt_cache_key": cache_key} if cache_key else {}
    if prepared.tools:
        return model.bind_tools(prepared.tools, **kwargs)
    return model.bind(**kwargs) if kwargs else model


class ModelNode:
    """The agent node: render the managed view, call the model, keep the full history.

    `prompt_cache_key`: None binds it for OpenAI models (see `wants_cache_key`), True
    always, False never.
    """

    def __init__(
        self,
        model: Any,
        tools: Sequence[Any],
        pilot: TokenPilot,
        *,
        prompt: str | SystemMessage | None = None,
        prompt_cache_key: bool | None = None,
        checkpoint: bool = True,
    ) -> None:
        self.model = model
        self.renderer = Renderer(pilot, tools, prompt=prompt, checkpoint=checkpoint)
        self.cache_key = wants_cache_key(model) if prompt_cache_key is None else prompt_cache_key

    def _prepare(self, state: Any, config: RunnableConfig) -> tuple[Rendered, Runnable]:
        r = self.renderer.render(_messages(state), state, config)
        return r, bind_model(self.model, r.prepared, r.session_id if self.cache_key else None)

    def _output(self, r: Rendered, response: Any) -> dict[str, Any]:
        r.record.note_usage(response)
        out: dict[str, Any] = {"messages": [response]}
        if r.update is not None:
            out[STATE_KEY] = r.update
        return out

    def invoke(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        r, model = self._prepare(state, config)
        return self._output(r, model.invoke(r.view, config))

    async def ainvoke(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        r, model = self._prepare(state, config)
        return self._output(r, await model.ainvoke(r.view, config))

    def as_runnable(self, name: str = "agent") -> Runnable:
        return RunnableLambda(self.invoke, afunc=self.ainvoke, name=name)


class EstimatorNode:
    """Runs the due estimator beside the agent node; writes the lifecycle state to state.

    It waits (at most `wait_s`) until the agent node of the same superstep has rendered,
    so the result always lands between two renders, never inside one.
    """

    def __init__(self, pilot: TokenPilot, *, checkpoint: bool = True, wait_s: float = 60.0) -> None:
        self.pilot = pilot
        self.checkpoint = checkpoint
        self.wait_s = wait_s

    def invoke(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        rt = runtime_for(self.pilot)
        sid = session_id(self.pilot, config, _messages(state))
        ns, step = _step(config)
        seq = rt.wait_rendered(sid, ns, step, self.wait_s)
        if seq is None:
            log.warning(
                "tokenpilot: the agent node did not render within %.0fs; estimating anyway", self.wait_s
            )
            seq = rt.seq.get(sid, 0)
        elif seq < 0:
            return {}  # the render failed: the checkpoint is re-imported on retry
        if not self.pilot.run_estimator(sid):
            return {}
        update = lifecycle_update(self.pilot, sid, seq) if self.checkpoint else None
        return {STATE_KEY: update} if update else {}

    async def ainvoke(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return await asyncio.to_thread(self.invoke, state, config)

    def as_runnable(self, name: str = "estimator") -> Runnable:
        return RunnableLambda(self.invoke, afunc=self.ainvoke, name=name)


def completes_batch(pilot: TokenPilot, sid: str, messages: Sequence[BaseMessage]) -> bool:
    """Will rendering `messages` make the manual estimator due?

    The lifecycle counts complete turns (an assistant message with all its tool
    results) and triggers every `batch_turns` of them; turn boundaries depend only on
    roles and tool-call ids, so the raw history predicts the core's count.
    """
    lc = pilot.session(sid).lifecycle
    cfg = getattr(lc, "config", None)
    if lc is None or cfg is None or cfg.schedule != "manual" or cfg.batch_turns is None:
        return False
    turns = segment_turns(to_openai(messages))
    n = 0
    while n < len(turns) and turns[n].complete:
        n += 1
    return n - int(lc.to_dict()["triggerMark"]) >= cfg.batch_turns


def estimator_route(
    pilot: TokenPilot, *, agent: str = "agent", estimator: str = "estimator", checkpoint: bool = True
) -> Callable[[Any, RunnableConfig], list[str]]:
    """The conditional edge into the agent node: the agent, plus the estimator when due."""

    def route(state: Any, config: RunnableConfig) -> list[str]:
        messages = _messages(state)
        sid = session_id(pilot, config, messages)
        if checkpoint:
            restore_session(pilot, sid, saved_of(state))
        if pilot.estimator_due(sid) or completes_batch(pilot, sid, messages):
            return [agent, estimator]
        return [agent]

    return route


def tokenpilot_pre_model_hook(
    pilot: TokenPilot,
    *,
    prompt: str | SystemMessage | None = None,
    tools: Sequence[Any] = (),
    checkpoint: bool = False,
) -> Runnable:
    """A `pre_model_hook` for `create_react_agent`: returns `llm_input_messages` on every call.

    Pass the system prompt here rather than to `create_react_agent` (so it is stabilised),
    and `tools` for exact token accounting. `checkpoint=True` needs a state schema with
    the `tokenpilot` channel (`TokenPilotReactState`). A manual-schedule estimator runs
    on a worker thread from this render until the next one (it overlaps the model
    call); cache usage is read from the model's previous reply.
    """
    renderer = Renderer(pilot, tools, prompt=prompt, checkpoint=checkpoint)
    rt = runtime_for(pilot)

    def hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = _messages(state)
        sid = session_id(pilot, config, messages)
        rt.join_worker(sid)
        _note_previous_usage(pilot, sid, messages)
        r = renderer.render(messages, state, config)
        if pilot.estimator_due(sid):
            rt.start_worker(sid, lambda: pilot.run_estimator(sid))
        out: dict[str, Any] = {"llm_input_messages": r.view}
        if r.update is not None:
            out[STATE_KEY] = r.update
        return out

    async def ahook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return await asyncio.to_thread(hook, state, config)

    return RunnableLambda(hook, afunc=ahook, name="pre_model_hook")


def _note_previous_usage(pilot: TokenPilot, sid: str, messages: Sequence[BaseMessage]) -> None:
    last = runtime_for(pilot).thread_stats(sid).last
    if last is None or last.input_tokens is not None:
        return
    for m in reversed(messages):
        if isinstance(m, AIMessage):
            last.note_usage(m)
            return
