"""The eviction plan of one session: what the rendered history drops, and the stubs
in its place.

It changes only when the lifecycle hands it finished estimator results (at a batch
boundary, in one pass): the registry applies them, `plan_eviction` plans, the segment
and window rules add tool bundles, the cost gate picks the cut (expecting only its
fewest calls once the agent is wrapping up, `segments.closing`), and an evicted task
that later words name is shown again. Between results it is constant, so consecutive
renders extend each other (I1). A history the caller rewrote is followed
(`follow_rewrite`). The schedule (when the estimator runs) is `lifecycle.py`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages.turns import Turn, TurnSegmenter
from ..registry import TaskRegistry
from ..store.journal import Sealed
from ..tokens import message_tokens
from .evict import (
    ArchiveMemo,
    EvictionPlan,
    Segment,
    assistant_index,
    content_ids,
    plan_eviction,
    plan_index,
    render,
)
from .gate import Decision, Rendering, best_cut, expected_remaining_calls, marker_tokens
from .plan_tokens import MessageTokens
from .segments import (
    BundleRecord,
    bundle_record,
    closing,
    evictable_bundles,
    keeps_its_call,
    last_uses,
    named_in_words,
    rule_of,
    window_bundles,
)
from .settings import LifecycleConfig
from .tail import tail_segments

log = logging.getLogger("tokenpilot")


Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RenderPlan:
    """What to show the model: drop these indices of the managed history and put
    `stubs[i]` (a tuple of messages, today always one) where index i was.
    `version` counts plan changes, i.e. prefix breaks caused by eviction."""

    drop: frozenset[int] = frozenset()
    stubs: Mapping[int, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    version: int = 0
    replace: Mapping[int, str] = field(default_factory=dict)
    """Index -> the marker an output cut in place shows instead of its content."""

    def apply(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        return render(messages, self.drop, self.stubs, self.replace)


@dataclass(slots=True)
class Result:
    """A finished estimator run's delta, waiting for the next view."""

    delta: dict[str, Any]
    upto: int  # turns [0, upto) were covered by the run
    keep_from: int  # messages from here on (the run's batch and later) stay


@dataclass(frozen=True, slots=True)
class Batch:
    """What the lifecycle hands the plan at a view: the finished results, the registry
    that judges them, and what the cost gate weighs."""

    results: Sequence[Result]
    registry: TaskRegistry
    calls: int  # calls so far: the gate expects a share of them to remain
    head_refill_tokens: int | None  # tokens ahead of the history an eviction re-sends too


class Planner:
    """The cumulative plan (segments evicted, indices dropped, stubs) and what changes it.
    Not locked: its lifecycle holds its lock around every call."""

    def __init__(
        self,
        config: LifecycleConfig,
        archive: Callable[[str], str],
        stats: dict[str, Any],
        segmenter: TurnSegmenter,
    ) -> None:
        self.config = config
        self.archive = archive
        self.stats = stats
        self.segmenter = segmenter
        self.segments: list[Segment] = []
        self.drop: set[int] = set()
        self.stubs: dict[int, tuple[dict[str, Any], ...]] = {}
        self.replace: dict[int, str] = {}
        # Turns the tail rules have looked at; None: none yet, so the first call's history
        # (a session joined midway, a restart without state) is left as it was cached.
        self.tail_mark: int | None = None
        self.version = 0
        self._bundles: dict[tuple[str, int, int], BundleRecord] = {}
        self._turn_tokens: dict[tuple[str, int, int], tuple[int, ...]] = {}  # per message of the turn
        self._tokens = MessageTokens()  # the cost gate's counts, kept from one batch to the next
        self._stub_tokens = MessageTokens()  # the same for the stubs of the plan
        # the latest `_bundle_records` answer and its list of turns (made anew by each update)
        self._records: tuple[Sequence[Turn], list[BundleRecord]] | None = None
        self._uses: tuple[list[BundleRecord], list[int]] | None = None  # `_last_uses`, likewise
        self._exports: dict[int, tuple[Segment, Sealed]] = {}  # `segment_exports`, by segment
        self._memo = ArchiveMemo()  # archive texts of what the gate deferred: weighed again next batch

    def segment_exports(self) -> list[dict[str, Any]]:
        """Each segment's `to_dict`, made once per segment (segments never change once
        planned) and sealed, so each save's journal reuses what it cut it into. Keeps only
        the current segments' exports."""
        kept = {}
        for seg in self.segments:
            hit = self._exports.get(id(seg))
            kept[id(seg)] = hit if hit is not None and hit[0] is seg else (seg, Sealed(seg.to_dict()))
        self._exports = kept
        return [kept[id(seg)][1] for seg in self.segments]

    def render_plan(self) -> RenderPlan:
        return RenderPlan(frozenset(self.drop), dict(self.stubs), self.version, dict(self.replace))

    def tail(self, messages: Sequence[Message], joins: bool = False) -> None:
        """Apply the tail rules (`tail.py`) to the turns the agent has answered since the
        last look, each looked at once: at any call, since the cut re-sends only the
        request's tail. A plan change like any eviction (a new version, a counted break),
        unless it `joins` one this call already made (one pass, one break)."""
        rules = self.config.tail
        turns = self.segmenter.update(messages)
        if rules is None or not rules.enabled:
            return
        mark = len(turns) if self.tail_mark is None else self.tail_mark
        looked, self.tail_mark = min(mark, len(turns)), max(len(turns) - 1, 0)
        if looked >= len(turns) - 1:
            return
        records = self._bundle_records(messages, turns) if rules.shrink else []
        mentioned = {ref for r in records for ref in r.uses}
        new = tail_segments(messages, turns, looked, rules, mentioned, self.archive, self.covered)
        if not new:
            return
        counts = self._tokens.counts(messages)
        self.segments.extend(new)
        self._index()
        if not joins:
            self.version += 1
            self.stats["prefix_breaks"] += 1
        gone = [
            k
            for s in new
            for k in (range(s.start, s.end) if not s.cuts else (s.start + o for o, _ in s.cuts))
        ]
        self.stats["tail_cuts"] += sum(len(s.cuts) or s.end - s.start - 1 for s in new)  # outputs
        self.stats["tokens_evicted"] += sum(counts[k] for k in gone)
        self.stats["bundle_reasons"]["tail"] = self.stats["bundle_reasons"].get("tail", 0) + len(new)

    def _index(self) -> None:
        """Drop, stubs and cuts from the segments (`evict.plan_index`)."""
        self.drop, self.stubs, self.replace = plan_index(self.segments)

    @property
    def covered(self) -> set[int]:
        """Every index a segment holds, dropped or cut in place: never planned again."""
        return {i for s in self.segments for i in range(s.start, s.end)}

    def load(self, segments: list[Segment], version: int) -> None:
        """Take a saved plan: its segments and their version."""
        self.segments = segments
        self._index()
        self.version = version

    def follow_rewrite(self, messages: Sequence[Message]) -> None:
        """Follow a history the caller rewrote (its own compaction, a condenser, elided
        observations): the new history is the new base. A segment whose turns are all
        still there, in a row, stays evicted at their new place (turn ids are content
        digests); one whose turns the caller removed or changed is forgotten (there is
        nothing left to evict). Nothing evicted is shown again; logged at INFO only."""
        turns = self.segmenter.update(messages)
        starts = self._starts(messages, turns)
        if all(self._in_place(seg, starts) for seg in self.segments):
            return
        index = {t.turn_id: k for k, t in enumerate(turns)}
        kept: list[Segment] = []
        taken: set[int] = set()
        for seg in self.segments:
            moved = self._relocate(seg, messages, turns, index)
            if moved is None or taken.intersection(range(moved.start, moved.end)):
                continue
            taken.update(range(moved.start, moved.end))
            kept.append(moved)
        gone = len(self.segments) - len(kept)
        self.tail_mark = None  # the turns moved: the tail looks at what comes next
        self.stats["history_rewrites"] += 1
        self.stats["segments_remapped"] += len(kept)
        self.stats["segments_invalidated"] += gone
        log.info(
            "tokenpilot: history rewritten by the caller; %d evicted segment(s) kept at their new place, "
            "%d gone with the rewrite",
            len(kept),
            gone,
        )
        self.segments = kept
        self._index()
        self.version += 1

    @staticmethod
    def _starts(messages: Sequence[Message], turns: Sequence[Turn]) -> dict[int, Turn]:
        """Each turn by where a segment of it may start: its first or its assistant message."""
        starts: dict[int, Turn] = {}
        for t in turns:
            starts[t.start] = t
            starts.setdefault(assistant_index(messages, t), t)
        return starts

    @staticmethod
    def _in_place(seg: Segment, starts: Mapping[int, Turn]) -> bool:
        at = seg.start
        for tid in seg.turn_ids:
            turn = starts.get(at)
            if turn is None or turn.turn_id != tid:
                return False
            at = turn.end
        return at == seg.end

    @staticmethod
    def _relocate(
        seg: Segment, messages: Sequence[Message], turns: Sequence[Turn], index: Mapping[str, int]
    ) -> Segment | None:
        """The segment at its turns' place in the rewritten history, or None when they are
        not all there in a row (complete: a cut inside a tool group would orphan calls)."""
        first = index.get(seg.turn_ids[0]) if seg.turn_ids else None
        if first is None or first + len(seg.turn_ids) > len(turns):
            return None
        run = turns[first : first + len(seg.turn_ids)]
        if [t.turn_id for t in run] != list(seg.turn_ids) or not all(t.complete for t in run):
            return None
        # A bundle retired by a rule went without its opener (the user's words stay).
        start = assistant_index(messages, run[0]) if seg.reasons else run[0].start
        end = run[-1].end
        if start == seg.start and end == seg.end:
            return seg
        return Segment(
            start, end, seg.turn_ids, seg.task_ids, seg.artifact_id, seg.stub, seg.reasons, seg.cuts
        )

    def apply(self, messages: Sequence[Message], batch: Batch) -> None:
        """Apply finished estimator results in one pass (see the module's docstring)."""
        version = self.version
        revived = self._apply_results(messages, batch)
        if revived is not None and self.version == version:  # shown again, nothing new evicted
            self.version += 1
            self.stats["prefix_breaks"] += 1

    def _apply_results(self, messages: Sequence[Message], batch: Batch) -> int | None:
        """Apply the finished estimator results; where segments were shown again, if any."""
        keep_from = len(messages)
        for res in batch.results:
            report = batch.registry.apply(res.delta)
            self.stats["parts_rejected"] += len(report.rejected)
            if report.dropped:
                self.stats["deltas_rejected"] += 1
            else:
                self.stats["deltas_applied"] += 1
            keep_from = min(res.keep_from, len(messages))
        turns = self.segmenter.update(messages)
        named = self._named_turns(messages, turns)
        revived = self._revive(named, turns)
        bundles = self._retired_bundles(messages, turns)
        window = self._window_bundles(messages, turns)
        if window:  # one pass with the rules; a rule's reason is the more precise
            bundles = {**window, **bundles}
        records = self._bundle_records(messages, turns) if bundles else []
        rules = self.config.segments
        keep_calls = {
            t for t, why in bundles.items() if rules is not None and keeps_its_call(records[t], why, rules)
        }
        covered = self.covered

        def plan_with(archive: Callable[[str], str], from_index: int = 0) -> EvictionPlan:
            return plan_eviction(
                messages,
                turns,
                batch.registry,
                stub=self.config.stub,
                archive=archive,
                keep_from=keep_from,
                already_evicted=covered,
                hidden=self.drop,
                bundles=bundles,
                from_index=from_index,
                protected=named,
                keep_calls=keep_calls,
                memo=self._memo,
            )

        # Plan with content ids first; archive for real only what the gate lets through.
        texts: dict[str, str] = {}
        plan = plan_with(content_ids(texts)) if self.config.cost_gate else self._archived(plan_with)
        if not plan.segments:
            return revived
        if self.config.cost_gate:
            wrapping_up = closing(self._bundle_records(messages, turns))
            decision, cut = self._best_cut(messages, plan, batch, wrapping_up)
            remember_decision(self.stats["gate_decisions"], decision.to_dict())
            if not decision.evict and revived is None:
                log.info("tokenpilot: eviction deferred by the cost gate: %s", decision.reason)
                return revived
            starts = {t.turn_id: t.start for t in turns}

            def turn_start(seg: Segment) -> int:
                return min(starts[tid] for tid in seg.turn_ids)

            if decision.evict:
                # The segments from the cut on, as weighed. Planning from an index counts
                # whole turns, and a rule bundle's segment starts at its assistant message,
                # after its turn's user words: the plan is made from that turn's start.
                start = turn_start(
                    min((seg for seg in plan.segments if seg.start >= cut), key=lambda seg: seg.start)
                )
            else:
                # A revival breaks the cache from its segment on anyway: what the gate
                # deferred after that point goes in the same pass, for free.
                start = revived or 0
            # From the plan's first turn on, the plan is the one the gate weighed: only its
            # archives are left to write.
            if start > min(turn_start(seg) for seg in plan.segments) or not self._write(texts):
                plan = self._archived(plan_with, start)
            if not plan.segments:
                return revived
        counts = self._tokens.counts(messages)
        gross = sum(counts[i] for i in plan.evicted | set(plan.replaced))
        self.segments.extend(plan.segments)
        self._index()
        self.version += 1
        self.stats["evictions"] += len(plan.segments)
        self.stats["turns_evicted"] += sum(len(s.turn_ids) for s in plan.segments)
        self.stats["prefix_breaks"] += 1
        self.stats["tokens_evicted"] += gross
        for seg in plan.segments:
            self.stats["bundles_evicted"] += len(seg.reasons)
            for reason in seg.reasons:
                rule = rule_of(reason)
                self.stats["bundle_reasons"][rule] = self.stats["bundle_reasons"].get(rule, 0) + 1
        return revived

    def _archived(self, plan_with: Callable[..., EvictionPlan], from_index: int = 0) -> EvictionPlan:
        """`plan_with(archive, from_index)` with its segments archived. Where the archive
        takes many at once (`SessionArchive.many`), the plan is made with content ids and
        all its archives written in one store write, before anything refers to them; when
        the store answers other ids, it is planned again one archive at a time."""
        if getattr(self.archive, "many", None) is None:
            return plan_with(self.archive, from_index)
        texts: dict[str, str] = {}
        plan = plan_with(content_ids(texts), from_index)
        return plan if self._write(texts) else plan_with(self.archive, from_index)

    def _write(self, texts: dict[str, str]) -> bool:
        """Archive `texts` (content id -> text) in one write; False when the archive takes
        them one at a time or answers other ids (then the plan is made with it instead)."""
        many = getattr(self.archive, "many", None)
        return many is not None and (not texts or list(many(list(texts.values()))) == list(texts))

    def _named_turns(self, messages: Sequence[Message], turns: Sequence[Turn]) -> set[int]:
        """Turn indices whose file later words name (`segments.named_in_words`); they stay."""
        return named_in_words(self._bundle_records(messages, turns))

    def _revive(self, named: set[int], turns: Sequence[Turn]) -> int | None:
        """Show again the evicted tasks holding a turn later words name (I6): the file's
        content was the task's material and the session has come back to it. At a batch
        boundary, in the same pass as this batch's evictions (one cache break). Bundles a
        segment rule retired judge later use themselves (the window's `keep_used_turns`,
        the stale rule's last use): in a coding session the agent names most files it
        read, and keeping each one until it is read again costs more than it saves."""
        ids = {turns[t].turn_id for t in named if t < len(turns)}
        back = [seg for seg in self.segments if not seg.reasons and ids.intersection(seg.turn_ids)]
        if not back:
            return None
        self.segments = [seg for seg in self.segments if seg not in back]
        self._index()
        self.stats["segments_revived"] += len(back)
        log.info("tokenpilot: %d evicted segment(s) shown again: later words name their files", len(back))
        return min(seg.start for seg in back)

    def _retired_bundles(self, messages: Sequence[Message], turns: Sequence[Turn]) -> dict[int, str]:
        """Turn index -> reason, for tool bundles a segment rule retires now."""
        rules = self.config.segments
        if rules is None or not rules.enabled:
            return {}
        records = self._bundle_records(messages, turns)
        return evictable_bundles(records, rules, last_use=self._last_uses(records))

    def _bundle_records(self, messages: Sequence[Message], turns: Sequence[Turn]) -> list[BundleRecord]:
        """Each turn as the segment rules see it (memoised per turn, the list per list of turns)."""
        last = self._records
        if last is not None and last[0] is turns and len(last[1]) == len(turns):
            return last[1]
        records = []
        for t in turns:
            key = (t.turn_id, t.start, t.end)
            rec = self._bundles.get(key)
            if rec is None:
                rec = self._bundles[key] = bundle_record(messages, t)
            records.append(rec)
        self._records = (turns, records)
        return records

    def _last_uses(self, records: list[BundleRecord]) -> list[int]:
        """`last_uses` of a list of records, once per list (the window and segment rules ask)."""
        last = self._uses
        if last is None or last[0] is not records:
            last = self._uses = (records, last_uses(records))
        return last[1]

    def _window_bundles(self, messages: Sequence[Message], turns: Sequence[Turn]) -> dict[int, str]:
        """Turn index -> reason, for the turns the window rule evicts now."""
        rule = self.config.window
        if rule is None or len(turns) <= rule.keep_calls:
            return {}
        rendered = self._rendered_tokens(messages, turns)
        if rendered <= rule.trigger_tokens:
            return {}
        calls = [r.has_calls for r in self._bundle_records(messages, turns)]  # text actions too
        used = rule.keep_used_turns is not None
        last_use = self._last_uses(self._bundle_records(messages, turns)) if used else None
        return window_bundles(calls, rule, rendered, last_use)

    def _rendered_tokens(self, messages: Sequence[Message], turns: Sequence[Turn]) -> int:
        """Tokens of the history as the current plan renders it (memoised per turn)."""
        first = turns[0].start if turns else len(messages)
        gone = self.drop | set(self.replace)  # a cut output counts as its marker
        total = sum(message_tokens(messages[k]) for k in range(first) if k not in gone)
        for t in turns:
            key = (t.turn_id, t.start, t.end)
            counts = self._turn_tokens.get(key)
            if counts is None:
                counts = tuple(message_tokens(messages[k]) for k in range(t.start, t.end))
                if t.complete:
                    self._turn_tokens[key] = counts
            total += sum(n for k, n in zip(range(t.start, t.end), counts) if k not in gone)
        total += sum(marker_tokens(text) for text in self.replace.values())
        return total + sum(self._stub_tokens.per_key(self.stubs).values())

    def _best_cut(
        self, messages: Sequence[Message], plan: EvictionPlan, batch: Batch, wrapping_up: bool = False
    ) -> tuple[Decision, int]:
        """The cost gate over every cut of the plan (`gate.best_cut`, where the price of an
        eviction is said). `wrapping_up` (`segments.closing`): the agent exported its change
        or submitted, so these are its last calls; an eviction must pay back within the
        fewest calls the gate ever expects (the last eviction of a finished run re-sent the
        history for a call or two and never paid back)."""
        calls = expected_remaining_calls(
            batch.calls, self.config.expected_calls_min, self.config.expected_calls_ratio
        )
        if wrapping_up:
            calls = self.config.expected_calls_min
        stubs = self._stub_tokens.per_key(self.stubs)
        now = Rendering(self._tokens.counts(messages), self.drop, self.stubs, self.replace, stubs)
        cfg = self.config
        return best_cut(
            plan,
            now,
            calls,
            batch.head_refill_tokens,
            prices=cfg.prices,
            profile=cfg.cache_profile,
            min_tokens=cfg.min_evict_tokens,
            recall_risk=cfg.recall_risk,
        )


GATE_DECISIONS_KEPT = 32
"""The cost gate's latest decisions kept in the stats (and the saved state): enough to
explain the recent evictions, bounded so a long session's state does not grow with it."""


def remember_decision(decisions: list[dict[str, Any]], decision: dict[str, Any]) -> None:
    # Sealed: never changed once made, so each save's journal reuses what it cut it into.
    decisions.append(Sealed(decision))
    del decisions[:-GATE_DECISIONS_KEPT]
