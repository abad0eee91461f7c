"""Headroom (`headroom-ai`), run as `headroom proxy` runs it, in-process and offline.

Headroom ships as a proxy: its `/v1/chat/completions` handler freezes the prefix the
provider has cached, runs `CacheAligner` (off by default) then the `ContentRouter`
(SmartCrusher for JSON, log/search/diff compressors, Kompress for plain text),
replays the previously forwarded prefix byte for byte, and injects its
`headroom_retrieve` tool when a compressed output left a CCR marker. That logic lives
in the handler, not in a library call, so the bench drives the handler itself: a real
`create_app(ProxyConfig(...))` behind Starlette's TestClient, whose upstream is a
local stand-in that records the body Headroom forwards and reports usage as OpenAI
does (`prompt_tokens_details.cached_tokens`: the prefix shared with the session's
previous request, from 1,024 tokens up, in 128-token steps). The recorded bodies are
what gets priced.

The proxy is configured as the `headroom proxy` command configures it: the same
`ProxyConfig` its CLI builds at its defaults (the "coding" savings profile, code-aware
on, CCR on), and the process environment seeded by
`headroom.agent_savings.seed_proxy_env_defaults()` (the coding profile's per-request
switches: cross-turn dedupe, read protection, lossless-then-lossy, a 25-char block
floor...), as `run_server` and `create_app_from_env` do; any `HEADROOM_*` variable
already set is put aside first, and the environment is restored when the proxy
stops. Row `headroom` runs the CLI's default `--mode cache` (only the newest delta is
compressed; the forwarded prefix is frozen); `headroom_token` runs `--mode token`.
A test checks the forwarded bodies against the real `headroom proxy` process.

Changed from the CLI's defaults, as `headroom proxy` flags a user could pass: no rate
limiter (`--no-rate-limit`, 60 requests/min), no response cache (`--no-cache`: a hit
forwards nothing), no Kompress (`--disable-kompress`: an ONNX model from Hugging Face
that cannot load offline; left on, each request races a failing background download
and the output is not reproducible; its fall-through content takes Headroom's non-ML
path, and `notes()` says so), and the hard watchdog off (it may exit the process).
Everything Headroom would dial out for is refused by its own air-gap switch,
`HEADROOM_OFFLINE=1`. Code-aware compression needs tree-sitter (`headroom-ai[code]`);
where it is not installed the real proxy skips it too, and `notes()` says so.
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
from ..method import Message, Method, MethodSession, Rendered

REQUIREMENT = "headroom-ai[proxy]>=0.42"
# Headroom's own transforms that need weights or network this machine lacks
_NEEDS_WEIGHTS = {"kompress": "Kompress (ONNX model chopratejas/kompress-v2-base from Hugging Face)"}


# This module is a peer: the bench finds it by these names (`peers.__init__`), no list to edit.
METHOD_NAMES = ("headroom", "headroom_token")
REPORT_ORDER = 20  # where its rows go among the peers'


def missing() -> str | None:
    """Why Headroom cannot run here, or None."""
    for module in ("headroom", "fastapi", "starlette", "httpx", "litellm"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install '{REQUIREMENT}')"
    return None


def methods() -> list[Method]:
    """The CLI's default mode (cache), then token mode."""
    return [Headroom(), Headroom(mode="token", name="headroom_token")]


SESSION_HEADER = "x-headroom-session-id"


def openai_usage(previous: list[Message], messages: list[Message]) -> dict[str, Any]:
    """The usage block OpenAI would report for `messages` after `previous` (the same
    session's last request): prompt tokens, and as `cached_tokens` the whole messages
    they share from the start, counted only from 1,024 tokens and in 128-token steps."""
    shared = 0
    for a, b in zip(previous, messages):
        if a != b:
            break
        shared += message_tokens(a)
    cached = shared // 128 * 128 if shared >= 1024 else 0
    prompt = sum(message_tokens(m) for m in messages)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": 1,
        "total_tokens": prompt + 1,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def openai_answer(model: Any, usage: dict[str, Any]) -> dict[str, Any]:
    """The stand-in provider's reply: an assistant "ok" with `usage`."""
    choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    return {
        "id": "bench",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [choice],
        "usage": usage,
    }


def cli_config(mode: str, upstream: str) -> Any:
    """The `ProxyConfig` that `headroom proxy --mode <mode> --openai-api-url <upstream>
    --no-rate-limit --no-cache --disable-kompress` builds, environment unseeded (the
    CLI reads its config before `run_server` seeds the profile's switches)."""
    from headroom.proxy.models import ProxyConfig

    return ProxyConfig(
        openai_api_url=upstream,
        mode=mode,
        savings_profile="coding",
        code_aware_enabled=True,
        offline=True,
        rate_limit_enabled=False,
        cache_enabled=False,
        disable_kompress=True,
    )


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

    def __init__(self, model: str, mode: str) -> None:
        self.model = model
        self.mode = mode
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
        from headroom.agent_savings import seed_proxy_env_defaults
        from headroom.proxy.server import create_app
        from starlette.testclient import TestClient

        encoding()  # TokenPilot's tokenizer is chosen before tiktoken's cache dir moves
        self.workspace = tempfile.TemporaryDirectory(prefix="headroom-bench-")
        for key in [k for k in os.environ if k.startswith("HEADROOM_")]:  # the user's own
            self.saved_env[key] = os.environ.pop(key)
        for key, value in _offline_env(self.workspace.name).items():
            self.saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        config = cli_config(self.mode, "http://upstream.invalid/v1")
        before = dict(os.environ)
        seeded = seed_proxy_env_defaults()  # as run_server does, after the CLI built config
        for key in seeded:
            self.saved_env.setdefault(key, before.get(key))
        config.profile_seeded_env_keys = frozenset(seeded)
        log = logging.getLogger("headroom")
        log.setLevel(logging.INFO)
        log.propagate = False  # the proxy logs every request at INFO
        log.addHandler(self.records)
        self.quiet = logging.getLogger("httpx2"), logging.getLogger("httpx2").level
        self.quiet[0].setLevel(logging.WARNING)  # the test client logs each request at INFO
        _reset_process_state()
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
        """The provider: records the body, reports usage as OpenAI would."""
        import httpx

        body = json.loads(request.content)
        self.forwarded = body
        messages = body.get("messages") or []
        usage = openai_usage(self.previous.get(self.current, []), messages)
        self.previous[self.current] = messages
        return httpx.Response(200, json=openai_answer(body.get("model"), usage))

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
            headers={"authorization": "Bearer bench", SESSION_HEADER: session_id},
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
    """Headroom's proxy as `headroom proxy --mode <mode>` runs it (CLI default: cache),
    offline: the request it forwards is the rendered prompt, its `headroom_retrieve`
    tool included, and every CCR marker it leaves is an original one recall away
    (charged like TokenPilot's).

    `model` names what the proxy is told it talks to: a window (1M) wider than any
    recorded prompt, so Headroom's context guard never trims, and o200k token counts.
    """

    model: str = "gpt-4.1"
    mode: str = "cache"
    name: str = "headroom"
    kind: ClassVar[str] = "peer"
    _proxy: _Proxy | None = field(default=None, repr=False)
    transforms: dict[str, int] = field(default_factory=dict)  # label -> requests it ran on
    requests: int = 0
    _last_skipped: dict[str, str] = field(default_factory=dict, repr=False)

    def session(self, session_id: str) -> MethodSession:
        if self._proxy is None:
            self._proxy = _Proxy(self.model, self.mode)
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
        from headroom.proxy.server import is_tree_sitter_available

        out = {"kompress": _NEEDS_WEIGHTS["kompress"] + ": not available offline, disabled"}
        if not is_tree_sitter_available():  # the real proxy's banner says the same
            out["code_aware"] = "code-aware: tree-sitter not installed (headroom-ai[code]), not run"
        for rec in proxy.records.records:  # any other transform that fell back says so
            if rec.name.startswith("headroom.transforms.") and rec.levelno >= logging.WARNING:
                out.setdefault(rec.name, f"{rec.name}: {rec.getMessage()[:160]}")
        proxy.records.records.clear()
        return out

    def notes(self) -> list[str]:
        """Which of Headroom's transforms ran (and on how many requests), which could not."""
        ran = ", ".join(f"{k} ({n}/{self.requests})" for k, n in sorted(self.transforms.items()))
        lines = [f"{self.name} ({self.mode} mode) ran: {ran or 'no transform (nothing over its thresholds)'}"]
        skipped = self._last_skipped or (self._skipped(self._proxy) if self._proxy else {})
        lines += [f"{self.name} skipped: {why}" for why in skipped.values()]
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
