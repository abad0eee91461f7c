"""TokenPilot's state in the graph's state, so checkpoints carry it.

Channel `tokenpilot` (reducer `merge_tokenpilot`) holds what a fresh process needs to
render the same bytes: the session exported after each render (`seq` counts renders),
the lifecycle state written by the estimator node beside it, and the recalls made since
the last render (they feed the core's recall gate). Writers never clobber newer data:
the reducer keeps the highest `seq` / `lifecycle_at` / recall list, whatever order
LangGraph applies the writes of one superstep in.

A node first calls `restore_session`: when the pilot does not mirror exactly this
checkpoint (new process, forked thread, another worker), the checkpoint is imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from tokenpilot import TokenPilot
from tokenpilot_langgraph.convert import to_openai
from tokenpilot_langgraph.runtime import runtime_for

STATE_KEY = "tokenpilot"


def merge_tokenpilot(left: Mapping[str, Any] | None, right: Mapping[str, Any] | None) -> dict[str, Any]:
    """Reducer of the `tokenpilot` channel (order-independent within a superstep)."""
    out = dict(left or {})
    if not right:
        return out
    if "session" in right and int(right["seq"]) >= int(out.get("seq", -1)):
        if int(right["seq"]) > int(out.get("seq", -1)):
            out["recalls"] = [r for r in out.get("recalls", []) if int(r[0]) > int(right["seq"])]
        out["seq"] = int(right["seq"])
        out["session"] = right["session"]
    if "lifecycle_at" in right and list(right["lifecycle_at"]) >= list(out.get("lifecycle_at", [-1, -1])):
        out["lifecycle"] = right.get("lifecycle")
        out["lifecycle_at"] = list(right["lifecycle_at"])
    for r in right.get("recalls", []):
        if int(r[0]) >= int(out.get("seq", -1)):
            out["recalls"] = [*out.get("recalls", []), list(r)]
    return out


class TokenPilotChannel(TypedDict, total=False):
    """Mix into a graph's state schema to checkpoint TokenPilot state."""

    tokenpilot: Annotated[dict[str, Any], merge_tokenpilot]


class TokenPilotAgentState(TokenPilotChannel):
    """State of `create_tokenpilot_agent`: the full history plus TokenPilot's channel."""

    messages: Annotated[list[AnyMessage], add_messages]


def saved_of(state: Any) -> Mapping[str, Any] | None:
    value = state.get(STATE_KEY) if isinstance(state, Mapping) else getattr(state, STATE_KEY, None)
    return value or None


def version_of(saved: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """What identifies a checkpointed TokenPilot state (compared, never shown to the model)."""
    if not saved or "session" not in saved:
        return None
    return (int(saved["seq"]), tuple(saved.get("lifecycle_at", ())), len(saved.get("recalls", [])))


# -- session identity ------------------------------------------------------------
def thread_id(config: RunnableConfig | None) -> str | None:
    tid = ((config or {}).get("configurable") or {}).get("thread_id")
    return str(tid) if tid is not None else None


def session_id(pilot: TokenPilot, config: RunnableConfig | None, messages: Sequence[BaseMessage]) -> str:
    """The LangGraph `thread_id`; without a checkpointer, a content-derived id of the
    conversation's start (what the core derives from its first messages)."""
    tid = thread_id(config)
    if tid is not None:
        return tid
    head: list[BaseMessage] = []
    for m in messages:
        head.append(m)
        if m.type != "system":
            break
    return pilot.derive_session_id(to_openai(head))


# -- checkpoint <-> pilot -------------------------------------------------------------
def restore_session(pilot: TokenPilot, sid: str, saved: Mapping[str, Any] | None) -> bool:
    """Import the checkpointed session unless the pilot already mirrors exactly it."""
    version = version_of(saved)
    if saved is None or version is None:
        return False
    rt = runtime_for(pilot)
    with rt.cond:
        if sid in pilot.session_ids and rt.synced.get(sid) == version:
            return False
        data = {**saved["session"], "id": sid, "lifecycle": saved.get("lifecycle")}
        pilot.import_session(data)
        s = pilot.session(sid)
        with s.lock:
            for _, aid in saved.get("recalls", []):
                s.state.note_recall(aid)
        rt.synced[sid] = version
    return True


def session_update(
    pilot: TokenPilot, sid: str, saved: Mapping[str, Any] | None
) -> tuple[dict[str, Any], int]:
    """The channel write after a render: the exported session, as render number `seq`."""
    seq = int((saved or {}).get("seq", 0)) + 1
    exported = pilot.export_session(sid)
    lifecycle = exported.pop("lifecycle", None)
    update = {"seq": seq, "session": exported, "lifecycle": lifecycle, "lifecycle_at": [seq, 0]}
    runtime_for(pilot).mark_synced(sid, (seq, (seq, 0), 0))
    return update, seq


def lifecycle_update(pilot: TokenPilot, sid: str, seq: int) -> dict[str, Any] | None:
    """The channel write after an estimator run: the session's lifecycle state."""
    lc = pilot.session(sid).lifecycle
    if lc is None or not hasattr(lc, "to_dict"):
        return None
    runtime_for(pilot).mark_synced(sid, (seq, (seq, 1), 0))
    return {"lifecycle": lc.to_dict(), "lifecycle_at": [seq, 1]}


def recall_update(
    pilot: TokenPilot, sid: str, saved: Mapping[str, Any] | None, artifact_id: str
) -> dict[str, Any]:
    """The channel write after a recall (the core's recall gate counts them)."""
    seq = int((saved or {}).get("seq", 0))
    version = version_of(saved)
    if version is not None:
        runtime_for(pilot).mark_synced(sid, (version[0], version[1], version[2] + 1))
    return {"recalls": [[seq, artifact_id]]}
