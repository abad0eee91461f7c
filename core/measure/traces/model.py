"""Records every trace importer produces: sessions, recorded calls and their usage.

Each provider counts a prompt differently (Anthropic reports uncached input, cache
writes and cache reads separately; litellm's Anthropic mapping leaves the reads out of
`prompt_tokens`; OpenAI and DeepSeek include them). `Usage` holds one convention, the
whole prompt plus the part of it served from the cache, so that calibration and cost
code never need to know where a number came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenpilot.errors import TokenPilotError


class TraceFormatError(TokenPilotError, ValueError):
    """A trace file is unreadable or not in a format we know; names the file and line."""

    def __init__(self, path: object, reason: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


class UnrecognizedTrace(TraceFormatError):
    """Valid JSON that is not a trace (a report, a config): folder loads skip these."""


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True, slots=True)
class Usage:
    """One call's token usage; `prompt_tokens` is the whole prompt, cache reads and writes included.

    `cache_write_tokens` is None where the provider does not report writes (OpenAI,
    DeepSeek, litellm). `cache_ttl_s` is the cache lifetime the call asked for, where
    the record says (Anthropic's 5-minute or 1-hour ephemeral writes).
    `cache_reported` is False when the record has no cache field at all, so a 0 in
    `cached_tokens` means "unknown" rather than "missed".
    """

    prompt_tokens: int
    cached_tokens: int
    cache_write_tokens: int | None
    output_tokens: int
    cache_ttl_s: int | None = None
    cache_reported: bool = True

    @property
    def uncached_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.cached_tokens - (self.cache_write_tokens or 0))

    @classmethod
    def from_anthropic(cls, u: dict[str, Any]) -> Usage:
        """Anthropic Messages: input_tokens excludes both cache reads and cache writes."""
        read = _int(u.get("cache_read_input_tokens"))
        write = _int(u.get("cache_creation_input_tokens"))
        detail = u.get("cache_creation") or {}
        ttl = None
        if _int(detail.get("ephemeral_1h_input_tokens")) > 0:
            ttl = 3600
        elif _int(detail.get("ephemeral_5m_input_tokens")) > 0:
            ttl = 300
        return cls(_int(u.get("input_tokens")) + write + read, read, write, _int(u.get("output_tokens")), ttl)

    @classmethod
    def from_openai(cls, u: dict[str, Any]) -> Usage:
        """OpenAI Chat Completions (and DeepSeek): prompt_tokens already includes the hits."""
        details = u.get("prompt_tokens_details") or {}
        cached = u.get("prompt_cache_hit_tokens")
        if cached is None:
            cached = details.get("cached_tokens")
        prompt = _int(u.get("prompt_tokens", u.get("input_tokens")))
        output = _int(u.get("completion_tokens", u.get("output_tokens")))
        return cls(prompt, min(_int(cached), prompt), None, output, None, cached is not None)

    @classmethod
    def from_litellm_anthropic(cls, u: dict[str, Any]) -> Usage:
        """litellm's mapping of Anthropic usage: prompt_tokens leaves the cache reads out."""
        details = u.get("prompt_tokens_details") or {}
        cached = _int(details.get("cached_tokens"))
        reported = details.get("cached_tokens") is not None
        return cls(
            _int(u.get("prompt_tokens")) + cached,
            cached,
            None,
            _int(u.get("completion_tokens")),
            None,
            reported,
        )

    @classmethod
    def from_openclaw(cls, u: dict[str, Any]) -> Usage:
        """OpenClaw transcripts: `input` is the uncached part; reads and writes are separate."""
        read = _int(u.get("cacheRead"))
        write = _int(u.get("cacheWrite"))
        return cls(_int(u.get("input")) + read + write, read, write, _int(u.get("output")))


@dataclass(slots=True)
class RecordedCall:
    """One model call: its prompt was the session's system message plus `messages[start:end]`.

    The call's output is `messages[end]`, an assistant message. After a compaction the
    prompt restarts, so `start` points at the summary message rather than at 0.
    """

    start: int
    end: int
    usage: Usage | None = None
    timestamp: float | None = None
    model: str | None = None
    system: dict[str, Any] | None = None
    """The system message this call was sent with, when it differs from messages[0]
    (agents that put the date or time in their prompt send a new one per call)."""
    sent: dict[int, dict[str, Any]] | None = None
    """Messages this call was sent in another form than `messages[i]`, by index: an agent
    whose history processor rewrites earlier messages on every call (SWE-agent's
    `Old environment output: (N lines omitted)`) records each step's prompt, and the
    replay sends what the agent sent."""


@dataclass(slots=True)
class Session:
    """One agent conversation in the neutral format (OpenAI Chat Completions messages + tools).

    `hidden_prefix_tokens` counts prompt tokens the record leaves out (a system prompt
    and tool schemas the agent sent but did not store), estimated from the first call's
    recorded prompt. `task_starts` are the indices of the messages that open a new
    top-level user task.
    """

    id: str
    source: str
    fmt: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    calls: list[RecordedCall] = field(default_factory=list)
    hidden_prefix_tokens: int = 0
    task_starts: list[int] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def system(self) -> dict[str, Any] | None:
        """The recorded system message, kept at messages[0]."""
        if self.messages and self.messages[0].get("role") in ("system", "developer"):
            return self.messages[0]
        return None

    def sent_slice(self, call: RecordedCall, start: int, end: int) -> list[dict[str, Any]]:
        """messages[start:end] as this call sent them (its own rewritten forms in place)."""
        body = self.messages[start:end]
        if call.sent:
            for i, msg in call.sent.items():
                if start <= i < end:
                    body[i - start] = msg
        return body

    def prompt(self, call: RecordedCall) -> list[dict[str, Any]]:
        """The messages a call was sent: the system message (if any) + messages[start:end]."""
        body = self.sent_slice(call, call.start, call.end)
        system = self.system
        if call.system is not None:
            if system is not None and call.start == 0:
                body = body[1:]
            return [call.system, *body]
        if system is not None and call.start > 0:
            return [system, *body]
        return body

    def prompt_indices(self, call: RecordedCall) -> list[int]:
        """Indices into `messages` of `prompt(call)`, in order."""
        idx = list(range(call.start, call.end))
        if self.system is not None and call.start > 0:
            return [0, *idx]
        return idx

    def output(self, call: RecordedCall) -> dict[str, Any]:
        return self.messages[call.end]

    @property
    def usage_calls(self) -> list[RecordedCall]:
        return [c for c in self.calls if c.usage is not None]
