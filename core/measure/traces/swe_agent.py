"""SWE-agent `.traj` files.

`history` is the literal message list the model saw (demonstrations included: they
were sent), so it is used whenever present; each non-demonstration assistant message
is one call. Text-action configurations return observations as `user` messages and
stay that way; function-calling ones use `tool` messages (`tool_call_ids`). Without a
history the trajectory steps are replayed as assistant/user pairs. No per-call usage:
only run totals (`info.model_stats`), kept in meta.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .build import Builder, clean_openai_message, message
from .model import Session

FMT = "swe_agent"


def load(path: Path, data: dict[str, Any]) -> list[Session]:
    b = Builder()
    history = data.get("history")
    if isinstance(history, list) and history:
        first_user = True
        for raw in history:
            if not isinstance(raw, dict):
                continue
            msg = b.add(clean_openai_message(raw))
            if msg["role"] == "assistant" and not raw.get("is_demo"):
                b.call(msg)
            elif msg["role"] == "user" and first_user:
                b.task_start(msg)
                first_user = False
    else:
        for step in data.get("trajectory") or []:
            if not isinstance(step, dict):
                continue
            out = b.add(message("assistant", str(step.get("response") or step.get("action") or "")))
            b.call(out)
            b.add(message("user", str(step.get("observation") or "")))
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    meta = {
        "model_stats": info.get("model_stats"),
        "exit_status": info.get("exit_status"),
        "steps": len(data.get("trajectory") or []),
    }
    # SWE-agent names every run's file after its instance: the run folder tells them apart
    # (one id for two runs would replay them as one session, each switch a rewrite).
    sid = f"{path.parent.name}/{path.stem}"
    return [b.finish(session_id=sid, source=str(path), fmt=FMT, meta=meta, hidden_prefix_tokens=0)]
