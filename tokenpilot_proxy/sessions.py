"""Which session a request belongs to, what it cost, and where its state is kept.

The whole key names the session: two keys that differ anywhere are two sessions, so
they never read each other's artifacts or break each other's cached prefix.

OpenClaw sends `prompt_cache_key: "<sessionId>:<compactions>"` (and the same value in
the `session_id` / `x-session-affinity` headers); the plugin's recall tool knows only
`<sessionId>`, whole. `normalize_session_id` maps a key to its session id:

1. OpenClaw's compaction suffix `:<N>` is dropped: a conversation stays one session
   across compactions.
2. OpenClaw fits the key into OpenAI's 64 code points by cutting a long session id to
   `64 - len(":<N>")` code points, a cut that moves with the compaction count but
   keeps at least 56 (`MAX_SESSION_CHARS`, for counts below 10**7). A key of exactly
   64 code points ending in `:<N>` is read as such a cut, and its first 56 code points
   (what every compaction count leaves) name the session. Two such keys sharing those
   56 are one session: OpenClaw's cut has already made them indistinguishable.
3. An id of up to 56 code points is kept as it is. A longer one, or one holding a lone
   surrogate or a control character (which no UTF-8 store or log line takes as is),
   becomes a readable prefix, `~` and a hash of the WHOLE id: at most 56 code points,
   distinct for distinct ids. A key already shaped like a hashed or derived id (below)
   is hashed too, so no key can name another session's id.

A recall (`recall_candidates`) tries the id of the whole `session` it is given, then,
when no session has that id and it is over 56 code points, the id of its 56-code-point
cut: the session OpenClaw's cut key (rule 2) created for the plugin's whole sessionId.
`GET /tokenpilot/artifacts/{id}` also takes a session's id exactly as
`/tokenpilot/stats` lists it (a hashed id included, whose `?` stands for what no UTF-8
text holds), and reads `session` with lone surrogates percent-encoded as their
surrogate-pass UTF-8 bytes (U+D800 is `%ED%A0%80`: `query_session`), so a key holding one
can be spelled in a URL at all.

A request with no key and no session header gets an id derived from the conversation's
start (`TokenPilot.derive_session_id`) and, after `_`, the caller's
`credential_fingerprint` (a hash of its Authorization / x-api-key headers): two callers
with different credentials whose conversations start alike stay two sessions, and a
derived session's artifacts are served only to a caller with the same credentials
(`derived_owner`). Behind `--auth-token-env` every caller sends the proxy's own token,
so there only x-api-key tells callers apart.
"""

from __future__ import annotations

import hashlib
import logging
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tokenpilot.store.state_files import StateFiles

log = logging.getLogger("tokenpilot.openclaw")

_EPOCH_SUFFIX = re.compile(r":\d+$")
# The cap on an id kept as it is, and the length of a hashed one.
MAX_SESSION_CHARS = 56
# OpenAI's limit on prompt_cache_key; OpenClaw cuts its session id to fit it.
CACHE_KEY_CHARS = 64
SESSION_HEADERS = ("session_id", "x-session-affinity")
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")
_HASH_HEX = 16
_PREFIX_CHARS = MAX_SESSION_CHARS - 1 - _HASH_HEX
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_HASHED_SHAPE = re.compile(rf".{{0,{_PREFIX_CHARS}}}~[0-9a-f]{{{_HASH_HEX}}}", re.DOTALL)
_DERIVED_SHAPE = re.compile(rf"s_[0-9a-f]{{16}}(?:_([0-9a-f]{{{_HASH_HEX}}}))?")


def _sha_hex(text: str, n: int = _HASH_HEX) -> str:
    """Hash of any str, lone surrogates included (they come from JSON escapes like \\ud800)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def _needs_hash(base: str) -> bool:
    return (
        len(base) > MAX_SESSION_CHARS
        or _UNSAFE.search(base) is not None
        or _HASHED_SHAPE.fullmatch(base) is not None
        or _DERIVED_SHAPE.fullmatch(base) is not None
    )


def _bounded(base: str) -> str:
    """The id for a key's base: itself when short and plain, else prefix + hash of all of it."""
    if not _needs_hash(base):
        return base
    return f"{_UNSAFE.sub('?', base[:_PREFIX_CHARS])}~{_sha_hex(base)}"


def _is_openclaw_cut(key: str) -> bool:
    """A key that fills OpenAI's 64 code points and ends in `:<N>`: OpenClaw cut its id."""
    return len(key) == CACHE_KEY_CHARS and _EPOCH_SUFFIX.search(key) is not None


def normalize_session_id(raw: str) -> str:
    """The session id for a cache key, session header or recall session (module docstring)."""
    key = raw.strip()
    base = _EPOCH_SUFFIX.sub("", key)
    if _is_openclaw_cut(key):
        base = base[:MAX_SESSION_CHARS]
    return _bounded(base)


def recall_candidates(raw: str) -> list[str]:
    """Session ids a recall may mean, best first: the whole id's, then its 56-code-point cut's."""
    base = _EPOCH_SUFFIX.sub("", raw.strip())
    ids = [normalize_session_id(raw)]
    if len(base) > MAX_SESSION_CHARS:
        cut = _bounded(base[:MAX_SESSION_CHARS])
        if cut not in ids:
            ids.append(cut)
    return ids


def query_session(raw_query: str, name: str = "session") -> str | None:
    """The `name` parameter of a raw (still percent-encoded) query string, its escapes read as
    UTF-8 with lone surrogates allowed (`%ED%A0%80` is U+D800), which the usual decoding
    turns into U+FFFD, naming another session; None when absent or not decodable."""
    try:
        pairs = urllib.parse.parse_qsl(raw_query, keep_blank_values=True, errors="surrogatepass")
    except (UnicodeDecodeError, ValueError):  # bytes no UTF-8 encoder writes, e.g. %FF
        return None
    return next((value for key, value in pairs if key == name), None)


def resolve_session_id(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """`prompt_cache_key`, else the session headers, else None (the id is derived)."""
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and key.strip():
        return normalize_session_id(key)
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value and value.strip():
            return normalize_session_id(value)
    return None


def credential_fingerprint(headers: Mapping[str, str]) -> str | None:
    """A hash of the caller's credentials (None without any); the credentials are never kept."""
    parts = [f"{name}\0{headers[name]}" for name in CREDENTIAL_HEADERS if headers.get(name)]
    if not parts:
        return None
    return _sha_hex("tokenpilot-credential\0" + "\0".join(parts))


def derived_session_id(conversation_id: str, fingerprint: str | None) -> str:
    """A derived session's id: the conversation's (`s_<16 hex>`), then the caller's fingerprint."""
    return conversation_id if fingerprint is None else f"{conversation_id}_{fingerprint}"


def derived_owner(session_id: str) -> tuple[bool, str | None]:
    """(whether the proxy derived this id, the fingerprint of the caller it belongs to)."""
    m = _DERIVED_SHAPE.fullmatch(session_id)
    return (False, None) if m is None else (True, m.group(1))


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
    last_prefix_break_detail: str | None = None  # the first differing message, in one line
    last_cached_tokens: int = 0
    last_prompt_tokens: int = 0
    # for the dashboard, `/metrics` and `tokenpilot doctor` (see `timeline`):
    model: str | None = None  # the model the session's last call named (prices it)
    tokens_raw: int = 0  # what the agent would have sent, summed over calls (TokenPilot's count)
    tokens_sent: int = 0  # what TokenPilot sent instead, summed over calls
    evictions: int = 0  # calls whose prefix was re-rendered by a deliberate eviction
    recalls: int = 0  # originals read back (the model's recall_artifact, or the plugin's)
    store_errors: int = 0  # calls whose outputs the artifact store refused (sent unreduced)
    series: list[list[float]] = field(default_factory=list)  # bounded: `timeline.SERIES_POINTS`
    breaks: list[dict[str, Any]] = field(default_factory=list)  # the last `timeline.KEPT_BREAKS`
    artifacts: list[str] = field(default_factory=list)  # ids of the last `timeline.KEPT_ARTIFACTS`

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def record_usage(self, usage: Mapping[str, Any]) -> None:
        """Count a `usage` object: OpenAI chat (also DeepSeek's `prompt_cache_hit_tokens`),
        OpenAI Responses (`input_tokens_details`), Anthropic, whose `input_tokens`
        leave out the cache reads and writes (the prompt is all three), or Gemini's
        `usageMetadata` (thoughts are billed as output)."""
        if "promptTokenCount" in usage:
            usage = {"prompt_tokens": _int(usage.get("promptTokenCount")) + _int(usage.get("toolUsePromptTokenCount")),
                     "prompt_tokens_details": {"cached_tokens": _int(usage.get("cachedContentTokenCount"))},
                     "completion_tokens": _int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount"))}  # fmt: skip
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
        cached = cached or _int(usage.get("prompt_cache_hit_tokens"))
        prompt = _int(usage.get("prompt_tokens")) or _int(usage.get("input_tokens"))
        read = _int(usage.get("cache_read_input_tokens"))
        if read or "cache_creation_input_tokens" in usage:
            prompt += read + _int(usage.get("cache_creation_input_tokens"))
            cached = read
        self.usage_reports += 1
        self.prompt_tokens += prompt
        self.cached_tokens += cached
        self.output_tokens += _int(usage.get("completion_tokens")) or _int(usage.get("output_tokens"))
        self.last_prompt_tokens, self.last_cached_tokens = prompt, cached

    def to_dict(self) -> dict[str, Any]:
        """The fields as `dataclasses.asdict` gives them (lists and dicts copied), plus the hit
        rate. Written on every save, so built directly: `asdict` walks every leaf of the
        series through `deepcopy`, ~2 ms a call for a long session."""
        out = {name: _copied(getattr(self, name)) for name in _FIELD_NAMES}
        out["hit_rate"] = round(self.hit_rate, 4)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionStats:
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in names}
        for name in ("series", "breaks", "artifacts"):  # a state file from an older version lacks them
            kept[name] = list(kept[name]) if isinstance(kept.get(name), list) else []
        return cls(**kept)


_FIELD_NAMES = tuple(f.name for f in fields(SessionStats))


def _copied(value: Any) -> Any:
    """A copy of a JSON value's lists and dicts (its leaves are immutable)."""
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# counters that add up: across replicas (`merge_stats`) and across sessions (the totals)
COUNTERS = (
    "calls",
    "errors",
    "usage_reports",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
    "tokens_saved",
    "tokens_raw",
    "tokens_sent",
    "evictions",
    "recalls",
    "store_errors",
)
# per-session fields that are no total: what `/tokenpilot/stats` leaves out of its totals
NOT_TOTALS = frozenset({"raw_tokens", "sent_tokens", "model", "series", "breaks", "artifacts"})


def merge_stats(
    stored: SessionStats, local: SessionStats | None, base: Mapping[str, Any] | None
) -> SessionStats:
    """Another replica's newer `stored` stats plus what this process counted since `base`
    (its stats when it last read or wrote the store), so no replica's usage is lost."""
    if local is None:
        return stored
    was = base or {}
    out = SessionStats.from_dict(stored.to_dict())
    for f in fields(SessionStats):
        mine = getattr(local, f.name)
        if f.name in COUNTERS:
            setattr(out, f.name, getattr(stored, f.name) + mine - int(was.get(f.name) or 0))
        elif f.name in was and mine != was[f.name]:
            setattr(out, f.name, mine)
    return out


def summarize(sessions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What `/tokenpilot/stats` says of its sessions without naming them (no bearer token)
    and what `tokenpilot openclaw doctor` judges by: counts and the causes of prefix breaks,
    never an id or a line of a conversation."""
    multi = [s for s in sessions.values() if int(s.get("usage_reports") or 0) >= 2]
    causes: dict[str, int] = {}
    broken = 0
    for s in sessions.values():
        if int(s.get("prefix_breaks") or 0):
            broken += 1
            cause = str(s.get("last_prefix_break") or "unknown")
            causes[cause] = causes.get(cause, 0) + 1
    return {
        "sessions": len(sessions),
        "multi_call_sessions": len(multi),
        "multi_call_sessions_cached": sum(1 for s in multi if int(s.get("cached_tokens") or 0)),
        "sessions_with_prefix_breaks": broken,
        "last_prefix_break_causes": dict(sorted(causes.items())),
    }


# The session files moved to the core (`tokenpilot.store.state_files`), beside the store protocol.
StateDir = StateFiles
