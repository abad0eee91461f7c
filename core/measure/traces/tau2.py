"""τ²-bench simulations: the results dict (`simulations`) or a bare list (leaderboard files).

The agent's view is the policy (system prompt) and the conversation without the
simulated user's own tool use: user-side tool calls (`requestor: "user"`) and their
results never reach the agent, so they are dropped. Agent calls are assistant messages
with usage; the fixed greeting has none. Where `raw_data.usage` carries litellm's
Anthropic mapping, `prompt_tokens` leaves the cache reads out and they are added back.
Tool schemas are not recorded; the hidden prefix is estimated per simulation and
shared by the simulations whose estimates agree (one deployment, one prefix), so one
simulator sees them as one cached prefix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .build import Builder, message, openai_tool_calls, parse_time, share_hidden_prefix
from .model import Session, Usage

FMT = "tau2"


def _usage(msg: dict[str, Any]) -> Usage | None:
    raw = (msg.get("raw_data") or {}).get("usage") if isinstance(msg.get("raw_data"), dict) else None
    model = (
        str((msg.get("raw_data") or {}).get("model") or "") if isinstance(msg.get("raw_data"), dict) else ""
    )
    if isinstance(raw, dict):
        if "claude" in model or "anthropic" in model:
            return Usage.from_litellm_anthropic(raw)
        return Usage.from_openai(raw)
    if isinstance(msg.get("usage"), dict):
        return Usage.from_openai(msg["usage"])
    return None


def _simulation(
    path: Path, sim: dict[str, Any], policy: str | None, domain: str | None
) -> tuple[Builder, dict]:
    b = Builder()
    policy = sim.get("policy") or policy
    if policy:
        b.add(message("system", policy))
    dropped = 0
    first_user = True
    for raw in sim.get("messages") or []:
        role = raw.get("role")
        if role == "tool":
            if raw.get("requestor") == "user":
                dropped += 1
                continue
            b.add(
                message(
                    "tool", raw.get("content") or "", tool_call_id=raw.get("id") or raw.get("tool_call_id")
                )
            )
        elif role == "user":
            if raw.get("tool_calls") and not raw.get("content"):
                dropped += 1  # the simulated user operating its own device tools
                continue
            msg = b.add(message("user", raw.get("content") or ""))
            if first_user:
                b.task_start(msg)
                first_user = False
        elif role == "assistant":
            calls = [
                tc for tc in raw.get("tool_calls") or [] if tc.get("requestor", "assistant") == "assistant"
            ]
            msg = b.add(message("assistant", raw.get("content") or "", tool_calls=openai_tool_calls(calls)))
            usage = _usage(raw)
            if usage is not None:
                model = (
                    (raw.get("raw_data") or {}).get("model")
                    if isinstance(raw.get("raw_data"), dict)
                    else None
                )
                b.call(msg, usage, parse_time(raw.get("timestamp")), model)
    meta = {
        "task_id": sim.get("task_id"),
        "trial": sim.get("trial"),
        "domain": domain,
        "reward": (sim.get("reward_info") or {}).get("reward"),
        "termination_reason": sim.get("termination_reason"),
        "user_side_dropped": dropped,
    }
    return b, meta


def load(path: Path, data: Any) -> list[Session]:
    if isinstance(data, dict):
        env = (data.get("info") or {}).get("environment_info") or {}
        sims, policy, domain = data.get("simulations") or [], env.get("policy"), env.get("domain_name")
    else:
        sims, policy, domain = data, None, None
    built = [_simulation(path, sim, policy, domain) for sim in sims if isinstance(sim, dict)]
    sessions = [
        b.finish(
            session_id=str(sim.get("id") or f"{path.stem}/{k}"),
            source=str(path),
            fmt=FMT,
            meta=meta,
            hidden_prefix_tokens=0,
        )
        for k, ((b, meta), sim) in enumerate(zip(built, [s for s in sims if isinstance(s, dict)]))
    ]
    share_hidden_prefix(sessions)
    return sessions
