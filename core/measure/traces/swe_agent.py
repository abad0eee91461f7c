"""SWE-agent `.traj` files.

The replay sends what SWE-agent sent. Where every step records the prompt history
(`trajectory[i].messages`, newer SWE-agent), call i was sent `trajectory[i-1].messages`:
its history processors had already run on it, so an observation that
`last_n_observations` elided (`Old environment output: (N lines omitted)`) goes in its
elided form from that call on, and the rewrite of an earlier message on every call is in
the replay as it was in the run. The messages themselves come from `history` (the full,
unprocessed record; demonstrations included: they were sent), and each call carries the
forms it sent in place of some of them (`RecordedCall.sent`). Only where the steps hold
no prompts (or they do not line up with `history`) is `history` replayed as it is; each
non-demonstration assistant message is one call. Without a history the trajectory steps
are replayed as assistant/user pairs.

Text-action configurations return observations as `user` messages and stay that way;
function-calling ones use `tool` messages (`tool_call_ids`). No per-call usage: only run
totals (`info.model_stats`), kept in meta.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .build import Builder, clean_openai_message, message
from .model import Session

FMT = "swe_agent"


def _step_prompts(data: dict[str, Any]) -> list[list[dict[str, Any]]] | None:
    """Each step's recorded history after the step (the next call's prompt), or None
    when a step has none."""
    steps = [s for s in data.get("trajectory") or [] if isinstance(s, dict)]
    prompts = [s.get("messages") for s in steps]
    if not prompts or not all(isinstance(p, list) and all(isinstance(m, dict) for m in p) for p in prompts):
        return None
    return [[clean_openai_message(m) for m in p] for p in prompts]


def _sent_forms(
    added: list[dict[str, Any]], outputs: list[int], prompts: list[list[dict[str, Any]]]
) -> list[list[tuple[dict[str, Any], Any]]] | None:
    """Per call, the (message, content sent) pairs where its recorded prompt differs
    from `history`; None when the prompts do not line up with it (then `history` is
    replayed as it is, for the whole file, rather than a mix of the two)."""
    if len(prompts) < len(outputs):
        return None
    out: list[list[tuple[dict[str, Any], Any]]] = [[]]  # the first call's prompt is not recorded
    for j in range(1, len(outputs)):
        prompt, end = prompts[j - 1], outputs[j]
        if len(prompt) != end:
            return None
        pairs = []
        for k, sent in enumerate(prompt):
            orig = added[k]
            if sent["role"] != orig["role"] or sent.get("tool_calls") != orig.get("tool_calls"):
                return None
            if sent.get("content") != orig.get("content"):
                pairs.append((orig, sent.get("content")))
        out.append(pairs)
    return out


def load(path: Path, data: dict[str, Any]) -> list[Session]:
    b = Builder()
    history = data.get("history")
    meta: dict[str, Any] = {}
    if isinstance(history, list) and history:
        first_user = True
        added: list[dict[str, Any]] = []
        outputs: list[int] = []
        for raw in history:
            if not isinstance(raw, dict):
                continue
            msg = b.add(clean_openai_message(raw))
            added.append(msg)
            if msg["role"] == "assistant" and not raw.get("is_demo"):
                outputs.append(len(added) - 1)
            elif msg["role"] == "user" and first_user:
                b.task_start(msg)
                first_user = False
        prompts = _step_prompts(data)
        sent = _sent_forms(added, outputs, prompts) if prompts is not None else None
        for j, k in enumerate(outputs):
            b.call(added[k], sent=sent[j] if sent is not None else ())
        meta["prompts"] = "trajectory" if sent is not None else "history"
    else:
        for step in data.get("trajectory") or []:
            if not isinstance(step, dict):
                continue
            out = b.add(message("assistant", str(step.get("response") or step.get("action") or "")))
            b.call(out)
            b.add(message("user", str(step.get("observation") or "")))
        meta["prompts"] = "trajectory steps"
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    meta.update(
        model_stats=info.get("model_stats"),
        exit_status=info.get("exit_status"),
        steps=len(data.get("trajectory") or []),
    )
    # SWE-agent names every run's file after its instance: the run folder tells them apart
    # (one id for two runs would replay them as one session, each switch a rewrite).
    sid = f"{path.parent.name}/{path.stem}"
    return [b.finish(session_id=sid, source=str(path), fmt=FMT, meta=meta, hidden_prefix_tokens=0)]
