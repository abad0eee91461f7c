"""τ-bench historical trajectories: a list of `{task_id, reward, info, traj, trial}` records.

`traj` is already an OpenAI chat list (system policy, user, assistant with tool calls,
tool results); each assistant message is one model call. No usage is recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .build import Builder, clean_openai_message
from .model import Session

FMT = "tau_bench"


def load(path: Path, data: list[Any]) -> list[Session]:
    sessions = []
    for k, rec in enumerate(data):
        if not isinstance(rec, dict):
            continue
        b = Builder()
        for raw in rec.get("traj") or []:
            if not isinstance(raw, dict):
                continue
            msg = b.add(clean_openai_message(raw))
            if msg["role"] == "assistant":
                b.call(msg)
        meta = {"task_id": rec.get("task_id"), "trial": rec.get("trial"), "reward": rec.get("reward")}
        sid = f"{path.stem}/{rec.get('task_id')}-{rec.get('trial', k)}-{k}"
        sessions.append(
            b.finish(session_id=sid, source=str(path), fmt=FMT, meta=meta, hidden_prefix_tokens=0)
        )
    return sessions
