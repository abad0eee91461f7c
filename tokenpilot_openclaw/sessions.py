"""Which session a request belongs to, what it cost, and where its state is kept.

OpenClaw sends `prompt_cache_key: "<sessionId>:<compactions>"` (and the same value
in `session_id` / `x-session-affinity` headers); the recall tool in the plugin only
knows `<sessionId>`. Both go through `normalize_session_id`, so a request and a
recall of the same conversation meet in one TokenPilot session, across compactions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

log = logging.getLogger("tokenpilot.openclaw")

_EPOCH_SUFFIX = re.compile(r":\d+$")
# OpenClaw cuts the session id to 64 - len(":N") code points in the cache key.
MAX_SESSION_CHARS = 56
SESSION_HEADERS = ("session_id", "x-session-affinity")


def normalize_session_id(raw: str) -> str:
    """The conversation's id: OpenClaw's compaction counter suffix removed, length capped."""
    return _EPOCH_SUFFIX.sub("", raw.strip())[:MAX_SESSION_CHARS]


def resolve_session_id(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """`prompt_cache_key`, else the session headers, else None (the core derives one)."""
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and key.strip():
        return normalize_session_id(key)
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value and value.strip():
            return normalize_session_id(value)
    return None


@dataclass(slots=True)
class SessionStats:
    """Per-session counters, from the provider's usage and TokenPilot's prepare stats."""

    calls: int = 0
    errors: int = 0
    usage_reports: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    raw_tokens: int = 0
    sent_tokens: int = 0
    tokens_saved: int = 0
    prefix_breaks: int = 0
    last_prefix_break: str | None = None
    last_cached_tokens: int = 0
    last_prompt_tokens: int = 0

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def record_usage(self, usage: Mapping[str, Any]) -> None:
        """Count an OpenAI `usage` object (also DeepSeek's `prompt_cache_hit_tokens`)."""
        prompt = _int(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
        cached = cached or _int(usage.get("prompt_cache_hit_tokens"))
        self.usage_reports += 1
        self.prompt_tokens += prompt
        self.cached_tokens += cached
        self.output_tokens += _int(usage.get("completion_tokens"))
        self.last_prompt_tokens, self.last_cached_tokens = prompt, cached

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hit_rate": round(self.hit_rate, 4)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionStats:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class StateDir:
    """One JSON file per session (TokenPilot's export plus stats), written atomically.

    Files are ASCII JSON: text the agent sent with lone surrogates is kept as `\\udXXX`
    escapes, so every state can be written and read back as it was.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.mkdir(parents=True, exist_ok=True)

    def file_for(self, session_id: str) -> Path:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
        return self.path / f"{digest[:32]}.json"

    def save(self, session_id: str, data: Mapping[str, Any]) -> None:
        target = self.file_for(session_id)
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=True, separators=(",", ":"))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load_all(self) -> Iterator[dict[str, Any]]:
        """Every readable session file; unreadable ones are reported and skipped."""
        for p in sorted(self.path.glob("*.json")):
            try:
                data = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                log.warning("tokenpilot: skipping unreadable session state %s: %s", p, exc)
                continue
            if isinstance(data, dict) and isinstance(data.get("id"), str):
                yield data
            else:
                log.warning("tokenpilot: skipping session state %s: not a TokenPilot session file", p)
