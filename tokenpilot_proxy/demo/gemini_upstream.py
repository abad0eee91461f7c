"""`FakeGemini`: a scripted Gemini API upstream (`/v1beta/models/{model}:generateContent`,
`:streamGenerateContent` with `?alt=sse`, `:countTokens`) that behaves as Gemini does where
TokenPilot depends on it: a call turn answered by another number of responses, an explicit
cache next to a system instruction or tools, or no API key is refused; function calls come
without ids; the implicit cache reads the longest prefix of an earlier prompt, from
`min_cache_tokens` on (Gemini's minimum for the model).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tokenpilot_proxy.demo.base import (
    CHARS_PER_TOKEN,
    LocalServer,
    Recorded,
    Reply,
    Responder,
    common_prefix_len,
)


def gemini_prompt_text(body: Mapping[str, Any]) -> str:
    """The cacheable prompt in Gemini's order: system instruction, tools, then contents."""
    parts = [json.dumps(body.get("systemInstruction"), ensure_ascii=False, separators=(",", ":"))]
    parts.append(json.dumps(body.get("tools") or [], ensure_ascii=False, separators=(",", ":")))
    parts += [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in body.get("contents") or []]
    return "\n".join(parts)


def call_count_errors(contents: list[Any]) -> list[str]:
    """Gemini's rule, broken: a model turn's function calls are answered, in the next
    content, by as many function responses."""
    errors = []
    for i, c in enumerate(contents):
        parts = c.get("parts") or [] if isinstance(c, dict) else []
        calls = sum(1 for p in parts if isinstance(p, dict) and "functionCall" in p)
        if not calls or i + 1 >= len(contents):
            continue
        nxt = contents[i + 1].get("parts") or []
        answers = sum(1 for p in nxt if isinstance(p, dict) and "functionResponse" in p)
        if answers != calls:
            errors.append(
                f"contents[{i + 1}]: Please ensure that the number of function response parts ({answers}) is "
                f"equal to the number of function call parts of the function call turn ({calls})."
            )
    return errors


def _error(status: int, message: str, name: str = "INVALID_ARGUMENT") -> web.Response:
    return web.json_response({"error": {"code": status, "message": message, "status": name}}, status=status)


@dataclass
class FakeGemini(LocalServer):
    """In-process Gemini API server; `await start()` returns its base URL (no version)."""

    responder: Responder | None = None
    min_cache_tokens: int = 1024
    chunk_chars: int = 16
    thought_signature: str | None = None  # put on each function call part, as Gemini 3 does
    requests: list[Recorded] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _prompts: list[str] = field(default_factory=list)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        await super().start(host, port)
        self.url = self.url.removesuffix("/v1")
        return self.url

    def generate_requests(self) -> list[Recorded]:
        return [r for r in self.requests if not r.path.endswith(":countTokens")]

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 2**20)
        for version in ("v1beta", "v1", "v1alpha"):
            app.router.add_post(f"/{version}/models/{{target}}", self._handle)
        return app

    def _refusal(
        self, body: Any, headers: Mapping[str, str], query: Mapping[str, str]
    ) -> web.Response | None:
        if not headers.get("x-goog-api-key") and not query.get("key"):
            return _error(
                403, "Method doesn't allow unregistered callers. Please use an API key.", "PERMISSION_DENIED"
            )
        if not isinstance(body, dict) or not isinstance(body.get("contents"), list):
            return _error(400, "* GenerateContentRequest.contents: contents is not specified")
        if "cachedContent" in body and ("systemInstruction" in body or "tools" in body):
            return _error(400, "CachedContent can not be used with GenerateContent request setting "
                               "system_instruction, tools or tool_config.")  # fmt: skip
        errors = call_count_errors(body["contents"])
        return _error(400, errors[0]) if errors else None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return _error(400, "Invalid JSON payload received.")
        method = request.match_info["target"].rpartition(":")[2]
        if method == "countTokens":
            inner = body.get("generateContentRequest", body) if isinstance(body, dict) else body
            tokens = (
                max(len(gemini_prompt_text(inner)) // CHARS_PER_TOKEN, 1) if isinstance(inner, dict) else 0
            )
            self.requests.append(Recorded(request.path, dict(request.headers), raw, body, "", tokens, 0))
            unknown = (
                sorted(set(body) - {"contents", "generateContentRequest"}) if isinstance(body, dict) else []
            )
            if unknown:
                return _error(400, f'Invalid JSON payload received. Unknown name "{unknown[0]}".')
            return web.json_response({"totalTokens": tokens})
        if (refused := self._refusal(body, request.headers, request.query)) is not None:
            self.requests.append(Recorded(request.path, dict(request.headers), raw, body, "", 0, 0))
            return refused
        prompt = gemini_prompt_text(body)
        best = max((common_prefix_len(prompt, p) for p in self._prompts), default=0)
        cached = best // CHARS_PER_TOKEN if best // CHARS_PER_TOKEN >= self.min_cache_tokens else 0
        self._prompts.append(prompt)
        tokens = max(len(prompt) // CHARS_PER_TOKEN, 1)
        self.requests.append(Recorded(request.path, dict(request.headers), raw, body, prompt, tokens, cached))
        reply = self.responder(body) if self.responder else Reply()
        parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
        for c in reply.tool_calls:
            args = c.arguments if isinstance(c.arguments, Mapping) else json.loads(c.arguments or "{}")
            part: dict[str, Any] = {"functionCall": {"name": c.name, "args": dict(args)}}
            if self.thought_signature:
                part["thoughtSignature"] = self.thought_signature
            parts.append(part)
        out_tokens = max(len(reply.text) // CHARS_PER_TOKEN, 1)
        usage = {"promptTokenCount": tokens, "candidatesTokenCount": out_tokens,
                 "totalTokenCount": tokens + out_tokens,
                 **({"cachedContentTokenCount": cached} if cached else {})}  # fmt: skip
        candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        whole = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-fake",
                 "responseId": f"resp-{len(self.requests)}"}  # fmt: skip
        if method != "streamGenerateContent":
            return web.json_response(whole)
        if request.query.get("alt") != "sse":
            return web.json_response([whole])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in _chunks(whole, self.chunk_chars):
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
        await resp.write_eof()
        return resp


def _chunks(whole: Mapping[str, Any], chunk_chars: int) -> list[dict[str, Any]]:
    """The answer as Gemini streams it: text in pieces, each call whole, the usage and the
    finish reason on the last chunk."""
    step = max(chunk_chars, 1)
    cand = whole["candidates"][0]
    pieces: list[dict[str, Any]] = []
    for p in cand["content"]["parts"]:
        if "text" in p:
            pieces += [{"text": p["text"][j : j + step]} for j in range(0, len(p["text"]), step)]
        else:
            pieces.append(p)
    pieces = pieces or [{"text": ""}]
    out = []
    for k, piece in enumerate(pieces):
        c: dict[str, Any] = {"content": {"role": "model", "parts": [piece]}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [c], "modelVersion": whole["modelVersion"],
                                 "responseId": whole["responseId"]}  # fmt: skip
        if k == len(pieces) - 1:
            c["finishReason"] = "STOP"
            chunk["usageMetadata"] = whole["usageMetadata"]
        out.append(chunk)
    return out
