"""mini-swe-agent trajectories: `trajectory_format: mini-swe-agent-1.1`, and the old bare list.

1.1 files carry each call's provider response under `extra.response` (DeepSeek usage:
`prompt_tokens` includes `prompt_cache_hit_tokens`). The final `exit` message holds the
submitted patch and was never sent to a model, so it is dropped. The old format is a
plain message list with text actions and observations as `user` messages (no usage).
The fixed `bash` tool schema is not recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .build import Builder, clean_openai_message, parse_time
from .model import Session, Usage

FMT = "mini_swe_agent"


def load(path: Path, data: Any) -> list[Session]:
    raw_messages = data.get("messages") if isinstance(data, dict) else data
    info = data.get("info") if isinstance(data, dict) and isinstance(data.get("info"), dict) else {}
    b = Builder()
    first_user = True
    for raw in raw_messages or []:
        if not isinstance(raw, dict) or raw.get("role") == "exit":
            continue
        msg = b.add(clean_openai_message(raw))
        extra = raw.get("extra") if isinstance(raw.get("extra"), dict) else {}
        if msg["role"] == "assistant":
            response = extra.get("response") if isinstance(extra.get("response"), dict) else {}
            usage = response.get("usage")
            b.call(
                msg,
                Usage.from_openai(usage) if isinstance(usage, dict) else None,
                parse_time(extra.get("timestamp")),
                response.get("model"),
            )
        elif msg["role"] == "user" and first_user:
            b.task_start(msg)
            first_user = False
    model = ((info.get("config") or {}).get("model") or {}).get("model_name")
    meta = {
        "instance_id": data.get("instance_id") if isinstance(data, dict) else None,
        "trajectory_format": data.get("trajectory_format")
        if isinstance(data, dict)
        else "mini-swe-agent-text",
        "exit_status": info.get("exit_status"),
        "model": model,
        "model_stats": info.get("model_stats"),
    }
    sid = str(meta["instance_id"] or path.name.split(".")[0])
    return [b.finish(session_id=sid, source=str(path), fmt=FMT, meta=meta, hidden_prefix_tokens=0)]
