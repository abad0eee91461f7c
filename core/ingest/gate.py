"""The ingestion gate: each new message is reduced once, and its reduced form frozen.

Tool results (the environment, Ω_env) go through the passes of their tool's profile
when they are large enough; the agent's own words (Ω_int) are never rewritten, except
oversized tool-call arguments (cut inside valid JSON) and oversized images. Whatever is
cut is stored first, under its content hash, and the reduced text names that id.

The only state is `IngestState` (what was seen, recent calls, recall counts): explicit,
serialisable, and updated in message order, so a history ingests the same way in any
process (I2).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._canonical import artifact_id_for, canonical_json, sha256_hex
from ..config import Config
from ..messages.model import content_text
from ..passes.base import PassContext, preview, recall_hint
from .intent import ingest_assistant, ingest_user, safe_image
from .pipeline import Ingested, Pipeline
from .reshown import ShownLines, fold_reshown
from .stabilize import is_recall_tool, recalled_by_client

__all__ = [
    "DEDUP_NOTE",
    "IngestState",
    "Ingested",
    "Pipeline",
    "ToolCallInfo",
    "artifact_ids_in",
    "hard_limited",
    "ingest_assistant",
    "ingest_tool_result",
    "ingest_user",
    "looks_binary",
]

_PATH_ARG_KEYS = (
    "file_path",
    "path",
    "filepath",
    "filename",
    "file",
    "notebook_path",
    "url",
    "uri",
    "target",
)
_BINARY_MIN_CHARS = 64
DEDUP_NOTE = "identical to an earlier output"  # a repeat points at the first copy, which must stay
_BAD_CHARS = re.compile("[\x01-\x07\x0e-\x1a\x1c-\x1f\ud800-\udfff\ufffd]")


@dataclass(frozen=True, slots=True)
class ToolCallInfo:
    """What the agent asked for: the tool and its arguments (for profiles and sources)."""

    name: str
    arguments: str

    @property
    def parsed(self) -> Mapping[str, Any]:
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except (ValueError, RecursionError):  # not JSON, or nested past what Python reads
            return {}
        return value if isinstance(value, Mapping) else {}

    @property
    def call_key(self) -> str:
        """Identity of a call for the loop guard: name plus canonical arguments."""
        try:
            args = canonical_json(json.loads(self.arguments)) if self.arguments.strip() else "{}"
        except (ValueError, RecursionError):  # unreadable: the text itself is the identity
            args = self.arguments
        return f"{self.name}:{sha256_hex(args)[:16]}"

    @property
    def source_key(self) -> str:
        """What the recall gate counts: the tool plus the path/URL it read, else its arguments."""
        args = self.parsed
        for key in _PATH_ARG_KEYS:
            value = args.get(key)
            if isinstance(value, str) and value:
                return f"{self.name}:{value}"
        return self.call_key


@dataclass(slots=True)
class IngestState:
    """Per-session memory of the gate. Serialisable with `to_dict`/`from_dict`."""

    seen_outputs: dict[str, str] = field(default_factory=dict)  # artifact id -> tool name of first copy
    window: deque[tuple[str, str]] = field(default_factory=deque)  # (call key, output id), recent calls
    recall_counts: dict[str, int] = field(default_factory=dict)  # source key -> recalls
    artifact_sources: dict[str, str] = field(default_factory=dict)  # artifact id -> source key

    def note_recall(self, artifact_id: str) -> None:
        source = self.artifact_sources.get(artifact_id)
        if source is not None:
            self.recall_counts[source] = self.recall_counts.get(source, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "seen_outputs": dict(self.seen_outputs),
            "window": [list(x) for x in self.window],
            "recall_counts": dict(self.recall_counts),
            "artifact_sources": dict(self.artifact_sources),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IngestState:
        return cls(
            dict(data.get("seen_outputs", {})),
            deque(tuple(x) for x in data.get("window", [])),
            dict(data.get("recall_counts", {})),
            dict(data.get("artifact_sources", {})),
        )


def looks_binary(text: str) -> bool:
    """NULs, lone surrogates (undecodable bytes) or mostly control characters."""
    if len(text) < _BINARY_MIN_CHARS:
        return False
    sample = text[:4096]
    if "\x00" in sample:
        return True
    return len(_BAD_CHARS.findall(sample)) / len(sample) > 0.10


def _footer(text: str, raw_chars: int, passes: tuple[str, ...], aid: str) -> str:
    if aid in text:
        return text
    return (
        f"{text}\n[tokenpilot: reduced from {raw_chars:,} to {len(text):,} chars "
        f"({', '.join(passes)}); {recall_hint(aid)}]"
    )


def _original_text(content: Any) -> str:
    return content if isinstance(content, str) else canonical_json(content)


def ingest_tool_result(
    msg: Mapping[str, Any],
    call: ToolCallInfo | None,
    *,
    state: IngestState,
    pipeline: Pipeline,
    put: Callable[[str], str],
    min_saved_chars: int = 0,
    shown: ShownLines | None = None,
) -> Ingested:
    """Reduce one tool result (role "tool") and record it in `state`.

    `shown`: the lines the session's earlier outputs show, for runs this one repeats.

    `put(text) -> artifact_id` stores an original; it is called before any text that
    names the id is returned, so a reduced text never points at nothing (I3).
    `min_saved_chars`: what a reduction or a dedup must save to be applied (the price of
    adding `recall_artifact` to a session's cached tools; see `TokenPilot`).
    """
    cfg = pipeline.cfg
    content = msg.get("content")
    original = _original_text(content) if content is not None else ""
    raw_chars = len(original)
    aid = artifact_id_for(original)
    tool = call.name if call else str(msg.get("name") or "")
    by_client = recalled_by_client(tool, call.arguments) if call is not None else None
    if by_client is not None or is_recall_tool(tool):
        for recalled in by_client or ():  # no one else noted these for the gate
            state.note_recall(recalled)
        return _recalled(msg, original, aid, raw_chars, cfg, put)
    ctx = PassContext(tool_name=tool, arguments=call.parsed if call else {}, artifact_id=aid)
    source = call.source_key if call else f"{tool}:?"
    state.artifact_sources.setdefault(aid, source)

    # loop guard: the same call returning the same output again and again
    if call is not None and cfg.call_cap:
        state.window.append((call.call_key, aid))
        while len(state.window) > cfg.call_window:
            state.window.popleft()
        repeats = sum(1 for k, o in state.window if k == call.call_key and o == aid)
        if repeats > cfg.call_cap and raw_chars > 0:
            put(original)
            stub = (
                f"[tokenpilot: {tool} was called with these same arguments and returned this same "
                f"output {repeats} times in the last {len(state.window)} tool calls; the output is "
                f"withheld to break a loop. {recall_hint(aid)}]"
            )
            return _done(msg, stub, aid, ("loop_guard",), raw_chars, "loop", state, tool)

    if isinstance(content, list):
        return _ingest_parts(msg, content, original, aid, ctx, state=state, pipeline=pipeline, put=put)
    if not isinstance(content, str) or not content:
        state.seen_outputs.setdefault(aid, tool)
        return Ingested(dict(msg), None, (), raw_chars, raw_chars)

    text = content
    if looks_binary(text):
        put(original)
        stub = (
            f"[tokenpilot: binary or undecodable data ({len(text):,} chars, sha256 "
            f"{sha256_hex(original)[:16]}…) omitted; {recall_hint(aid)}]"
        )
        return _done(msg, stub, aid, ("binary",), raw_chars, "binary", state, tool)

    gated = state.recall_counts.get(source, 0) > cfg.recall_gate_tau
    if gated:
        if raw_chars <= cfg.hard_limit_chars:
            state.seen_outputs.setdefault(aid, tool)
            return Ingested(dict(msg), None, (), raw_chars, raw_chars, "gated")
        put(original)
        out = preview(
            text, head=cfg.preview_head, tail=cfg.preview_tail, artifact_id=aid, what="output truncated"
        )
        return _done(msg, out, aid, ("hard_limit",), raw_chars, "gated", state, tool)

    def reshown(candidate: str) -> str | None:  # worth it as any reduction: `min_saving` shorter
        folded = fold_reshown(candidate, shown) if shown is not None and cfg.reshown else None
        return (
            folded if folded is not None and len(folded) <= len(candidate) * (1.0 - cfg.min_saving) else None
        )

    if raw_chars < cfg.trigger_min_chars:
        state.seen_outputs.setdefault(aid, tool)
        small = pipeline.slim_json(text, ctx)
        if small is not None:  # the original is `small_json.restore(small)`: nothing to store or recall
            return _unstored(msg, small, ("small_json",), raw_chars, reshown(small))
        return _unstored(msg, text, (), raw_chars, reshown(text))

    again = reshown(text) if aid in state.seen_outputs else None
    if again is not None:  # a repeat the context still shows: a marker, not a preview to recall
        return _unstored(msg, text, (), raw_chars, again)
    if cfg.dedup and aid in state.seen_outputs and raw_chars - _DEDUP_CHARS >= min_saved_chars:
        put(original)
        first = state.seen_outputs[aid] or "a tool"
        out = preview(
            text,
            head=cfg.preview_head,
            tail=cfg.preview_tail,
            artifact_id=aid,
            what=f"{DEDUP_NOTE} of {first} in this conversation",
        )
        return _done(msg, out, aid, ("repeated_read_dedup",), raw_chars, "dedup", state, tool)

    reduced = pipeline.reduce_text(text, ctx)
    out, applied = reduced.text, reduced.passes
    note = ""
    if len(out) > cfg.hard_limit_chars:
        out = preview(
            out, head=cfg.preview_head, tail=cfg.preview_tail, artifact_id=aid, what="output truncated"
        )
        applied += ("hard_limit",)
        note = "hard_limit"
    final = _footer(out, raw_chars, applied, aid) if applied else text
    worth = bool(applied) and _worth_it(len(final), raw_chars, applied, cfg, min_saved_chars)
    lossless = pipeline.slim_json(text, ctx) if raw_chars <= cfg.hard_limit_chars else None
    if lossless is not None and (not worth or len(lossless) <= len(final)):
        # JSON re-encoded with nothing lost beats a cut of the same size: no artifact, no recall.
        state.seen_outputs.setdefault(aid, tool)
        return _unstored(msg, lossless, ("small_json",), raw_chars, reshown(lossless))
    if not worth:
        state.seen_outputs.setdefault(aid, tool)
        ingested = _unstored(msg, text, (), raw_chars, reshown(text))
        return (
            ingested
            if ingested.passes
            else dataclasses.replace(ingested, note="" if not applied else "not_smaller")
        )
    again = reshown(final)
    put(original)
    for whole in reduced.stored:  # what the markers name, stored before the text names it
        put(whole)
    return _done(
        msg,
        final if again is None else again,
        aid,
        applied + (("reshown",) if again else ()),
        raw_chars,
        note,
        state,
        tool,
    )


def _unstored(
    msg: Mapping[str, Any], text: str, passes: tuple[str, ...], raw_chars: int, again: str | None
) -> Ingested:
    """An output kept with nothing cut that needs the store: as it came, re-encoded
    losslessly (`small_json`), and with the runs an earlier output shows folded
    (`reshown`: the context holds them)."""
    if again is not None:
        text, passes = again, (*passes, "reshown")
    if not passes:
        return Ingested(dict(msg), None, (), raw_chars, raw_chars)
    return Ingested({**msg, "content": text}, None, passes, raw_chars, len(text), passes[0])


# A dedup preview's size (head + tail + note): what a repeated output shrinks to.
_DEDUP_CHARS = 1200

# Applied for safety, not size: the context limit, and images that are refused or
# unreadable (a decompression bomb must not reach the provider, however small).
_ALWAYS_APPLIED = frozenset({"hard_limit", "image_downsample"})


def _worth_it(
    reduced_chars: int, raw_chars: int, applied: tuple[str, ...], cfg: Config, min_saved_chars: int = 0
) -> bool:
    """Is the reduced form (footer included) shorter than the original by `min_saving`,
    and by at least `min_saved_chars`?"""
    if _ALWAYS_APPLIED.intersection(applied):
        return True
    saved = raw_chars - reduced_chars
    return reduced_chars <= raw_chars * (1.0 - cfg.min_saving) and saved >= min_saved_chars


def _recalled(
    msg: Mapping[str, Any], original: str, aid: str, raw_chars: int, cfg: Config, put: Callable[[str], str]
) -> Ingested:
    """What the agent asked to get back reaches it as recalled: no pass, no dedup, no
    loop guard. Only an original beyond `hard_limit_chars` is cut, with a pointer to
    the line-range and pattern arguments."""
    if raw_chars <= cfg.hard_limit_chars or not isinstance(msg.get("content"), str):
        return Ingested(dict(msg), None, (), raw_chars, raw_chars, "recall")
    put(original)
    out = preview(
        original,
        head=cfg.hard_limit_chars // 2,
        tail=cfg.hard_limit_chars // 4,
        artifact_id=aid,
        what="recalled text too long for one message; ask for start_line/end_line or a pattern",
    )
    return _done_plain(msg, out, aid, ("hard_limit",), raw_chars, "recall")


def hard_limited(msg: Mapping[str, Any], cfg: Config, put: Callable[[str], str]) -> Ingested:
    """A message whose ingestion failed (a bug in a pass, a call it could not read): no
    reduction, but a tool output still never passes `hard_limit_chars`. Over it, the
    original is stored and the preview points at it, as for any cut (I3); the store's
    `OSError` reaches the caller, which then cuts with no handle (`unstored_form`)."""
    content = msg.get("content")
    if msg.get("role") != "tool" or content is None:
        return Ingested(dict(msg))
    original = _original_text(content)
    raw_chars = len(original)
    if raw_chars <= cfg.hard_limit_chars:
        return Ingested(dict(msg), None, (), raw_chars, raw_chars)
    aid = put(original)
    out = preview(
        original, head=cfg.preview_head, tail=cfg.preview_tail, artifact_id=aid, what="output truncated"
    )
    return _done_plain(msg, out, aid, ("hard_limit",), raw_chars, "hard_limit")


def _done_plain(
    msg: Mapping[str, Any], content: str, aid: str, passes: tuple[str, ...], raw_chars: int, note: str
) -> Ingested:
    frozen = dict(msg)
    frozen["content"] = content
    return Ingested(frozen, aid, passes, raw_chars, len(content), note)


def _done(
    msg: Mapping[str, Any],
    content: Any,
    aid: str,
    passes: tuple[str, ...],
    raw_chars: int,
    note: str,
    state: IngestState,
    tool: str,
) -> Ingested:
    state.seen_outputs.setdefault(aid, tool)
    frozen = dict(msg)
    frozen["content"] = content
    chars = len(content) if isinstance(content, str) else len(canonical_json(content))
    return Ingested(frozen, aid, passes, raw_chars, chars, note)


def _ingest_parts(
    msg: Mapping[str, Any],
    parts: list[Any],
    original: str,
    aid: str,
    ctx: PassContext,
    *,
    state: IngestState,
    pipeline: Pipeline,
    put: Callable[[str], str],
) -> Ingested:
    """A multi-part tool result: reduce big text parts and big images, keep the rest."""
    cfg = pipeline.cfg
    total = len(content_text(parts))
    gated = state.recall_counts.get(state.artifact_sources.get(aid, ""), 0) > cfg.recall_gate_tau
    out_parts: list[Any] = []
    applied: list[str] = []
    stored: tuple[str, ...] = ()
    for part in parts:
        new = part
        if not gated and isinstance(part, Mapping):
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                text = part["text"]
                if total >= cfg.trigger_min_chars and len(text) > cfg.max_tool_chars:
                    reduced = pipeline.reduce_text(text, ctx)
                    if reduced.passes:
                        new = {**part, "text": reduced.text}
                        applied += [n for n in reduced.passes if n not in applied]
                        stored += reduced.stored
            elif part.get("type") == "image_url" and pipeline.image_enabled(ctx.tool_name):
                new = safe_image(part, ctx, pipeline)
                if new is not part and "image_downsample" not in applied:
                    applied.append("image_downsample")
        out_parts.append(new)
    if applied:
        out_parts.append(
            {
                "type": "text",
                "text": f"[tokenpilot: parts reduced ({', '.join(applied)}); {recall_hint(aid)}]",
            }
        )
    if not applied or not _worth_it(len(canonical_json(out_parts)), len(original), tuple(applied), cfg):
        state.seen_outputs.setdefault(aid, ctx.tool_name)
        return Ingested(dict(msg), None, (), len(original), len(original), "not_smaller" if applied else "")
    put(original)
    for whole in stored:
        put(whole)
    return _done(msg, out_parts, aid, tuple(applied), len(original), "", state, ctx.tool_name)


_ART_RE = re.compile(r"art_[0-9a-f]{24}")


def artifact_ids_in(text: str) -> list[str]:
    """Artifact ids a text refers to (for stats and eviction's residual-use checks)."""
    return _ART_RE.findall(text)
