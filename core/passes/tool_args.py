"""tool_args: shorten huge string arguments inside a tool call's JSON arguments.

An assistant's tool call stays in the history and is re-sent on every turn; when it
wrote a 200 KB file or patch, that content is paid for again and again although the
tool already has it. Every string value (at any depth) longer than `max_chars` becomes
its head and tail around a marker naming the stored original; keys, numbers, order and
structure are kept, and the result is always valid JSON.

Numbers are re-emitted from their original text (no `1e400` -> `Infinity`, no lost
digits) and duplicate keys survive, because the document is rebuilt from the parse
tree of `json.loads` with literal-preserving hooks rather than re-dumped from Python
values. Strings are written with `ensure_ascii=False`, except those holding a lone
surrogate, which stay escaped so the result can be encoded as UTF-8.

Pure and deterministic; never raises; returns its input object when nothing is longer
than `max_chars` or the input is not JSON.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ..messages.observations import text_call_spans
from .base import JSON, PREVIEW_HEAD, PREVIEW_TAIL, PassContext, preview

__all__ = ["ToolArgTruncation"]

_SURROGATE = re.compile("[\ud800-\udfff]")


class _Literal(str):
    """A number or constant (`NaN`) exactly as it was written."""


class _Object(list):
    """An object's (key, value) pairs in order, duplicates included."""


def _parse(doc: str) -> Any:
    return json.loads(
        doc,
        object_pairs_hook=_Object,
        parse_int=_Literal,
        parse_float=_Literal,
        parse_constant=_Literal,
    )


def _dump_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=bool(_SURROGATE.search(s)))


@dataclass(frozen=True, slots=True)
class ToolArgTruncation:
    """Replace string arguments longer than `max_chars` by a head/tail preview; output stays valid JSON."""

    name: ClassVar[str] = "tool_args"
    accepts: ClassVar[frozenset[str]] = frozenset({JSON})  # the agent's own tool-call arguments

    max_chars: int = 4000
    """Strings up to this many characters are kept whole."""
    head: int = PREVIEW_HEAD
    """Characters kept from the start of a long string."""
    tail: int = PREVIEW_TAIL
    """Characters kept from the end of a long string."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """Same as `apply_arguments`: the text of a tool call's `arguments` is JSON."""
        return self.apply_arguments(text, ctx)

    def _preview(self, value: str, ctx: PassContext) -> str:
        """One long argument string as its head and tail around a marker naming the original."""
        return preview(
            value,
            head=max(0, self.head),
            tail=max(0, self.tail),
            artifact_id=ctx.artifact_id,
            what="tool-call argument truncated",
        )

    def apply_text_call(self, text: str, ctx: PassContext) -> str:
        """An assistant text that writes its tool call (OpenHands' `<function=…>` form,
        `messages.observations.text_call_spans`) with each parameter value longer than
        `max_chars` previewed as an argument is; the input object itself when none is."""
        if len(text) <= self.max_chars:
            return text
        out, last = [], 0
        for start, end in text_call_spans(text):
            if end - start <= self.max_chars:
                continue
            value = text[start:end]
            short = self._preview(value, ctx)
            if short != value:
                out += [text[last:start], short]
                last = end
        return "".join([*out, text[last:]]) if out else text

    def apply_arguments(self, arguments_json: str, ctx: PassContext) -> str:
        """The arguments JSON with long strings previewed, or the input object itself."""
        try:
            if not isinstance(arguments_json, str) or len(arguments_json) <= self.max_chars:
                return arguments_json  # no string inside can be longer than the whole document
            changed = False

            def dump(value: Any) -> str:
                nonlocal changed
                if isinstance(value, _Object):
                    return "{" + ",".join(f"{_dump_str(k)}:{dump(v)}" for k, v in value) + "}"
                if isinstance(value, list):
                    return "[" + ",".join(dump(v) for v in value) + "]"
                if isinstance(value, _Literal):
                    return str.__str__(value)
                if isinstance(value, str):
                    if len(value) > self.max_chars:
                        short = self._preview(value, ctx)
                        if short != value:
                            changed = True
                            value = short
                    return _dump_str(value)
                return json.dumps(value)  # True, False, None

            out = dump(_parse(arguments_json))
            return out if changed else arguments_json
        except Exception:  # not JSON, too deeply nested, anything: leave the call as it was
            return arguments_json
