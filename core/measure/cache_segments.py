"""Segments: the ordered pieces a request is cut into for the prefix-cache simulator.

A request is a list of `Segment`s (the hidden prefix, tool schemas, system prompt, one
or two per message), each keyed by a hash of its content, and counted once per distinct
text with our offline tokenizer. Here because the bench, the oracle and calibration build
and count segments without the simulator; `cachesim.py` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenpilot._canonical import canonical_json, sha256_hex
from tokenpilot.tokens import count_tokens


@dataclass(frozen=True, slots=True)
class Segment:
    """One ordered piece of a request. `tokens` fixes the count (synthetic segments).

    `breakpoint` marks an explicit cache breakpoint after this segment (Anthropic
    `cache_control`); `parts` lists item texts (one per tool) so a miss can say
    "order changed" rather than show an excerpt.
    """

    label: str
    text: str
    tokens: int | None = None
    breakpoint: bool = False
    parts: tuple[str, ...] = ()
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = sha256_hex(self.text)
        if self.tokens is not None:
            key = f"{key}:{self.tokens}"
        object.__setattr__(self, "key", key)

    @classmethod
    def synthetic(cls, label: str, tokens: int, ident: str = "", breakpoint: bool = False) -> Segment:
        """A fixed-size stand-in for content the record does not hold (a hidden prefix)."""
        return cls(label, f"<{label}: {tokens} tokens{' ' + ident if ident else ''}>", tokens, breakpoint)


_TOKENS: dict[str, int] = {}
_TOKENS_MAX = 1_000_000  # distinct segments remembered; a long-running process starts over past it


def segment_tokens(seg: Segment) -> int:
    """Tokens in a segment, counted once per distinct text (memoised by content hash)."""
    if seg.tokens is not None:
        return seg.tokens
    n = _TOKENS.get(seg.key)
    if n is None:
        if len(_TOKENS) >= _TOKENS_MAX:
            _TOKENS.clear()
        n = _TOKENS[seg.key] = count_tokens(seg.text)
    return n


def segments_tokens(segments: Iterable[Segment]) -> int:
    return sum(segment_tokens(s) for s in segments)


def message_segments(msg: dict[str, Any], index: int, *, breakpoint: bool = False) -> list[Segment]:
    """A message as one segment (canonical JSON), plus one for its tool calls if any.

    A system message at index 0 is its raw text, labelled `system`, so that a miss
    excerpt reads like the prompt ("Current date: …") rather than escaped JSON.
    """
    if index == 0 and msg.get("role") in ("system", "developer") and isinstance(msg.get("content"), str):
        return [Segment("system", msg["content"], breakpoint=breakpoint)]
    body = {k: v for k, v in msg.items() if k != "tool_calls"}
    segs = [Segment(f"messages[{index}].content", canonical_json(body))]
    if msg.get("tool_calls"):
        segs.append(Segment(f"messages[{index}].tool_calls", canonical_json(msg["tool_calls"])))
    return segs


def tools_segment(tools: Sequence[dict[str, Any]], *, breakpoint: bool = False) -> Segment:
    parts = tuple(canonical_json(t) for t in tools)
    return Segment("tools", "[" + ",".join(parts) + "]", breakpoint=breakpoint, parts=parts)


def prefix_segments(
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    hidden_prefix_tokens: int = 0,
    hidden_id: str = "",
    breakpoint: bool = True,
) -> list[Segment]:
    """What precedes the messages: the hidden prefix (synthetic), then the tool schemas."""
    segs: list[Segment] = []
    if hidden_prefix_tokens > 0:
        segs.append(Segment.synthetic("hidden prefix", hidden_prefix_tokens, hidden_id, breakpoint))
    if tools:
        segs.append(tools_segment(tools, breakpoint=breakpoint))
    return segs


def request_segments(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    hidden_prefix_tokens: int = 0,
    hidden_id: str = "",
    system_breakpoint: bool = True,
) -> list[Segment]:
    """A request in Anthropic's (and OpenAI's) cache order: hidden prefix, tools, system, messages.

    `hidden_prefix_tokens` models prompt content the record lacks as a fixed synthetic
    first segment; `system_breakpoint` marks the hidden prefix, tools and system
    message as cache breakpoints, as Claude Code and litellm's caching do.
    """
    segs = prefix_segments(
        tools, hidden_prefix_tokens=hidden_prefix_tokens, hidden_id=hidden_id, breakpoint=system_breakpoint
    )
    for i, msg in enumerate(messages):
        segs.extend(message_segments(msg, i, breakpoint=system_breakpoint))
    return segs
