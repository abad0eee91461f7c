"""Recently seen originals of digested strings, so a resent message is recognised by a
plain comparison instead of a second SHA-256 of it.

The agent resends its whole history at every call. An entry keeps only a `Digest` of an
original it reduced (see `fingerprint`), and hashing every earlier original again made
each call O(history) in SHA-256 work: at call 100 of a session of 60 KB outputs, 6 MB
hashed per call. Keeping the last original seen under each digest turns that check into
`str ==` (a memory compare, and no work at all when the caller passes the same objects).

Memory stays bounded: a process-wide LRU of at most `MAX_CHARS` chars, of strings up to
`MAX_STRING` chars. A digest whose
original has left it (or was never seen in this process: another replica ingested it)
is checked by hashing as before, which is always correct; the memo only saves time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

MAX_CHARS = 32 * 1024 * 1024  # ~32 MB of ASCII text (more for wider code points), all sessions
MIN_CHARS = 256  # below this, hashing is as cheap as the bookkeeping
# Longer originals are rare and are what the digest exists for: a 5 MB output is never
# held once ingested (tests/test_memory_bounds.py); they are hashed at each resend.
MAX_STRING = 256 * 1024

_lock = threading.Lock()
_memo: OrderedDict[Any, str] = OrderedDict()  # digest -> the original last seen under it
_chars = 0


def remember(key: Any, text: str) -> None:
    """Keep `text` as the original behind `key` (a `Digest` computed from it)."""
    global _chars
    size = len(text)
    if size < MIN_CHARS or size > min(MAX_STRING, MAX_CHARS):
        return
    with _lock:
        old = _memo.pop(key, None)
        if old is not None:
            _chars -= len(old)
        _memo[key] = text
        _chars += size
        while _chars > MAX_CHARS:
            _, dropped = _memo.popitem(last=False)
            _chars -= len(dropped)


def recall(key: Any) -> str | None:
    """The original last remembered under `key`, or None; marks it recently used."""
    with _lock:
        text = _memo.get(key)
        if text is not None:
            _memo.move_to_end(key)
        return text


def held_chars() -> int:
    """Chars held now (for tests of the bound)."""
    return _chars


def clear() -> None:
    global _chars
    with _lock:
        _memo.clear()
        _chars = 0
