"""The model-based estimator: any OpenAI-compatible chat endpoint, strict parsing of its
reply against the schema and the view, one repair retry; every failure is "no change"."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from typing import Any

from ..errors import ConfigError
from ..registry import LIFECYCLES, UPDATE_FIELDS
from .prompts import IMMEDIATE_SYSTEM_PROMPT, REPAIR_PROMPT, SYSTEM_PROMPT
from .view import EstimatorView, empty_delta

log = logging.getLogger("tokenpilot")


class EstimatorReplyError(ValueError):
    """The model's reply is not a valid delta; the message is sent back for repair."""


_ALTERNATE_NAMES = {
    "status": "lifecycle",
    "description": "objective",
    "id": "taskId",
    "task_id": "taskId",
    "turns": "coveredTurnAbsIds",
    "evidence": "completionEvidence",
    "questions": "unresolvedQuestions",
}


def _extract_json_object(text: str) -> Any:
    """The first JSON object in a reply, tolerating think blocks and code fences."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    start = text.find("{")
    if start < 0:
        raise EstimatorReplyError("the reply contains no JSON object")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except (ValueError, RecursionError) as exc:  # not JSON, too deep, or a 5,000-digit number
        raise EstimatorReplyError(f"the reply is not valid JSON: {exc}") from None
    return obj


def parse_delta(text: str, view: EstimatorView) -> dict[str, Any]:
    """Strictly parse and validate a model reply against the schema and the view."""
    obj = _extract_json_object(text)
    if not isinstance(obj, dict):
        raise EstimatorReplyError("the reply must be a JSON object")
    extra = set(obj) - {"baseVersion", "taskUpdates"}
    if extra:
        raise EstimatorReplyError(f"unknown top-level field(s): {', '.join(sorted(extra))}")
    base = obj.get("baseVersion")
    if not isinstance(base, int) or isinstance(base, bool):
        raise EstimatorReplyError("baseVersion must be an integer")
    if base != view.base_version:
        raise EstimatorReplyError(f"baseVersion must be {view.base_version}, copied from the input")
    updates = obj.get("taskUpdates")
    if not isinstance(updates, list):
        raise EstimatorReplyError("taskUpdates must be a list")
    known_turns = view.known_turn_ids
    known_tasks = view.task_ids
    for n, upd in enumerate(updates):
        where = f"taskUpdates[{n}]"
        if not isinstance(upd, dict):
            raise EstimatorReplyError(f"{where} must be an object")
        for key in upd:
            if key not in UPDATE_FIELDS:
                hint = f" (use {_ALTERNATE_NAMES[key]!r})" if key in _ALTERNATE_NAMES else ""
                raise EstimatorReplyError(f"{where}: unknown field {key!r}{hint}")
        if not isinstance(upd.get("taskId"), str) or not upd["taskId"].strip():
            raise EstimatorReplyError(f"{where}: taskId must be a non-empty string")
        if not isinstance(upd.get("objective"), str):
            raise EstimatorReplyError(f"{where}: objective must be a string")
        if upd.get("lifecycle") not in LIFECYCLES:
            raise EstimatorReplyError(f"{where}: lifecycle must be one of {', '.join(LIFECYCLES)}")
        for key in ("title", "currentSubgoal", "evictableReason"):
            if key in upd and not isinstance(upd[key], str):
                raise EstimatorReplyError(f"{where}: {key} must be a string")
        for key in ("coveredTurnAbsIds", "completionEvidence", "unresolvedQuestions"):
            if key in upd and not (isinstance(upd[key], list) and all(isinstance(v, str) for v in upd[key])):
                raise EstimatorReplyError(f"{where}: {key} must be a list of strings")
        unknown = [t for t in upd.get("coveredTurnAbsIds", []) if t not in known_turns]
        if unknown:
            raise EstimatorReplyError(f"{where}: unknown turn id(s) {', '.join(unknown[:5])}")
        if upd["taskId"] not in known_tasks and not upd.get("coveredTurnAbsIds"):
            raise EstimatorReplyError(
                f"{where}: unknown taskId {upd['taskId']!r}; a new task needs coveredTurnAbsIds"
            )
    return {"baseVersion": base, "taskUpdates": updates}


class LLMEstimator:
    """A task-state estimator over any OpenAI-compatible chat endpoint.

    Configuration: arguments, else `TOKENPILOT_ESTIMATOR_MODEL`,
    `TOKENPILOT_ESTIMATOR_BASE_URL`, `TOKENPILOT_ESTIMATOR_API_KEY` (then
    `OPENAI_API_KEY`). Each call is bounded by `timeout_s` (the repair retry gets
    its own). Any failure returns the empty delta and is logged; `last_error` says
    why (per thread, None after a success), `failures` counts them. One instance
    may serve many sessions at once.
    """

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30,
        client: Any = None,
        *,
        immediate: bool = False,
        max_tokens: int = 2048,
    ) -> None:
        self.model = model or os.environ.get("TOKENPILOT_ESTIMATOR_MODEL", "")
        if not self.model:
            raise ConfigError("LLMEstimator needs a model (argument or TOKENPILOT_ESTIMATOR_MODEL)")
        self.base_url = base_url or os.environ.get("TOKENPILOT_ESTIMATOR_BASE_URL") or None
        self.timeout_s = float(timeout_s)
        self.system_prompt = IMMEDIATE_SYSTEM_PROMPT if immediate else SYSTEM_PROMPT
        self.max_tokens = max_tokens
        self.failures = 0
        self._local = threading.local()  # one instance may serve many sessions' threads
        self._count_lock = threading.Lock()
        if client is None:
            import openai

            key = (
                api_key
                or os.environ.get("TOKENPILOT_ESTIMATOR_API_KEY")
                or os.environ.get("OPENAI_API_KEY")
                or "not-needed"  # local servers (vLLM, llama.cpp) ignore the key
            )
            client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout_s, max_retries=0)
        self._client = client

    @property
    def last_error(self) -> str | None:
        """Why this thread's latest `estimate` failed; None after a success."""
        return getattr(self._local, "error", None)

    def _ask(self, messages: list[dict[str, str]]) -> str:
        resp = self._client.chat.completions.create(
            model=self.model,
            messages=messages,
            temperature=0,
            max_tokens=self.max_tokens,
            timeout=self.timeout_s,
        )
        content = resp.choices[0].message.content if resp.choices else None
        return content or ""

    def estimate(self, view: EstimatorView) -> dict[str, Any]:
        user = json.dumps(view.to_prompt_dict(), ensure_ascii=False, separators=(",", ":"))
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]
        try:
            reply = self._ask(messages)
            try:
                delta = parse_delta(reply, view)
            except EstimatorReplyError as first:
                log.info("tokenpilot: estimator reply invalid (%s); asking once for a repair", first)
                messages += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": REPAIR_PROMPT.format(error=first)},
                ]
                delta = parse_delta(self._ask(messages), view)
        except Exception as exc:  # transport, timeout, HTTP status, bad reply: all "no change"
            self._local.error = f"{type(exc).__name__}: {exc}"
            with self._count_lock:
                self.failures += 1
            log.warning("tokenpilot: estimator failed, keeping the registry as is: %s", self._local.error)
            return empty_delta(view.base_version)
        self._local.error = None
        return delta
