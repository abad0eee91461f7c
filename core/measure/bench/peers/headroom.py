"""Headroom (`headroom-ai`), run as its own proxy, in-process and offline.

Headroom ships as a proxy: its `/v1/chat/completions` handler freezes the prefix the
provider has cached, runs `CacheAligner` (off by default) then the `ContentRouter`
(SmartCrusher for JSON, log/search/diff compressors, Kompress for plain text),
replays the previously forwarded prefix byte for byte, and injects its
`headroom_retrieve` tool when a compressed output left a CCR marker. That logic lives
in the handler, not in a library call, so the bench drives the handler itself: a real
`create_app(ProxyConfig(...))` behind Starlette's TestClient, whose upstream is a
local stand-in that records the body Headroom forwards and answers like a provider
(an assistant "ok", and `cached_tokens` for the prefix it shares with the session's
previous request). The recorded bodies are what gets priced.

Defaults are the proxy's (`mode="token"`, CCR on, savings profile "coding"), except
three switches that are not context management and would break a replay: the
rate limiter (60 requests/min), the response cache (a hit forwards nothing) and
the hard watchdog (it may exit the process); and Kompress (an ONNX model from
Hugging Face), which cannot load offline, is switched off with Headroom's own
`disable_kompress` (left on, each request races a failing background download and
the output is not reproducible); its fall-through content takes Headroom's non-ML
path, and `notes()` says so. Everything Headroom would dial out for is refused by its own
air-gap switch, `HEADROOM_OFFLINE=1`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ....tokens import encoding, message_tokens
from ..methods import Message, Method, MethodSession, Rendered

REQUIREMENT = "headroom-ai[proxy]>=0.42"
# Headroom's own transforms that need weights or network this machine lacks
_NEEDS_WEIGHTS = {"kompress": "Kompress (ONNX model chopratejas/kompress-v2-base from Hugging Face)"}


def missing() -> str | None:
    """Why Headroom cannot run here, or None."""
    for module in ("headroom", "fastapi", "starlette", "httpx", "litellm"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install '{REQUIREMENT}')"
    return None


def methods() -> list[Method]:
    return [Headroom()]


def _offline_env(workspace: str) -> dict[str, str]:
    """Environment for one proxy: Headroom's air-gap switch, a private workspace, and
    tiktoken pointed at the vocabularies litellm (a Headroom dependency) ships, as
    Headroom's own warning advises, so its token counts are o200k's and never a
    download."""
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.origin is not None
    tokenizers = os.path.join(os.path.dirname(spec.origin), "litellm_core_utils", "tokenizers")
    return {
        "HEADROOM_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HEADROOM_WORKSPACE_DIR": workspace,
        "HEADROOM_CONFIG_DIR": workspace,
        "HEADROOM_HARD_WATCHDOG_SECS": "0",
        "TIKTOKEN_CACHE_DIR": os.environ.get("TIKTOKEN_CACHE_DIR") or tokenizers,
    }


def _reset_process_state() -> None:
    """Headroom keeps some state per process (CCR store, TOIN learning, session
    trackers); a fresh proxy must start from none of it, as a fresh `headroom proxy` does."""
    from headroom.cache.compression_feedback import reset_compression_feedback
    from headroom.cache.compression_store import reset_compression_store
    from headroom.ccr.batch_store import reset_batch_context_store
    from headroom.ccr.context_tracker import reset_context_tracker
    from headroom.proxy import helpers
    from headroom.proxy.context_guard import reset_learned_limits
    from headroom.proxy.conversation_savings import reset_conversation_savings
    from headroom.telemetry.toin import reset_toin

    for reset in (
        reset_toin,
        reset_compression_store,
        reset_compression_feedback,
        reset_batch_context_store,
        reset_context_tracker,
        reset_conversation_savings,
        reset_learned_limits,
        helpers._reset_session_beta_tracker_for_test,
        helpers._reset_session_tool_tracker_for_test,
        helpers._reset_session_ccr_tracker_for_test,
        helpers.reset_tool_search_hint_state,
    ):
        reset()


class _Records(logging.Handler):
    """Keeps Headroom's log records: they say when it fell back or failed."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class _Proxy:
    """One running Headroom proxy with a recording upstream, shared by the sessions of
    one replay (a user runs one proxy for all their agents) and shut down when the last
    session closes, so a later replay starts from a fresh proxy."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.users = 0
        self.client: Any = None
        self.app: Any = None
        self.workspace: tempfile.TemporaryDirectory[str] | None = None
        self.forwarded: dict[str, Any] | None = None
        self.previous: dict[str, list[Message]] = {}  # session -> last forwarded messages
        self.current = ""
        self.records = _Records()
        self.saved_env: dict[str, str | None] = {}
        self.quiet: tuple[logging.Logger, int] | None = None

    def start(self) -> None:
        import httpx
        from headroom.proxy.models import ProxyConfig
        from headroom.proxy.server import create_app
        from starlette.testclient import TestClient

        encoding()  # TokenPilot's tokenizer is chosen before tiktoken's cache dir moves
        self.workspace = tempfile.TemporaryDirectory(prefix="headroom-bench-")
        for key, value in _offline_env(self.workspace.name).items():
            self.saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        log = logging.getLogger("headroom")
        log.setLevel(logging.INFO)
        log.propagate = False  # the proxy logs every request at INFO
        log.addHandler(self.records)
        self.quiet = logging.getLogger("httpx2"), logging.getLogger("httpx2").level
        self.quiet[0].setLevel(logging.WARNING)  # the test client logs each request at INFO
        _reset_process_state()
        config = ProxyConfig(
            openai_api_url="http://upstream.invalid/v1",
            rate_limit_enabled=False,
            cache_enabled=False,
            # its weights cannot be fetched offline; left on, each request races a
            # background download attempt and the output is not reproducible
            disable_kompress=True,
        )
        self.app = create_app(config)
        self.client = TestClient(self.app)
        self.client.__enter__()  # runs the proxy's startup (compressor preload, warm-up)
        proxy = self.app.state.proxy
        upstream = httpx.AsyncClient(transport=httpx.MockTransport(self._upstream))
        proxy.http_client = proxy.http_client_h1 = upstream

    def stop(self) -> None:
        if self.client is not None:
            self.client.__exit__(None, None, None)
        self.client = self.app = None
        logging.getLogger("headroom").removeHandler(self.records)
        if self.quiet is not None:
            self.quiet[0].setLevel(self.quiet[1])
            self.quiet = None
        for key, value in self.saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self.saved_env.clear()
        if self.workspace is not None:
            self.workspace.cleanup()
            self.workspace = None
        self.previous.clear()

    def _upstream(self, request: Any) -> Any:
        """The provider: records the body, reports the prefix it would have cached."""
        import httpx

        body = json.loads(request.content)
        self.forwarded = body
        messages = body.get("messages") or []
        prev = self.previous.get(self.current, [])
        shared = 0
        for a, b in zip(prev, messages):
            if a != b:
                break
            shared += message_tokens(a)
        cached = shared // 128 * 128 if shared >= 1024 else 0  # OpenAI's granularity
        self.previous[self.current] = messages
        usage = {
            "prompt_tokens": sum(message_tokens(m) for m in messages),
            "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        usage["total_tokens"] = usage["prompt_tokens"] + 1
        answer = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "message": answer, "finish_reason": "stop"}
        return httpx.Response(
            200,
            json={
                "id": "bench",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model"),
                "choices": [choice],
                "usage": usage,
            },
        )

    def send(
        self, session_id: str, messages: list[Message], tools: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], str]:
        """One chat request through the proxy: the body it forwarded, its transforms."""
        self.current, self.forwarded = session_id, None
        first = len(self.records.records)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        r = self.client.post(
            "/v1/chat/completions",
            json=body,
            headers={"authorization": "Bearer bench", "x-headroom-session-id": session_id},
        )
        failed = [
            rec.getMessage()
            for rec in self.records.records[first:]
            if "Optimization failed" in rec.getMessage() or rec.levelno >= logging.ERROR
        ]
        if r.status_code != 200 or self.forwarded is None or failed:
            raise RuntimeError(
                f"headroom proxy: status {r.status_code}, forwarded={self.forwarded is not None}, "
                f"errors={failed[:3]}, body={r.text[:300]}"
            )
        return self.forwarded, r.headers.get("x-headroom-transforms", "")


@dataclass(slots=True)
class Headroom:
    """Headroom's proxy at its defaults (token mode, CCR on), offline: the request it
    forwards is the rendered prompt, its `headroom_retrieve` tool included, and every
    CCR marker it leaves is an original one recall away (charged like TokenPilot's).

    `model` names what the proxy is told it talks to: a window (1M) wider than any
    recorded prompt, so Headroom's context guard never trims, and o200k token counts.
    """

    model: str = "gpt-4.1"
    name: str = "headroom"
    kind: ClassVar[str] = "peer"
    _proxy: _Proxy | None = field(default=None, repr=False)
    transforms: dict[str, int] = field(default_factory=dict)  # label -> requests it ran on
    requests: int = 0
    _last_skipped: dict[str, str] = field(default_factory=dict, repr=False)

    def session(self, session_id: str) -> MethodSession:
        if self._proxy is None:
            self._proxy = _Proxy(self.model)
        if self._proxy.users == 0:
            self._proxy.start()
        self._proxy.users += 1
        return _HeadroomSession(self, self._proxy, session_id)

    def _release(self, proxy: _Proxy) -> None:
        proxy.users -= 1
        if proxy.users == 0:
            skipped = self._skipped(proxy)
            self._last_skipped = skipped
            proxy.stop()

    def _skipped(self, proxy: _Proxy) -> dict[str, str]:
        out = {"kompress": _NEEDS_WEIGHTS["kompress"] + ": not available offline, disabled"}
        for rec in proxy.records.records:  # any other transform that fell back says so
            if rec.name.startswith("headroom.transforms.") and rec.levelno >= logging.WARNING:
                out.setdefault(rec.name, f"{rec.name}: {rec.getMessage()[:160]}")
        proxy.records.records.clear()
        return out

    def notes(self) -> list[str]:
        """Which of Headroom's transforms ran (and on how many requests), which could not."""
        ran = ", ".join(f"{k} ({n}/{self.requests})" for k, n in sorted(self.transforms.items()))
        lines = [f"headroom ran: {ran or 'no transform (nothing over its thresholds)'}"]
        skipped = self._last_skipped or (self._skipped(self._proxy) if self._proxy else {})
        lines += [f"headroom skipped: {why}" for why in skipped.values()]
        return lines


class _HeadroomSession:
    def __init__(self, method: Headroom, proxy: _Proxy, session_id: str) -> None:
        self.method = method
        self.proxy = proxy
        self.sid = session_id
        self.hashes: set[str] = set()
        self.closed = False

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        from headroom.proxy.handlers.openai import _CCR_HASH_RE

        body, labels = self.proxy.send(self.sid, prompt, tools)
        self.method.requests += 1
        ran = {label.rsplit(":", 1)[0] if label.count(":") >= 2 else label for label in labels.split(",")}
        for key in sorted(ran - {""}):  # "router:smart_crusher:0.27": transform and its ratio
            self.method.transforms[key] = self.method.transforms.get(key, 0) + 1
        messages = body["messages"]
        self.hashes.update(m.group(1).lower() for m in _CCR_HASH_RE.finditer(json.dumps(messages)))
        return Rendered(messages, body.get("tools") or [], len(messages), frozenset(self.hashes))

    def recall_text(self, artifact_id: str) -> str | None:
        """What `headroom_retrieve` would answer, read without counting as a retrieval
        (Headroom learns from retrievals; the bench's look-ups are not the agent's)."""
        from headroom.cache.compression_store import get_compression_store

        entry = get_compression_store()._backend.get(artifact_id)
        if entry is None or entry.is_expired():
            return None
        return json.dumps(
            {
                "hash": artifact_id,
                "original_content": entry.original_content,
                "original_item_count": entry.original_item_count,
            },
            indent=2,
        )

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.method._release(self.proxy)
