"""A session's state as JSON and back: `TokenPilot.export_session` / `import_session`
(checkpoints, restarts, a proxy's state store shared by replicas). An imported session
renders the same bytes as the one exported."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..ingest.gate import IngestState, ToolCallInfo
from ..ingest.stabilize import Stabilized
from ..store.journal import Sealed
from .fingerprint import digest_from_json, digest_to_json
from .session import Entry, Session


def session_to_dict(s: Session) -> dict[str, Any]:
    """JSON-safe state of a session, for checkpoints and restarts."""
    with s.lock:
        return {
            "id": s.id,
            "entries": [e.exported or entry_to_dict(e) for e in s.entries],
            "state": s.state.to_dict(),
            "system": {
                "raw": [digest_to_json(x) for x in s.system.raw],
                "stable": [[x.text, x.session_values, x.call_values] for x in s.system.stable],
                "current": [[x.text, x.session_values, x.call_values] for x in s.system.current],
                "rendered": s.system.rendered,
                "tokens": s.system.tokens,
                "verbatim": s.system.verbatim,
                "version": s.system.version,
            },
            "tools": tools_to_list(s),
            "tools_tokens": s.tools_tokens,
            "tools_version": s.tools_version,
            # What the last call rendered, so the first call after a restart is checked too.
            "last_keys": s.last_keys,
            "plan_version": s.plan_version,
            "last_plan_version": s.last_plan_version,
            "last_whole": s.last_whole,
            "calls_prepared": s.calls_prepared,
            "recallable": s.recallable,
            "elisions": s.elisions.to_dict(),
            "updates": [[pos, m] for pos, m in s.updates],
            "prefix_breaks": s.prefix_breaks,
            "lifecycle": s.lifecycle.to_dict()
            if s.lifecycle is not None and hasattr(s.lifecycle, "to_dict")
            else None,
        }


def entry_to_dict(e: Entry) -> Sealed:
    """An entry's export, kept on it: its fields do not change once it is ingested (a
    rewrite or a retry replaces the entry), so every later save hands the journal the same
    sealed object, whose text it has already."""
    e.exported = Sealed(
        raw_hash=e.raw_hash,
        ids=list(e.ids) if isinstance(e.ids, tuple) else e.ids,
        frozen=e.frozen,
        raw_tokens=e.raw_tokens,
        tokens=e.tokens,
        artifact_id=e.artifact_id,
        effect=list(e.effect) if e.effect else None,
        call_infos=[[cid, i.name, i.arguments] for cid, i in e.call_infos],
        unstored=e.unstored is not None,
    )
    return e.exported


def tools_to_list(s: Session) -> list[Any]:
    """The session's tools, each a sealed copy made once: the merge keeps an unchanged
    tool's dict from call to call (and never changes it), so a save hands the journal the
    objects whose text it has (a 13-tool OpenClaw list was 60% of a short session's save)."""
    before = s.exported_tools
    now: dict[int, tuple[Any, Any]] = {}
    out = []
    for t in s.tools:
        hit = before.get(id(t))
        sealed = hit[1] if hit is not None and hit[0] is t else Sealed(t) if type(t) is dict else t
        now[id(t)] = (t, sealed)
        out.append(sealed)
    s.exported_tools = now
    return out


def load_session(s: Session, data: Mapping[str, Any]) -> None:
    """Restore into `s` (the session named by `data["id"]`) a state `session_to_dict` made,
    possibly in another process."""
    with s.lock:
        held, s.entries = s.entries, []
        s.shown = None
        for i, d in enumerate(data["entries"]):
            mine = held[i] if i < len(held) else None
            if mine is not None and mine.exported is not None and mine.exported == d:
                # The entry this process already holds, as the state has it: it stays whole,
                # so what was remembered of it (its export, whose text the journal has; its
                # message's object, by which token counts and archive texts are remembered;
                # the raw fields a call is matched by, without hashing it again) still holds
                # when replicas take turns on a session and each loads the other's state.
                s.entries.append(mine)
                s.calls.update(mine.call_infos)  # the infos its export was made from
                continue
            infos = tuple((cid, ToolCallInfo(name, args)) for cid, name, args in d.get("call_infos", []))
            ids = tuple(d["ids"]) if isinstance(d["ids"], list) else d["ids"]
            frozen = d["frozen"]
            if mine is not None and mine.frozen == frozen:
                frozen = mine.frozen  # the message's object stays, as above
            entry = Entry(
                # the role is the frozen form's (ingestion keeps it): what follows a
                # message (an observation after an action, an elision) is judged by it
                frozen.get("role") if isinstance(frozen, Mapping) else None,
                None,
                None,
                None,
                d["raw_hash"],
                ids,
                frozen,
                d["raw_tokens"],
                d["tokens"],
                d.get("artifact_id"),
                tuple(d["effect"]) if d.get("effect") else None,
                infos,
                live=False,
                unstored="" if d.get("unstored") else None,
            )
            s.entries.append(entry)
            for cid, info in infos:
                s.calls[cid] = info
        s.state = IngestState.from_dict(data.get("state", {}))
        sysd = data.get("system")
        if sysd:

            def stab(rows: list[Any]) -> tuple[Stabilized, ...]:
                return tuple(
                    Stabilized(t, tuple(map(tuple, sv)), tuple(map(tuple, cv))) for t, sv, cv in rows
                )

            s.system.raw = tuple(digest_from_json(x) for x in sysd["raw"])
            s.system.stable = stab(sysd["stable"])
            s.system.current = stab(sysd["current"])
            s.system.rendered = list(sysd["rendered"])
            s.system.tokens = int(sysd["tokens"])
            s.system.verbatim = bool(sysd.get("verbatim", False))
            s.system.version = int(sysd.get("version", 1))
        s.tools = list(data.get("tools", []))
        s.tools_tokens = int(data.get("tools_tokens", 0))
        s.tools_version = int(data.get("tools_version", 1 if s.tools else 0))
        s.last_keys = list(data.get("last_keys", []))
        s.plan_version = int(data.get("plan_version", 0))
        s.last_plan_version = int(data.get("last_plan_version", 0))
        s.last_whole = bool(data.get("last_whole", False))
        s.calls_prepared = int(data.get("calls_prepared", 0))
        s.recallable = bool(data.get("recallable", False))
        s.elisions.load_dict(data.get("elisions") or {})
        s.updates = [(int(pos), m) for pos, m in data.get("updates", [])]
        s.prefix_breaks = int(data.get("prefix_breaks", 0))
        if (
            data.get("lifecycle") is not None
            and s.lifecycle is not None
            and hasattr(s.lifecycle, "load_dict")
        ):
            s.lifecycle.load_dict(data["lifecycle"])
