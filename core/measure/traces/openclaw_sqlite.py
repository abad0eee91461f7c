"""OpenClaw 2026.9 transcript store: `openclaw-agent.sqlite`, table `transcript_events`.

Each row's `event_json` is one transcript record (the same JSON as a JSONL line); large
rows may be zstd-compressed. `zstandard` is used when it is installed; a compressed row
without it is a clear error rather than a silent gap. Rows are grouped into sessions by
a session column when the table has one, else by `{"type": "session"}` headers.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from .model import Session, TraceFormatError, UnrecognizedTrace
from .openclaw import load_records

FMT = "openclaw_sqlite"
TABLE = "transcript_events"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SESSION_COLUMNS = ("session_id", "sessionId", "session_key", "sessionKey", "session")
_ORDER_COLUMNS = ("seq", "sequence", "idx", "position", "id", "created_at", "timestamp")


def _decompress(path: Path, rowid: int, blob: bytes) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise TraceFormatError(
            path, f"row {rowid} of {TABLE} is zstd-compressed; install the 'zstandard' package to read it"
        ) from None
    try:
        return zstandard.ZstdDecompressor().decompress(blob, max_output_size=1 << 30)
    except zstandard.ZstdError as exc:
        raise TraceFormatError(path, f"row {rowid} of {TABLE}: bad zstd data ({exc})") from None


def _decode(path: Path, rowid: int, value: Any) -> dict[str, Any]:
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(value, bytes):
        if value.startswith(ZSTD_MAGIC):
            value = _decompress(path, rowid, value)
        value = value.decode("utf-8", errors="replace")
    try:
        rec = json.loads(value)
    except (TypeError, ValueError) as exc:
        raise TraceFormatError(path, f"row {rowid} of {TABLE}: event_json is not JSON ({exc})") from None
    if not isinstance(rec, dict):
        raise TraceFormatError(path, f"row {rowid} of {TABLE}: event_json is not an object")
    return rec


def load(path: Path) -> list[Session]:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise TraceFormatError(path, f"cannot open SQLite database: {exc}") from None
    try:
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({TABLE})")]
        if "event_json" not in cols:
            raise UnrecognizedTrace(path, f"SQLite database without {TABLE}.event_json")
        session_col = next((c for c in _SESSION_COLUMNS if c in cols), None)
        order = next((c for c in _ORDER_COLUMNS if c in cols), "rowid")
        select = f"SELECT rowid, event_json{', ' + session_col if session_col else ''} FROM {TABLE}"
        rows = con.execute(f"{select} ORDER BY {order}, rowid").fetchall()
    except sqlite3.Error as exc:
        raise TraceFormatError(path, f"cannot read {TABLE}: {exc}") from None
    finally:
        con.close()

    groups: dict[str, list[dict[str, Any]]] = {}
    current = ""
    for row in rows:
        rec = _decode(path, row[0], row[1])
        if session_col:
            key = str(row[2])
        else:
            if rec.get("type") == "session" or not groups:
                current = str(rec.get("id") or len(groups))
            key = current
        groups.setdefault(key, []).append(rec)
    return [
        load_records(path, recs, fmt=FMT, default_id=f"{path.stem}/{key}") for key, recs in groups.items()
    ]
