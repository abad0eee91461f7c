"""Canonical serialisation and content hashing.

Everything model-visible that TokenPilot derives from content is keyed by these
helpers, so that the same input always gives the same bytes (invariant I2).

Lone surrogates ("\ud800" is valid JSON, and Python keeps it as one code point) follow
one rule: the core keeps text as it was given, so the agent's text is forwarded
unchanged, and it is only ever *encoded* with `surrogatepass`. Hashes, artifact
ids and stored originals therefore cover the exact code points, and a recall gives
back the exact string. Where a consumer cannot take a surrogate, it sees U+FFFD in
its place, one character for one: token counts (tiktoken's own fallback), regex
matching in `recall_search`. Store keys are the exception that cannot be replaced
(two ids must not merge): `ArtifactStore` keys such a session id by its hex bytes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

ARTIFACT_PREFIX = "art_"
ARTIFACT_HEX_CHARS = 24  # 96 bits: collision-free for any realistic session


# One encoder for every call: `json.dumps` with options builds a new one each time, which
# cost more than encoding a small message (hashing a history encodes each of its messages).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: one byte form per value (`json.dumps`'s text)."""
    return _CANONICAL.encode(obj)


def to_bytes(text: str) -> bytes:
    """Encode text losslessly, even with lone surrogates from broken UTF-8."""
    return text.encode("utf-8", "surrogatepass")


def from_bytes(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = to_bytes(data)
    return hashlib.sha256(data).hexdigest()


def artifact_id_for(data: str | bytes) -> str:
    """The model-visible handle of an original: a prefix of its content hash."""
    return ARTIFACT_PREFIX + sha256_hex(data)[:ARTIFACT_HEX_CHARS]
