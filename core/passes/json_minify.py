"""json_minify: drop the indentation of a pretty-printed JSON output.

APIs and CLIs (`gh api`, `kubectl -o json`, MCP servers) answer with indented JSON:
often a third of the characters are spaces and newlines. The minified form carries
the same document.

It is lossless by construction: the text is first validated with `json.loads`, then
only the whitespace *between* tokens is removed, and `\\uXXXX` escapes are written out as
the characters themselves (as `ensure_ascii=False` would), except control characters,
quote, backslash and lone surrogates, which must stay escaped. Numbers, key order and
even duplicate keys stay exactly as they were, which a `loads`/`dumps` round trip would
not guarantee (`1.0e2` would become `100.0`; a repeated key would vanish). JSON Lines (every non-blank line an object or array) are minified
line by line. The result is used only when it is at least `min_saving_ratio` shorter.

Pure and deterministic; never raises; returns its input object when it does not apply.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import ClassVar

from .base import JSON, PassContext

__all__ = ["JsonMinify", "minify_json"]

# A JSON string (unrolled loop: fast on long strings) or a run of other non-blank characters:
# joined, they are the document without its insignificant whitespace.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[^ \t\n\r"]+')
# An escaped backslash `\\` (kept, so the scan stays in step with escape pairs) or a `\uXXXX`,
# optionally followed by a second one for a surrogate pair. Outside strings JSON has no
# backslashes, so this can run over the whole minified document.
_ESCAPE = re.compile(r"\\(?:\\|u([0-9a-fA-F]{4})(?:\\u([dD][c-fC-F][0-9a-fA-F]{2}))?)")


def _char_or_escape(code: int, original: str) -> str:
    # Control characters, quote, backslash and lone surrogates must stay escaped.
    if code < 0x20 or code in (0x22, 0x5C) or 0xD800 <= code <= 0xDFFF:
        return original
    return chr(code)


def _unescape(m: re.Match[str]) -> str:
    if m[1] is None:
        return m[0]  # an escaped backslash
    first, low = int(m[1], 16), m[2]
    if low is not None:
        if 0xD800 <= first <= 0xDBFF:  # a surrogate pair: one character
            return chr(0x10000 + ((first - 0xD800) << 10) + (int(low, 16) - 0xDC00))
        return _char_or_escape(first, "\\u" + m[1]) + "\\u" + low  # the low one is lone
    return _char_or_escape(first, m[0])


def minify_json(doc: str, *, unescape_unicode: bool = True) -> str | None:
    """`doc` without whitespace between tokens, or None when it is not one JSON object or array."""
    stripped = doc.strip(" \t\n\r")
    if not stripped or stripped[0] not in "{[":
        return None
    json.loads(stripped)  # validation only: raises on anything that is not JSON
    out = "".join(_TOKENS.findall(stripped))
    if unescape_unicode and "\\u" in out:
        out = _ESCAPE.sub(_unescape, out)
    return out


@dataclass(frozen=True, slots=True)
class JsonMinify:
    """Minify an output that is one JSON document, or JSON Lines, when that saves enough."""

    name: ClassVar[str] = "json_minify"
    accepts: ClassVar[frozenset[str]] = frozenset({JSON})  # a file's text (`cat x.json`) stays exact

    min_saving_ratio: float = 0.1
    """Use the minified text only when it is at least this share shorter (chars); else keep the original."""
    json_lines: bool = True
    """Also minify JSON Lines: two or more non-blank lines, each one JSON object or array."""
    unescape_unicode: bool = True
    """Write `\\u00e9`-style escapes as the characters themselves (fewer tokens, same strings)."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The minified JSON, or the input object itself when it is not JSON or saves too little."""
        try:
            if not isinstance(text, str) or len(text) < 2:
                return text
            out = self._minify(text)
            if out is None or out == text:
                return text
            if len(text) - len(out) < self.min_saving_ratio * len(text):
                return text
            return out
        except Exception:
            return text

    def _minify(self, text: str) -> str | None:
        try:
            return minify_json(text, unescape_unicode=self.unescape_unicode)
        except (ValueError, RecursionError):
            pass
        if not self.json_lines or "\n" not in text.strip():
            return None
        lines = [ln for ln in text.split("\n") if ln.strip(" \t\r")]
        if len(lines) < 2:
            return None
        out = []
        for line in lines:
            try:
                m = minify_json(line, unescape_unicode=self.unescape_unicode)
            except (ValueError, RecursionError):
                return None
            if m is None:
                return None
            out.append(m)
        return "\n".join(out)
