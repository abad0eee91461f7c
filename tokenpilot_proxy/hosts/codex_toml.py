"""Codex's `config.toml`, edited as text so the user's other keys and comments stay.

Python reads TOML (`tomllib`) but cannot write it without losing comments, so two
careful line edits make the change: the top-level `model_provider` line, and the
one `[model_providers.tokenpilot]` table. The result is parsed again and must equal
the user's config plus exactly those keys; anything else (a key spelled inline, a
multi-line string that looks like a header) is refused, never written.
"""

from __future__ import annotations

import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PROVIDER_ID = "tokenpilot"
_HEADER = re.compile(r"^\s*\[")
_PROVIDER_KEY = re.compile(r"^\s*model_provider\s*=")
_OUR_TABLE = re.compile(rf'^\s*\[\s*model_providers\s*\.\s*("?){PROVIDER_ID}\1\s*\]\s*(#.*)?$')


class TomlEditError(ValueError):
    """The file cannot be edited safely as text."""


def provider_table(base_url: str, env_key: str) -> dict[str, str]:
    return {"name": "TokenPilot", "base_url": base_url, "env_key": env_key, "wire_api": "responses"}


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def enable_text(text: str, base_url: str, env_key: str = "OPENAI_API_KEY") -> str:
    """`text` with `model_provider = "tokenpilot"` and our provider table; idempotent."""
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlEditError(f"not valid TOML, left as it is: {exc}") from exc
    table = provider_table(base_url, env_key)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    first_header = next((i for i, line in enumerate(lines) if _HEADER.match(line)), len(lines))
    key_line = f"model_provider = {_quote(PROVIDER_ID)}\n"
    at = next((i for i in range(first_header) if _PROVIDER_KEY.match(lines[i])), None)
    if at is not None:
        lines[at] = key_line
    else:  # a top-level key must come before the first table
        gap = ["\n"] if first_header < len(lines) else []
        lines[first_header:first_header] = [key_line, *gap]
    body = [f"[model_providers.{PROVIDER_ID}]\n"] + [f"{k} = {_quote(v)}\n" for k, v in table.items()]
    start = next((i for i, line in enumerate(lines) if _OUR_TABLE.match(line)), None)
    if start is None:
        if lines and lines[-1].strip():
            lines.append("\n")
        lines += body
    else:
        end = next((i for i in range(start + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
        lines[start:end] = body + (["\n"] if end < len(lines) else [])
    out = "".join(lines)
    _check(before, out, table)
    return out


def _check(before: dict[str, Any], out: str, table: dict[str, str]) -> None:
    """The edited text parses to the user's config plus our two keys, nothing else."""
    try:
        after = tomllib.loads(out)
    except tomllib.TOMLDecodeError as exc:
        raise TomlEditError(f"the edit would not parse ({exc}); the file is left as it is") from exc
    expected = dict(before)
    expected["model_provider"] = PROVIDER_ID
    providers = dict(expected.get("model_providers") or {})
    providers[PROVIDER_ID] = table
    expected["model_providers"] = providers
    if after != expected:
        raise TomlEditError(
            "the file defines model_provider or model_providers.tokenpilot in a form this edit "
            "does not handle (inline table, dotted key or multi-line string): set them by hand"
        )
