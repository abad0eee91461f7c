"""The ingestion gate for the agent's and the user's own messages (Ω_int).

Their words are never rewritten (I5): only oversized tool-call argument strings are cut
(inside valid JSON) and oversized images in user messages downsampled, each original
stored first under its content hash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._canonical import artifact_id_for
from ..passes.base import PassContext
from ..passes.images import downsample_image_part
from .pipeline import Ingested, Pipeline

__all__ = ["ingest_assistant", "ingest_user", "safe_image"]


def safe_image(part: Mapping[str, Any], ctx: PassContext, pipeline: Pipeline) -> Any:
    """The image part downsampled, or as it came when that fails (never raises)."""
    try:
        return downsample_image_part(dict(part), ctx, settings=pipeline.images)
    except Exception:
        return part


def ingest_assistant(msg: Mapping[str, Any], *, pipeline: Pipeline, put: Callable[[str], str]) -> Ingested:
    """The agent's own message: only oversized tool-call argument strings are cut, in its
    tool calls or in a call it writes as text (OpenHands' `<function=…>` form, for a
    model prompted for its tools in text)."""
    calls = msg.get("tool_calls")
    if not pipeline.cfg.tool_arg_max_chars:
        return Ingested(dict(msg))
    content = msg.get("content")
    if not calls and isinstance(content, str) and len(content) > pipeline.cfg.tool_arg_max_chars:
        return _ingest_text_call(msg, content, pipeline, put)
    if not calls:
        return Ingested(dict(msg))
    new_calls = []
    changed = False
    aids = []
    for call in calls:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if not isinstance(args, str) or len(args) <= pipeline.cfg.tool_arg_max_chars:
            new_calls.append(call)
            continue
        aid = artifact_id_for(args)
        ctx = PassContext(tool_name=str(fn.get("name", "")), artifact_id=aid)
        try:
            out = pipeline.tool_args.apply_arguments(args, ctx)
        except Exception:
            out = args
        if out is args or out == args:
            new_calls.append(call)
            continue
        put(args)
        aids.append(aid)
        new_calls.append({**call, "function": {**fn, "arguments": out}})
        changed = True
    if not changed:
        return Ingested(dict(msg))
    frozen = dict(msg)
    frozen["tool_calls"] = new_calls
    return Ingested(frozen, aids[0], ("tool_arg_truncation",), note="")


def _ingest_text_call(
    msg: Mapping[str, Any], content: str, pipeline: Pipeline, put: Callable[[str], str]
) -> Ingested:
    """A tool call written as text with its oversized parameter values cut, the whole
    message text stored first (its id in each cut's marker)."""
    aid = artifact_id_for(content)
    try:
        out = pipeline.tool_args.apply_text_call(content, PassContext(tool_name="", artifact_id=aid))
    except Exception:
        out = content
    if out is content or out == content:
        return Ingested(dict(msg))
    put(content)
    return Ingested({**msg, "content": out}, aid, ("tool_arg_truncation",), note="")


def ingest_user(msg: Mapping[str, Any], *, pipeline: Pipeline, put: Callable[[str], str]) -> Ingested:
    """User words are never touched; only oversized image parts are downsampled."""
    content = msg.get("content")
    if not pipeline.cfg.downsample_user_images or not isinstance(content, list):
        return Ingested(dict(msg))
    out = []
    aid = None
    for part in content:
        if isinstance(part, Mapping) and part.get("type") == "image_url":
            url = (part.get("image_url") or {}).get("url")
            if isinstance(url, str) and url.startswith("data:"):
                part_aid = artifact_id_for(url)
                new = safe_image(part, PassContext(artifact_id=part_aid), pipeline)
                if new is not part:
                    put(url)
                    aid = aid or part_aid
                out.append(new)
                continue
        out.append(part)
    if aid is None:
        return Ingested(dict(msg))
    frozen = dict(msg)
    frozen["content"] = out
    return Ingested(frozen, aid, ("image_downsample",))
