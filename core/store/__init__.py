"""Where originals and per-session state live, behind one interface (`protocol`): the
embedded backend (`artifacts`: diskcache originals; `disk`, `state_files`, `journal`: session
state as an append-only journal, cut where `journal_blocks` says and remembered between
saves by `journal_memo`), the shared one (`redis` and its `redis_*` parts, with
`breaker` for a Redis that stalls), locks (`file_lock`, `redis_lock`, `reentrant_lock`), the
factory from a name or URL (`open`), an eviction's archive (`archive`) and the pattern
search of a recall (`search`).

Imports only the foundation.
"""

from __future__ import annotations

from .._room import front_door

OFFERS = {
    "Store": "protocol",
    "Artifacts": "protocol",
    "StateConflict": "protocol",
    "LockBusy": "protocol",
    "StoreUnanswered": "protocol",
    "redact_store_url": "protocol",
    "ArtifactStore": "artifacts",
    "RecallResult": "artifacts",
    "default_store_dir": "artifacts",
    "DiskStore": "disk",
    "StateFiles": "state_files",
    "SessionArchive": "archive",
    "open_artifacts": "open",
    "open_redis": "open",
    "is_store_url": "open",
}
__all__ = sorted(OFFERS)
__getattr__ = front_door(__name__, OFFERS, old_face="protocol")
