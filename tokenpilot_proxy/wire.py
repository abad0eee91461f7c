"""The chat request as it arrives and as it leaves: checks, per-call messages, rewrite.

OpenClaw appends one unsaved user message per call (`<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>`:
active exec sessions, subagents). Handed to TokenPilot as history it would be
"rewritten" on every call (the next call has the assistant's reply in its place),
breaking the append-only prefix. It is held out and re-appended after TokenPilot's
per-call tail, where per-call content belongs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from tokenpilot import Prepared
from tokenpilot.errors import MessageError
from tokenpilot.messages.limits import nesting_exceeds
from tokenpilot.messages.model import check_messages, content_text

PER_CALL_MARKERS = ("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>",)
# Deepest `[`/`{` nesting accepted. Chat requests nest a dozen levels (tool schemas);
# json.loads recurses once per level, so a hostile body must be stopped before it.
MAX_JSON_DEPTH = 128
# Deepest nesting read from the upstream (answers, stream events, tool-call input the
# model streamed). Looser than a client's: a model may nest its tool input, but not
# beyond what Python can read, re-serialise and hand to the core with stack to spare.
MAX_UPSTREAM_JSON_DEPTH = 512

# After escapes are gone: a JSON string, or an unterminated one running to the end.
_JSON_STRING = re.compile(rb'"[^"]*(?:"|\Z)')
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")  # one bracket kind: depth is all that is counted
_COLLAPSE_PASSES = 8
_BRACKET_RUN = re.compile(rb"\[+|\]+")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


_JSON_NAMES = {
    str: "a string",
    list: "a list",
    bool: "a boolean",
    dict: "an object",
    int: "a number",
    float: "a number",
}


class BadRequest(ValueError):
    """The request body is not a valid chat completion request; `param` names the field,
    `code` the kind of problem when it is not a field's (the body is no JSON at all)."""

    def __init__(self, message: str, param: str | None = None, *, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def parse_body(raw: bytes) -> Any:
    """The request body as JSON, or `BadRequest` saying why not (encoding, syntax, depth)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"the request body is not UTF-8: {exc}", code="invalid_encoding") from exc
    too_deep = BadRequest(
        f"the request body nests JSON arrays/objects deeper than the proxy's limit of {MAX_JSON_DEPTH} levels",
        code="json_too_deep",
    )
    try:
        return loads_bounded(text, MAX_JSON_DEPTH, raw)
    except TooDeep as exc:
        raise too_deep from exc
    except ValueError as exc:  # not JSON, or refused by json.loads (an integer of 5,000 digits)
        raise BadRequest(f"the request body is not valid JSON: {exc}", code="invalid_json") from exc


class TooDeep(ValueError):
    """JSON nested deeper than a limit: refused before anything but `json.loads` reads it."""


# The walk of a parsed value visits at most one container per this many bytes of its text
# (plus `_WALK_MIN`): a body made of little else than containers (millions of `[]`) is
# judged by the byte-level check instead, at C speed, as before.
_WALK_BYTES_PER_CONTAINER = 64
_WALK_MIN = 4096


def loads_bounded(raw: bytes | str, limit: int, data: bytes | None = None) -> Any:
    """JSON from outside the proxy, as a value; `ValueError` when it is not JSON or nests
    deeper than `limit` (`TooDeep`). `RecursionError` never escapes.

    `json.loads` reads first: its C parser guards its own recursion (a body nested past the
    interpreter's limit raises `RecursionError` at once, counted as too deep), and a value
    it returns is checked for depth by walking its containers, which are few in a chat
    body. The byte-level check (`json_depth_exceeds`: every byte of a body several MB long,
    several times over) runs only when the text is not JSON, so that a body both broken
    and too deep is still called too deep, as when that check came first, and when the
    value holds more containers than the walk's budget. `data`: `raw` as UTF-8 bytes, when
    the caller has them."""
    try:
        value = json.loads(raw, parse_constant=_Constant)
    except RecursionError as exc:
        raise TooDeep(f"JSON nested too deeply to read ({exc})") from exc
    except ValueError as exc:  # not JSON (or a number json will not convert)
        if json_depth_exceeds(_utf8(raw, data), limit):
            raise TooDeep(f"JSON nested deeper than {limit} levels") from exc
        raise
    deep = nesting_exceeds(value, limit, len(raw) // _WALK_BYTES_PER_CONTAINER + _WALK_MIN)
    if deep is None:  # past the budget: the bytes say it
        deep = json_depth_exceeds(_utf8(raw, data), limit)
    if deep:
        raise TooDeep(f"JSON nested deeper than {limit} levels")
    return value


class _Constant(float):
    """NaN or ±Infinity as a body spelled it. `encode` writes such a body with `json`
    (orjson would write null, and refuses this type), so it leaves as it came."""


def _utf8(raw: bytes | str, data: bytes | None) -> bytes:
    if data is not None:
        return data
    return raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")


def json_depth_exceeds(raw: bytes, limit: int) -> bool:
    """Whether `[`/`{` nest deeper than `limit` outside JSON strings (escapes honoured).

    Iterative and at C speed for any body: escapes and then strings are removed,
    everything but brackets is deleted, empty pairs are collapsed a few times over, and
    what is left is counted run by run (a run of openers or closers at once).
    """
    s = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    s = _JSON_STRING.sub(b"", s.translate(_AS_SQUARE, _NOT_STRUCTURE))
    depth = 0  # each pass removes the innermost level: it starts the count one deeper
    for _ in range(_COLLAPSE_PASSES):
        shorter = s.replace(b"[]", b"")  # one scan: a pair it uncovers waits for the next
        if len(shorter) == len(s):
            break
        s, depth = shorter, depth + 1
    for run in _BRACKET_RUN.finditer(s):
        n = run.end() - run.start()
        if s[run.start()] == ord("["):
            depth += n
            if depth > limit:
                return True
        else:
            depth -= n
    return False


def check_chat_body(body: Any) -> dict[str, Any]:
    """The body as a dict, or `BadRequest` naming the first wrong field."""
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {json_kind(body)}")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest(f"'messages' must be a list of messages, got {json_kind(messages)}", "messages")
    try:
        check_messages(messages)
    except MessageError as exc:
        raise BadRequest(str(exc), "messages") from exc
    expected = {
        "model": (str,),
        "tools": (list, type(None)),
        "stream": (bool, type(None)),
        "stream_options": (dict, type(None)),
        "prompt_cache_key": (str, type(None)),
    }
    for name, types in expected.items():
        if name in body and not isinstance(body[name], types):
            want = " or ".join("null" if t is type(None) else _JSON_NAMES[t] for t in types)
            raise BadRequest(f"'{name}' must be {want}, got {json_kind(body[name])}", name)
    for j, tool in enumerate(body.get("tools") or []):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(
                f"tools[{j}] must be an object with a 'function' object that has a string 'name'", "tools"
            )
    return body


def json_kind(value: Any) -> str:
    """A JSON value's kind, for error messages."""
    return "null" if value is None else _JSON_NAMES.get(type(value), type(value).__name__)


def is_per_call(msg: Any) -> bool:
    """An unsaved message the agent regenerates on every call (OpenClaw's internal context)."""
    if not isinstance(msg, Mapping) or msg.get("role") != "user":
        return False
    return content_text(msg.get("content")).lstrip().startswith(PER_CALL_MARKERS)


def split_per_call(messages: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(history, trailing per-call messages)."""
    k = len(messages)
    while k > 0 and is_per_call(messages[k - 1]):
        k -= 1
    return list(messages[:k]), list(messages[k:])


def upstream_body(
    body: Mapping[str, Any],
    prepared: Prepared | None,
    per_call: Sequence[Any],
    session_id: str | None,
) -> dict[str, Any]:
    """The body sent upstream: managed messages and tools, a cache key, usage in streams.

    Keys keep the client's order (one byte form per client); `prompt_cache_key` is the
    client's when it sent one (OpenClaw's changes only at a compaction, a real break).
    """
    out = dict(body)
    if prepared is not None:
        out["messages"] = [*prepared.messages, *per_call]
        if prepared.tools:
            out["tools"] = prepared.tools
    key = body.get("prompt_cache_key") or (prepared.session_id if prepared else session_id)
    if key:
        out["prompt_cache_key"] = key
    if body.get("stream") is True:
        out["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return out


def client_wants_usage(body: Mapping[str, Any]) -> bool:
    opts = body.get("stream_options")
    return isinstance(opts, Mapping) and opts.get("include_usage") is True


def encode(body: Mapping[str, Any]) -> bytes:
    """One compact, valid UTF-8 byte form: the same body always gives the same bytes.

    A lone surrogate (a `\\ud800` escape in the client's JSON) has no UTF-8 form; it is
    written back as that escape, and only it, so every other character keeps its bytes.
    """
    # orjson: the bytes of the compact json.dumps below in a tenth of the time, but for a
    # float under 1e-4, which it may write in another form of the same number (0.00001
    # for 1e-05); a body only ever goes through this one path, so its bytes stay stable.
    try:
        return orjson.dumps(body)
    except TypeError:  # a lone surrogate, a key not a str, an int past 64 bits, NaN (_Constant)
        pass
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(_escape, text).encode("utf-8")


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def first_difference(prev: Sequence[Any] | None, cur: Sequence[Any], *, at: int | None = None) -> str:
    """Where a rendered prefix first differs from the previous call's, in one line.

    Without the previous rendering (it was made before a restart), `at` (the core's
    `prefix_break_at`) still names the first differing message, in its new form."""
    if not prev:
        if at is not None and 0 <= at < len(cur):
            role = cur[at].get("role") if isinstance(cur[at], Mapping) else type(cur[at]).__name__
            return f"first differing message: #{at} ({role}), now {_excerpt(cur[at])!r} (rendered before a restart)"
        return "no earlier request of this session in this process"
    for i, (a, b) in enumerate(zip(prev, cur)):
        if a != b:
            role = b.get("role") if isinstance(b, Mapping) else type(b).__name__
            return f"first differing message: #{i} ({role}): {_excerpt(a)!r} -> {_excerpt(b)!r}"
    if len(cur) < len(prev):
        return f"history shortened from {len(prev)} to {len(cur)} messages"
    return "messages identical; tools or system values changed"


def _excerpt(msg: Any, width: int = 80) -> str:
    if isinstance(msg, Mapping):
        text = content_text(msg.get("content")) or json.dumps(msg.get("tool_calls") or "", ensure_ascii=False)
    else:
        text = str(msg)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
