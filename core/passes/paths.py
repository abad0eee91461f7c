"""paths: middle-elide very long file paths, keep where they start and the file name.

Build logs, stack traces and `find` output repeat deep paths such as
`/home/ci/.cache/pypoetry/virtualenvs/app-x1-py3.11/lib/python3.11/site-packages/pkg/mod.py`.
The model needs the root (which tree) and the tail (which package, which file), not the
middle. A path longer than `max_len` keeps its first segments and its last ones, as many
as fit, around `…`: `/home/ci/…/site-packages/pkg/mod.py`. The file name is never cut,
even when it alone is longer than `max_len`.

Left alone: URLs (`scheme://…`, `www.…`) and `data:` URIs, paths with no more than one
directory, and runs that look like base64 (no dot, mixed case and digits) rather than a
path. Two long paths that differ only in the middle elide to the same text: the original
stays recallable.

Pure and deterministic; never raises; returns its input object when nothing changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from .base import LINE_KINDS, PassContext

__all__ = ["PathTruncation", "elide_path"]

ELLIPSIS = "…"
_SEG = r"[\w.@+~,=%-]+"
_TOKEN = re.compile(
    rf"""
      (?P<skip>
          (?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>`)\]]*  # URL with a scheme
        | \bwww\.[^\s"'<>`)\]]*                         # URL without one
        | \bdata:[\w.+/-]*(?:;[^,\s]*)?,[^\s"'<>`)\]]*  # data URI (base64 has slashes)
      )
    | (?<![\w.@+~,=%/\\-])(?P<path>
          (?:~|\.{{1,2}})?/?(?:{_SEG}/)+{_SEG}/?        # POSIX: /a/b/c, ./a/b, ~/a/b, a/b/c
        | [A-Za-z]:\\(?:{_SEG}\\)+{_SEG}\\?            # Windows: C:\\a\\b\\c
        | \\\\{_SEG}(?:\\{_SEG})+\\?                   # UNC: \\\\server\\share\\file
      )
    """,
    re.VERBOSE,
)
_RUN_CHARS = r"[^\s\"'<>()\[\]{}`|]"


def _long_run(max_len: int) -> re.Pattern[str]:
    # The lookbehind starts a run only at its first character: linear, not quadratic, time.
    return re.compile(rf"(?<!{_RUN_CHARS}){_RUN_CHARS}{{{max_len + 1},}}")


_BASE64ISH = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def elide_path(path: str, max_len: int) -> str:
    """`path` shortened to about `max_len` by dropping middle directories; the file name stays."""
    sep = "\\" if "\\" in path and "/" not in path else "/"
    trailing = sep if path.endswith(sep) else ""
    parts = path[: len(path) - len(trailing)].split(sep)
    # The root of an absolute path ("", or "\\\\server" pieces) sticks to the first real segment.
    lead = 0
    while lead < len(parts) - 1 and parts[lead] == "":
        lead += 1
    head_n, tail_n = lead + 1, 1
    if head_n + tail_n >= len(parts):
        return path

    def render(h: int, t: int) -> str:
        return sep.join([*parts[:h], ELLIPSIS, *parts[len(parts) - t :]]) + trailing

    # Alternate: one more directory next to the file (the package says most), then one more
    # from the root, while the result fits.
    grown = True
    while grown and head_n + tail_n < len(parts) - 1:
        grown = False
        if len(render(head_n, tail_n + 1)) <= max_len:
            tail_n += 1
            grown = True
        if head_n + tail_n < len(parts) - 1 and len(render(head_n + 1, tail_n)) <= max_len:
            head_n += 1
            grown = True
    if head_n + tail_n >= len(parts):
        return path
    short = render(head_n, tail_n)
    return short if len(short) < len(path) else path


def _looks_like_base64(token: str) -> bool:
    return (
        _BASE64ISH.fullmatch(token) is not None
        and any(c.isdigit() for c in token)
        and any(c.islower() for c in token)
        and any(c.isupper() for c in token)
    )


@dataclass(frozen=True, slots=True)
class PathTruncation:
    """Elide the middle directories of file paths longer than `max_len` characters."""

    name: ClassVar[str] = "paths"
    accepts: ClassVar[frozenset[str]] = LINE_KINDS

    max_len: int = 80
    """Paths longer than this are elided to (about) this length; the file name is always kept."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The text with long paths elided, or the input object itself when none is found."""
        try:
            if (
                not isinstance(text, str)
                or len(text) <= self.max_len
                or ("/" not in text and "\\" not in text)
            ):
                return text
            max_len = max(1, self.max_len)

            def replace(m: re.Match[str]) -> str:
                path = m["path"]
                if path is None or len(path) <= max_len or _looks_like_base64(path):
                    return m[0]
                return elide_path(path, max_len)

            # Only a run of non-blank characters longer than max_len can hold a long path:
            # find those first (fast, in C), and look for paths and URLs inside them only.
            out = _long_run(max_len).sub(lambda run: _TOKEN.sub(replace, run[0]), text)
            return text if out == text else out
        except Exception:
            return text
