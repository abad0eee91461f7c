"""The proxy's store, read from another process: which session holds an original, the
recall itself, and what a session keeps (for the listing).

The MCP server runs beside the client, not inside the proxy, and its tool call carries
only an artifact id: no session. Ids are content hashes, so whichever session holds an
id holds the same bytes; the reader looks in the pinned session when it has one, else in
the sessions the store lists, the latest written first. It only reads: originals, the
session index and the saved session state (for each original's tool and message).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenpilot.config import Config
from tokenpilot.recall import RecallAnswer, recall_answer
from tokenpilot.store.artifacts import ArtifactStore, RecallResult, default_store_dir
from tokenpilot.store.open import is_store_url, open_redis
from tokenpilot.store.state_files import StateFiles, default_state_dir

_REMEMBERED = 4096  # artifact id -> session, the most recent lookups
EVICTED = "(evicted turns)"


@dataclass(frozen=True, slots=True)
class Kept:
    """One original a session keeps, as the listing shows it."""

    artifact_id: str
    tool: str  # the tool whose output it is; EVICTED for archived turns; "" when no state says
    chars: int
    lines: int
    message: int | None  # its place in the session's history (1-based), when the state says


class StoreReader:
    """Reads the store a proxy writes: `store_dir` and `state_dir` (the defaults of
    `tokenpilot serve`), or a `redis://` URL for both. `session`: look only there."""

    def __init__(
        self,
        store: str | Path | None = None,
        state_dir: str | Path | None = None,
        *,
        session: str | None = None,
        max_chars: int | None = None,
    ) -> None:
        spec = default_store_dir() if store is None else store
        if is_store_url(spec):
            redis = open_redis(str(spec))
            self.artifacts: Any = redis
            self._load_state: Callable[[str], Mapping[str, Any] | None] = lambda sid: (
                redis.load_state(sid) or (0, None)
            )[1]
        else:
            self.artifacts = ArtifactStore(Path(spec).expanduser())
            files = StateFiles(Path(state_dir or default_state_dir()).expanduser())
            self._load_state = files.load
        self.session = session
        self.max_chars = Config().hard_limit_chars if max_chars is None else max_chars
        self._where: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    # -- which session ---------------------------------------------------------------
    def sessions(self) -> list[tuple[str, float]]:
        """(session id, last write) of the store's sessions, the latest first."""
        listed = self.artifacts.sessions()
        return [s for s in listed if s[0] == self.session] if self.session is not None else listed

    def session_of(self, artifact_id: str) -> str | None:
        """The session holding `artifact_id` (the pinned one, else the latest that has it)."""
        aid = artifact_id.strip()
        if self.session is not None:
            return self.session if (self.session, aid) in self.artifacts else None
        with self._lock:
            known = self._where.get(aid)
        if known is not None and (known, aid) in self.artifacts:
            return known
        for sid, _ in self.artifacts.sessions():
            if (sid, aid) in self.artifacts:
                with self._lock:
                    self._where[aid] = sid
                    self._where.move_to_end(aid)
                    while len(self._where) > _REMEMBERED:
                        self._where.popitem(last=False)
                return sid
        return None

    # -- the tool ---------------------------------------------------------------------
    def recall(self, arguments: str | bytes | Mapping[str, Any]) -> RecallAnswer:
        """What `recall_artifact` answers for these raw arguments: the same text as the
        proxy's own tool (whole, by range, by pattern; the same limits and messages)."""
        return recall_answer(arguments, self._recall, max_chars=self.max_chars)

    def _recall(self, aid: str, start: int | None, end: int | None, pattern: str | None) -> RecallResult:
        sid = self.session_of(aid)
        # an id no session holds: the store's own "no artifact" answer
        return self.artifacts.recall(sid if sid is not None else "", aid, start, end, pattern)

    # -- the listing ------------------------------------------------------------------
    def kept(self, session_id: str) -> list[Kept]:
        """What `session_id` keeps, in the order it entered the history (then by id)."""
        saved = self._load_state(session_id) or {}
        state = saved.get("session") or {}  # the proxy saves {"session": export, "stats": ...}
        places: dict[str, tuple[int, str]] = {}
        for i, entry in enumerate(state.get("entries") or []):
            if isinstance(entry, Mapping) and isinstance(entry.get("artifact_id"), str):
                effect = entry.get("effect") or []
                tool = str(effect[1]) if len(effect) > 1 else ""
                places.setdefault(entry["artifact_id"], (i + 1, tool))
        sources = (state.get("state") or {}).get("artifact_sources") or {}
        rows = []
        for aid in self.artifacts.artifact_ids(session_id):
            text = self.artifacts.get(session_id, aid)
            message, tool = places.get(aid, (None, ""))
            if not tool and isinstance(sources.get(aid), str):
                tool = sources[aid].split(":", 1)[0]
            if not tool and state:  # no tool output of the history: turns an eviction archived
                tool = EVICTED
            rows.append(Kept(aid, tool, len(text), len(text.splitlines()), message))
        rows.sort(key=lambda k: (k.message is None, k.message or 0, k.artifact_id))
        return rows

    def close(self) -> None:
        self.artifacts.close()
