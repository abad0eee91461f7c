"""What each prepared call adds to its session's stats: sizes, savings and prefix breaks.

A break is diagnosed against the session's previous rendering (its stable messages and
tool names), logged, and kept for `/tokenpilot/stats`, the dashboard and `doctor`.
"""

from __future__ import annotations

import logging
from typing import Any

from tokenpilot import Prepared
from tokenpilot.messages.compaction import ENDED_CAUSE, SHOWN_CAUSE
from tokenpilot.model_prices import sendable_saving
from tokenpilot_proxy import timeline, wire
from tokenpilot_proxy.sessions import SessionStats

log = logging.getLogger("tokenpilot.openclaw")


class PreparedLog:
    """The previous rendering of each session, and the notes each new one makes."""

    def __init__(self, last_stable: dict[str, list[Any]]) -> None:
        self.last_stable = last_stable  # shared with `SessionKeeper`, which drops a re-read session's
        self.last_tools: dict[str, list[str]] = {}  # tool names of the last call: what a break changed
        self.store_failing: set[str] = set()  # sessions with outputs the store refused (logged once)

    def note(self, sid: str, prepared: Prepared, stats: SessionStats, model: Any = None) -> None:
        st = prepared.stats
        stats.raw_tokens, stats.sent_tokens = st.raw_tokens, st.tokens
        window_of = model if isinstance(model, str) and model.strip() else stats.model  # the first call's too
        stats.tokens_saved += sendable_saving(st.saved_tokens, st.tokens, window_of)  # not past the window
        stats.prefix_breaks = max(stats.prefix_breaks, st.prefix_breaks)
        self._note_store(sid, st.unstored, st.warnings)
        prev = self.last_stable.get(sid)
        self.last_stable[sid] = prepared.stable_messages
        prev_tools = self.last_tools.get(sid)
        self.last_tools[sid] = timeline.tool_names(prepared.tools)
        timeline.note_prepared(stats, prepared, prev, prev_tools)
        if st.prefix_break is None:
            return
        stats.last_prefix_break = st.prefix_break
        stats.last_prefix_break_detail = wire.first_difference(
            prev, prepared.stable_messages, at=st.prefix_break_at
        )
        if st.prefix_break == "eviction":
            log.info("tokenpilot: session %s: prefix re-rendered by an eviction", sid)
            return
        if st.prefix_break in (SHOWN_CAUSE, ENDED_CAUSE):
            log.info("tokenpilot: session %s: prefix re-rendered (%s)", sid, st.prefix_break)
            return
        log.warning(
            "tokenpilot: session %s: cached prefix broken (%s); %s",
            sid,
            st.prefix_break,
            stats.last_prefix_break_detail,
        )

    def _note_store(self, sid: str, unstored: int, warnings: tuple[str, ...]) -> None:
        """A full disk is said once per session (the request still goes, unreduced), and
        once more when the session's outputs are stored again; not once per message."""
        if unstored and sid not in self.store_failing:
            self.store_failing.add(sid)
            why = next((w for w in warnings if w.startswith("artifact store write failed")), "")
            log.error("tokenpilot: session %s: %s", sid, why or f"{unstored} message(s) not stored")
        elif not unstored and sid in self.store_failing:
            self.store_failing.discard(sid)
            log.info(
                "tokenpilot: session %s: the artifact store works again; outputs reduced and stored", sid
            )
