"""Server-sent events, split incrementally, so a stream is relayed event by event.

The proxy must see whole events (to read the final usage chunk and to drop it when
the client did not ask for it) without buffering the stream: `SSESplitter.feed`
returns each complete event as soon as its terminating blank line arrives.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tokenpilot_proxy.wire import MAX_UPSTREAM_JSON_DEPTH, loads_bounded

DONE = "[DONE]"
_FINISH_RE = re.compile(rb'"finish_reason"\s*:\s*"')


@dataclass(slots=True)
class SSESplitter:
    """Bytes in, complete events out (each ending with a blank line, LF line endings)."""

    _buf: bytearray = field(default_factory=bytearray)

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk.replace(b"\r\n", b"\n") if b"\r" in chunk else chunk
        events: list[bytes] = []
        while True:
            end = self._buf.find(b"\n\n")
            if end < 0:
                return events
            events.append(bytes(self._buf[: end + 2]))
            del self._buf[: end + 2]

    def rest(self) -> bytes:
        """Whatever arrived after the last complete event (a stream cut mid-event)."""
        out = bytes(self._buf)
        self._buf.clear()
        return out


def event_data(event: bytes) -> str | None:
    """The event's `data:` payload (lines joined), or None for comments and empty events."""
    lines = [ln[5:].lstrip(b" ") if ln.startswith(b"data:") else None for ln in event.split(b"\n")]
    data = [ln for ln in lines if ln is not None]
    if not data:
        return None
    return b"\n".join(data).decode("utf-8", "replace")


def parse_chunk(data: str) -> dict[str, Any] | None:
    """A chat.completion.chunk object, or None when the payload is not a JSON object (or
    nests too deeply to read: such an event is relayed as it came, never parsed)."""
    try:
        obj = loads_bounded(data, MAX_UPSTREAM_JSON_DEPTH)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def event_object(event: bytes) -> dict[str, Any] | None:
    """The event's `data:` payload as a JSON object, or None (a comment, not JSON, too deep)."""
    data = event_data(event)
    return parse_chunk(data) if data is not None else None


def has_finish_reason(event: bytes) -> bool:
    return _FINISH_RE.search(event) is not None


def error_event(message: str, *, code: str, type_: str = "upstream_error") -> bytes:
    """An OpenAI-style error event: SDKs raise it as an API error and stop reading."""
    payload = {"error": {"message": message, "type": type_, "code": code}}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"
