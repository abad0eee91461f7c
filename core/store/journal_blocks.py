"""Where a journal cuts: chunk digests and the content-defined ends of blocks (`journal`).

A block of list elements ends after an element with probability len/`TARGET`, decided by
the element's own bytes, or once it reaches `MAX_BLOCK` bytes: the same in every process,
so every replica cuts one state into the same chunks.
"""

from __future__ import annotations

import hashlib
import zlib

TARGET = 512  # average bytes of a block of list elements or dict items (the open block is rewritten per save)
MAX_BLOCK = 16 * TARGET  # a block is cut here whatever its content (bounds the open block)


def digest(text: str) -> str:
    """The key of a chunk: 128 bits of BLAKE2b over its ASCII JSON."""
    return hashlib.blake2b(text.encode("ascii"), digest_size=16).hexdigest()


_SCALE = 2**32 // TARGET


def _blocks(texts: list[str], min_items: int = 1) -> list[list[str]]:
    """Cut a list of element texts into blocks. A block ends after an element with
    probability len/TARGET, decided by the element's own bytes (crc32: the same in every
    process, unlike Python's salted hash), or once it reaches `MAX_BLOCK` bytes."""
    out: list[list[str]] = []
    cur: list[str] = []
    size = 0
    crc = zlib.crc32
    for t in texts:
        cur.append(t)
        n = len(t)
        size += n + 1
        if len(cur) < min_items:
            continue
        if n >= TARGET or size >= MAX_BLOCK or crc(t.encode("ascii")) < n * _SCALE:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def _closes(block: list[str], min_items: int) -> bool:
    """Whether `_blocks` ended this block at a boundary (not at the list's end)."""
    if len(block) < min_items:
        return False
    t = block[-1]
    n = len(t)
    size = sum(map(len, block)) + len(block)
    return n >= TARGET or size >= MAX_BLOCK or zlib.crc32(t.encode("ascii")) < n * _SCALE
