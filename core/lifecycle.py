"""Lifecycle-aware eviction, scheduled: the object the facade talks to.

The facade calls `observe(history)` on every render with the whole managed
history, and `view(history)` to learn what to drop and which stubs to insert.

- Every `batch_turns` completed turns, `observe` starts the estimator on the turns
  it has not seen: inline (deterministic replays) or on a background thread (one
  run at a time; `observe` never waits for it).
- A finished estimator result is applied at the start of the next `view`: the
  registry validates it, `plan_eviction` plans, the cost gate decides, and the
  new segments join the plan in one pass. The batch that triggered the run, every
  later turn and the last turn stay. Between results the plan is constant, so
  consecutive renders extend each other byte for byte (invariant I1) and the
  cache breaks only at batch boundaries (I6).
- The cost gate (`cost_gate=True`) defers an eviction that would cost more in
  re-prefill than it saves (`evict.should_evict`); expected remaining calls are
  a fifth of the calls so far (`expected_calls_ratio`, at least `expected_calls_min`). A deferred eviction is
  reconsidered when the next estimator result is applied.
- The plan is cumulative: an evicted segment stays evicted, even if its task is
  later resumed, with one exception (I6): an evicted task holding the read of a
  file that later user or assistant words name (`segments.named_in_words`) is
  shown again at the next batch boundary, in that batch's single pass. The
  session came back to the file; a stub would cost a recall on every mention.
- A history the caller rewrote (its compaction, a condenser) is the new base:
  segments whose turns are still there stay evicted at their new place, the rest
  are forgotten; nothing is shown again (`_check_segments`).
- A failing estimator changes nothing; its turns are offered again with the next
  batch (not sooner, so a broken endpoint is not called on every turn).
- One truth for a fleet: everything the schedule and the gate decide from (the calls
  so far, the batch marks, the cut point of each result, results not applied yet and
  the claimed job) is in `to_dict`, so any process that loads the state and serves the
  next call decides exactly as the one that saved it would. A background run is a
  job claimed in that state (`_Job`: its owner and a lease), so replicas sharing the
  state skip a batch one of them already runs; its result is handed to `deliver`, which
  the host runs under the session's lock on the newest state (and writes back), never
  applied from the worker thread on its own. A job whose owner is gone (its lease is
  over, or its run ended without a delivery) is released and its turns offered again.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Literal

from ._canonical import artifact_id_for
from .errors import ConfigError
from .estimator import Estimator, OfflineEstimator, TurnRecord, build_view, turn_record
from .evict import (
    EXPECTED_CALLS_RATIO,
    EvictionPlan,
    Prices,
    Segment,
    assistant_index,
    expected_remaining_calls,
    plan_eviction,
    render,
    should_evict,
)
from .registry import TaskRegistry
from .segments import (
    BundleRecord,
    SegmentRules,
    WindowRule,
    bundle_record,
    evictable_bundles,
    last_uses,
    named_in_words,
    rule_of,
    window_bundles,
)
from .tokens import message_tokens
from .turns import Turn, TurnSegmenter

log = logging.getLogger("tokenpilot")

Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class LifecycleConfig:
    """Eviction settings. `batch_turns=None` turns eviction off entirely.

    `schedule`: "inline" runs the estimator inside `observe` (deterministic replays),
    "background" on a worker thread, "manual" leaves it to the host (`due`,
    `run_pending`), e.g. a LangGraph node beside the agent node.
    `expected_calls_min`: floor of the gate's expected remaining calls (which is
    otherwise `expected_calls_ratio` times the calls so far). `max_view_turns`: at most this many new
    turns go to one estimator run (older unseen ones stay unowned, hence kept).
    """

    batch_turns: int | None = 3
    stub: bool = True
    cost_gate: bool = True
    schedule: Literal["inline", "background", "manual"] = "background"
    prices: Prices = field(default_factory=Prices)
    expected_calls_min: int = 3
    expected_calls_ratio: float = EXPECTED_CALLS_RATIO
    min_evict_tokens: int = 5000
    """The gate never breaks the cache for this many evicted tokens or fewer."""
    max_view_turns: int = 24
    segments: SegmentRules | None = field(default_factory=SegmentRules)
    """Segment-level rules (see `segments.py`): tool bundles inside a live task that
    may go. None: only whole tasks are evicted, as in the paper."""
    cache_profile: str = "openai"
    """Provider cache the gate prices a re-prefill for: a cache write costs the
    profile's multiple of an uncached token (Anthropic 1.25x, OpenAI 1x)."""
    window: WindowRule | None = field(default_factory=WindowRule)
    """The window rule (see `segments.WindowRule`): once the rendered history passes
    `trigger_tokens`, every tool bundle but the last `keep_calls` calls' goes in one cut,
    gated like the rest, and the next cut waits for the trigger again. None: off."""
    job_lease_s: float = 120.0
    """How long a background estimator job claimed by one process (a replica) keeps other
    processes sharing the session state from running that batch themselves. Past it, the
    owner is taken for dead and the batch's turns are offered again. Longer than an LLM
    estimator's call with its repair retry (2 x 30 s by default)."""

    def __post_init__(self) -> None:
        if self.batch_turns is not None and (
            not isinstance(self.batch_turns, int)
            or isinstance(self.batch_turns, bool)
            or self.batch_turns < 1
        ):
            raise ConfigError(f"batch_turns must be a positive integer or None, not {self.batch_turns!r}")
        if self.schedule not in ("inline", "background", "manual"):
            raise ConfigError(f"schedule must be 'inline' or 'background', not {self.schedule!r}")
        if not 0 < self.expected_calls_ratio <= 10:
            raise ConfigError("expected_calls_ratio must be in (0, 10]")
        if self.expected_calls_min < 1 or self.max_view_turns < 1:
            raise ConfigError("expected_calls_min and max_view_turns must be >= 1")
        if self.prices.miss < self.prices.hit or self.prices.hit < 0:
            raise ConfigError("prices need 0 <= hit <= miss")
        if not self.job_lease_s > 0:
            raise ConfigError("job_lease_s must be positive")

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_turns": self.batch_turns,
            "stub": self.stub,
            "cost_gate": self.cost_gate,
            "schedule": self.schedule,
            "prices": {
                "hit": self.prices.hit,
                "miss": self.prices.miss,
                "output": self.prices.output,
                "write": self.prices.write,
            },
            "expected_calls_min": self.expected_calls_min,
            "expected_calls_ratio": self.expected_calls_ratio,
            "min_evict_tokens": self.min_evict_tokens,
            "max_view_turns": self.max_view_turns,
            "segments": self.segments.to_dict() if self.segments is not None else None,
            "cache_profile": self.cache_profile,
            "window": self.window.to_dict() if self.window is not None else None,
            "job_lease_s": self.job_lease_s,
        }

    @classmethod
    def for_profile(cls, profile: str, **overrides: Any) -> LifecycleConfig:
        """Defaults for a provider's cache economics: the cost gate prices a re-prefill as
        the profile does (OpenAI: 1x, cached in 128-token steps; Anthropic: a cache write
        at 1.25x). The batch stays 3 turns on both: with the gate expecting a fifth of the
        calls so far to remain, B = 3 beat B = 5 on Anthropic too (Claude Code 0.847x vs
        0.857x, mini-swe-agent 0.873x vs 0.875x, the built-in workload 0.562x vs 0.682x);
        B = 5 won there only under the old, more eager gate."""
        return cls(**{"cache_profile": profile, **overrides})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LifecycleConfig:
        d = dict(d)
        if "prices" in d:
            d["prices"] = Prices(**d["prices"])
        if "segments" in d:
            d["segments"] = SegmentRules.from_dict(d["segments"]) if d["segments"] is not None else None
        if d.get("window") is not None:
            d["window"] = WindowRule.from_dict(d["window"])
        return cls(**d)


@dataclass(frozen=True, slots=True)
class RenderPlan:
    """What to show the model: drop these indices of the managed history and put
    `stubs[i]` (a tuple of messages, today always one) where index i was.
    `version` counts plan changes, i.e. prefix breaks caused by eviction."""

    drop: frozenset[int] = frozenset()
    stubs: Mapping[int, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    version: int = 0

    def apply(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        return render(messages, self.drop, self.stubs)


@dataclass(slots=True)
class _Result:
    delta: dict[str, Any]
    upto: int  # turns [0, upto) were covered by the run
    keep_from: int  # messages from here on (the run's batch and later) stay


@dataclass(slots=True)
class _Job:
    """One estimator run for a batch. A background run is claimed in the session state
    (`owner`, `lease_until`): whoever loads that state sees the batch taken."""

    id: str  # unique in the session: the batch's end and the call that started it
    upto: int
    keep_from: int
    owner: str = ""  # the claiming Lifecycle instance; "" for inline and manual runs
    lease_until: float = 0.0  # wall-clock time after which the claim lapses

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "upto": self.upto,
            "keepFrom": self.keep_from,
            "owner": self.owner,
            "leaseUntil": self.lease_until,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> _Job:
        return cls(str(d["id"]), int(d["upto"]), int(d["keepFrom"]), str(d["owner"]), float(d["leaseUntil"]))


def _new_stats() -> dict[str, Any]:
    return {
        "estimator_runs": 0,
        "estimator_failures": 0,
        "estimator_skipped_busy": 0,
        "estimator_jobs_released": 0,
        "deltas_applied": 0,
        "deltas_rejected": 0,
        "parts_rejected": 0,
        "evictions": 0,
        "turns_evicted": 0,
        "prefix_breaks": 0,
        "tokens_evicted": 0,
        "bundles_evicted": 0,
        "bundle_reasons": {},
        "segments_invalidated": 0,
        "segments_revived": 0,
        "history_rewrites": 0,
        "segments_remapped": 0,
        "gate_decisions": [],
    }


class Lifecycle:
    """Schedules the estimator, applies its results, keeps the cumulative plan. Thread-safe."""

    def __init__(
        self,
        config: LifecycleConfig | None = None,
        estimator: Estimator | None = None,
        archive: Callable[[str], str] | None = None,
    ) -> None:
        if archive is None:
            raise ConfigError("Lifecycle needs archive(text) -> artifact_id (e.g. ArtifactStore.put)")
        self.config = config or LifecycleConfig()
        self.estimator: Estimator = estimator if estimator is not None else OfflineEstimator()
        self.archive = archive
        self.registry = TaskRegistry()
        self.stats: dict[str, Any] = _new_stats()
        self._lock = threading.RLock()
        self._segmenter = TurnSegmenter()
        self._records: dict[tuple[str, int], TurnRecord] = {}
        self._bundles: dict[tuple[str, int, int], BundleRecord] = {}
        self._turn_tokens: dict[tuple[str, int, int], tuple[int, ...]] = {}  # per message of the turn
        self._trigger_mark = 0  # complete turns when the last run started
        self._mark_turn: str | None = None  # id of the last of them, to notice a rewritten history
        self._covered = 0  # complete turns that a successful run has seen
        self._calls = 0
        self._ready: list[_Result] = []
        self._inflight: Future[Any] | None = None
        self._segments: list[Segment] = []
        self._drop: set[int] = set()
        self._stubs: dict[int, tuple[dict[str, Any], ...]] = {}
        self._plan_version = 0
        self._generation = 0  # bumped by load_dict: results of older runs are dropped
        self._pending: tuple[Any, _Job, int] | None = None  # schedule "manual": the job to run
        self._job: _Job | None = None  # the background job claimed in the state, until delivered
        self._inflight_id: str | None = None  # the job this instance's worker runs
        self.owner = uuid.uuid4().hex[:16]  # this instance, as a job's claimant
        # Runs `apply` (a finished background result) under the session's lock, on the
        # newest state; the host writes the state back after. None: apply directly.
        self.deliver: Callable[[Callable[[], None]], None] | None = None
        # Tokens ahead of the history that the next eviction re-sends too (the system
        # prompt and tools, when evicting adds `recall_artifact` to the tools, which come
        # first); None when an eviction re-sends only what follows its cut. Set by the pilot.
        self.head_refill_tokens: int | None = None

    # -- observing -----------------------------------------------------------
    def observe(self, messages: Sequence[Message]) -> None:
        """Note the managed history; start the estimator when a batch is full."""
        with self._lock:
            self._calls += 1
            batch = self.config.batch_turns
            if batch is None:
                return
            turns = self._segmenter.update(messages)
            n = 0
            while n < len(turns) and turns[n].complete:
                n += 1
            mark = self._trigger_mark
            if mark and (n < mark or (self._mark_turn and turns[mark - 1].turn_id != self._mark_turn)):
                # The caller rewrote the history (its own compaction, an edit): the old
                # batch count means nothing now. Without this, no batch would fire
                # again until the new history outgrew the old one.
                self._trigger_mark = self._covered = 0
                self._generation += 1  # a run in flight judged the old history: drop its result
                self._job = None
            self._release_lapsed_job()
            if n - self._trigger_mark < batch:
                return
            if self._job is not None:  # a run (here or in another process) has the last batch
                self.stats["estimator_skipped_busy"] += 1
                return
            records = {}
            for seq, t in enumerate(turns[:n]):
                key = (t.turn_id, t.end)
                rec = self._records.get(key)
                if rec is None:
                    rec = self._records[key] = turn_record(messages, t, seq)
                records[t.turn_id] = rec
            first = max(self._covered, n - self.config.max_view_turns)
            new = [records[t.turn_id] for t in turns[first:n]]
            self.registry.note_turns(t.turn_id for t in turns[:n])
            gone = {t for seg in self._segments for t in seg.task_ids}
            view = build_view(self.registry, new, records, gone)
            # This batch (turns since the last trigger) and everything after it stay
            # in view when the result is applied: a task that just finished gets a
            # batch of later turns as evidence before it can go.
            keep_from = turns[min(self._trigger_mark, n - 1)].start
            self._trigger_mark = n
            self._mark_turn = turns[n - 1].turn_id
            job = _Job(f"{n}:{self._calls}", n, keep_from)
            if self.config.schedule == "manual":
                self._pending = (view, job, self._generation)  # a newer batch replaces an unrun older one
                return
            if self.config.schedule == "background":
                job.owner, job.lease_until = self.owner, time.time() + self.config.job_lease_s
                self._job, self._inflight_id = job, job.id
                self._inflight = self._start_run(view, job, self._generation, True)
                return
            generation = self._generation
        self._run(view, job, generation, False)  # inline: the caller holds the session

    def _release_lapsed_job(self) -> None:
        """Forget a claimed job nobody will deliver: another process's whose lease is
        over (it died or hangs), or this instance's whose run ended undelivered (the
        store refused the write). Its turns are offered again, as after a failure."""
        job = self._job
        if job is None:
            return
        if job.owner == self.owner:
            running = self._inflight_id == job.id and self._inflight is not None and not self._inflight.done()
            if running:
                return
        elif time.time() < job.lease_until:
            return
        self._job = None
        self._trigger_mark, self._mark_turn = self._covered, None
        self.stats["estimator_jobs_released"] += 1

    def release_job(self) -> None:
        """Give up a job claimed before a restart of a single process (no other process
        can deliver it): its turns are offered at the next observe, not after the lease."""
        with self._lock:
            if self._job is not None and self._job.owner != self.owner:
                self._job = None
                self._trigger_mark, self._mark_turn = self._covered, None
                self.stats["estimator_jobs_released"] += 1

    def _start_run(self, *args: Any) -> Future[None]:
        """Run the estimator on a thread of its own that ends with the run: an idle
        session holds no thread (a pool per session kept one alive for each, forever)."""
        fut: Future[None] = Future()
        fut.set_running_or_notify_cancel()

        def work() -> None:
            try:
                self._run(*args)
            except BaseException as exc:  # _run catches everything; be safe anyway
                fut.set_exception(exc)
            else:
                fut.set_result(None)

        threading.Thread(target=work, name="tokenpilot-estimator").start()
        return fut

    def _run(self, view: Any, job: _Job, generation: int, deliver: bool) -> None:
        """Run the estimator (outside every lock), then hand its result over: to the
        host's `deliver` (it takes the session's lock) when the caller does not hold
        the session, else straight into the state."""
        error = None
        delta: dict[str, Any] = {}
        try:
            delta = self.estimator.estimate(view)
            error = getattr(self.estimator, "last_error", None)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("tokenpilot: estimator raised, history unchanged: %s", error)

        def apply() -> None:
            self._accept(job, generation, delta, error)

        if not deliver or self.deliver is None:
            apply()
            return
        try:
            self.deliver(apply)
        except Exception as exc:  # the job lapses and its turns are offered again
            log.warning("tokenpilot: estimator result could not be delivered: %s", exc)

    def _accept(self, job: _Job, generation: int, delta: dict[str, Any], error: str | None) -> None:
        """Queue a finished run's result for the next view, if the state still wants it."""
        with self._lock:
            if job.owner:  # claimed: only while the state (maybe reloaded meanwhile) holds the claim
                if self._job is None or self._job.id != job.id:
                    return
                self._job = None
            elif generation != self._generation:
                return  # state was replaced by load_dict meanwhile
            self.stats["estimator_runs"] += 1
            if error:
                self.stats["estimator_failures"] += 1
                return
            self._covered = max(self._covered, job.upto)
            self._ready.append(_Result(delta, job.upto, job.keep_from))

    @property
    def busy(self) -> bool:
        """An estimator run is in flight: its result is in no `to_dict` yet."""
        fut = self._inflight
        return fut is not None and not fut.done()

    @property
    def due(self) -> bool:
        """A batch is complete and waits for `run_pending` (schedule "manual")."""
        return self._pending is not None

    def run_pending(self) -> bool:
        """Run the estimator for the waiting batch now, on the caller's thread.

        For hosts that schedule the estimator themselves (a LangGraph side-branch node
        running beside the agent node). Its result applies at the next `view`.
        Returns False when nothing was due.
        """
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return False
        view, job, generation = pending
        self._run(view, job, generation, True)
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no estimator run is in flight (tests, benchmarks, shutdown)."""
        fut = self._inflight
        if fut is None:
            return True
        try:
            fut.result(timeout)
        except FutureTimeout:
            return False
        except Exception:  # _run catches everything; be safe anyway
            pass
        return True

    def close(self) -> None:
        """Wait for a run in flight (its thread ends with it)."""
        self.wait()

    # -- rendering -----------------------------------------------------------
    def view(self, messages: Sequence[Message]) -> RenderPlan:
        """The current plan; first applies any finished estimator result (in one pass)."""
        with self._lock:
            if self._segments:
                self._check_segments(messages)
            if self._ready:
                self._apply_ready(messages)
            return RenderPlan(frozenset(self._drop), dict(self._stubs), self._plan_version)

    def _check_segments(self, messages: Sequence[Message]) -> None:
        """Follow a history the caller rewrote (its own compaction, a condenser, elided
        observations): the new history is the new base. A segment whose turns are all
        still there, in a row, stays evicted at their new place (turn ids are content
        digests); one whose turns the caller removed or changed is forgotten (there is
        nothing left to evict). Nothing evicted is shown again; logged at INFO only."""
        turns = self._segmenter.update(messages)
        if all(self._in_place(seg, messages, turns) for seg in self._segments):
            return
        index = {t.turn_id: k for k, t in enumerate(turns)}
        kept: list[Segment] = []
        taken: set[int] = set()
        for seg in self._segments:
            moved = self._relocate(seg, messages, turns, index)
            if moved is None or taken.intersection(range(moved.start, moved.end)):
                continue
            taken.update(range(moved.start, moved.end))
            kept.append(moved)
        gone = len(self._segments) - len(kept)
        self.stats["history_rewrites"] += 1
        self.stats["segments_remapped"] += len(kept)
        self.stats["segments_invalidated"] += gone
        log.info(
            "tokenpilot: history rewritten by the caller; %d evicted segment(s) kept at their new place, "
            "%d gone with the rewrite",
            len(kept),
            gone,
        )
        self._segments = kept
        self._drop = {i for s in kept for i in range(s.start, s.end)}
        self._stubs = {s.start: (s.stub,) for s in kept if s.stub is not None}
        self._plan_version += 1

    @staticmethod
    def _in_place(seg: Segment, messages: Sequence[Message], turns: Sequence[Turn]) -> bool:
        starts = {}
        for t in turns:
            starts[t.start] = t
            starts.setdefault(assistant_index(messages, t), t)  # a bundle evicted without its opener
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
        return Segment(start, end, seg.turn_ids, seg.task_ids, seg.artifact_id, seg.stub, seg.reasons)

    def _apply_ready(self, messages: Sequence[Message]) -> None:
        version = self._plan_version
        revived = self._apply_results(messages)
        if revived is not None and self._plan_version == version:  # shown again, nothing new evicted
            self._plan_version += 1
            self.stats["prefix_breaks"] += 1

    def _apply_results(self, messages: Sequence[Message]) -> int | None:
        """Apply the finished estimator results; where segments were shown again, if any."""
        keep_from = len(messages)
        for res in self._ready:
            report = self.registry.apply(res.delta)
            self.stats["parts_rejected"] += len(report.rejected)
            if report.dropped:
                self.stats["deltas_rejected"] += 1
            else:
                self.stats["deltas_applied"] += 1
            keep_from = min(res.keep_from, len(messages))
        self._ready.clear()
        turns = self._segmenter.update(messages)
        named = self._named_turns(messages, turns)
        revived = self._revive(named, turns)
        bundles = self._retired_bundles(messages, turns)
        window = self._window_bundles(messages, turns)
        if window:  # one pass with the rules; a rule's reason is the more precise
            bundles = {**window, **bundles}

        def plan_with(archive: Callable[[str], str], from_index: int = 0) -> EvictionPlan:
            return plan_eviction(
                messages,
                turns,
                self.registry,
                stub=self.config.stub,
                archive=archive,
                keep_from=keep_from,
                already_evicted=self._drop,
                bundles=bundles,
                from_index=from_index,
                protected=named,
            )

        # Plan with content ids first; archive for real only what the gate lets through.
        plan = plan_with(artifact_id_for if self.config.cost_gate else self.archive)
        if not plan.segments:
            return revived
        if self.config.cost_gate:
            decision, cut = self._best_cut(messages, plan)
            _remember(self.stats["gate_decisions"], decision.to_dict())
            if not decision.evict and revived is None:
                log.info("tokenpilot: eviction deferred by the cost gate: %s", decision.reason)
                return revived
            # A revival breaks the cache from its segment on anyway: what the gate deferred
            # after that point goes in the same pass, for free.
            plan = plan_with(self.archive, cut if decision.evict else revived or 0)
            if not plan.segments:
                return revived
        gross = sum(message_tokens(messages[i]) for i in plan.evicted)
        self._drop = self._drop | set(plan.evicted)
        self._stubs = {**self._stubs, **plan.stubs}
        self._segments.extend(plan.segments)
        self._plan_version += 1
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
        back = [seg for seg in self._segments if not seg.reasons and ids.intersection(seg.turn_ids)]
        if not back:
            return None
        self._segments = [seg for seg in self._segments if seg not in back]
        self._drop = {i for s in self._segments for i in range(s.start, s.end)}
        self._stubs = {s.start: (s.stub,) for s in self._segments if s.stub is not None}
        self.stats["segments_revived"] += len(back)
        log.info("tokenpilot: %d evicted segment(s) shown again: later words name their files", len(back))
        return min(seg.start for seg in back)

    def _retired_bundles(self, messages: Sequence[Message], turns: Sequence[Turn]) -> dict[int, str]:
        """Turn index -> reason, for tool bundles a segment rule retires now."""
        rules = self.config.segments
        if rules is None or not rules.enabled:
            return {}
        return evictable_bundles(self._bundle_records(messages, turns), rules)

    def _bundle_records(self, messages: Sequence[Message], turns: Sequence[Turn]) -> list[BundleRecord]:
        """Each turn as the segment rules see it (memoised per turn)."""
        records = []
        for t in turns:
            key = (t.turn_id, t.start, t.end)
            rec = self._bundles.get(key)
            if rec is None:
                rec = self._bundles[key] = bundle_record(messages, t)
            records.append(rec)
        return records

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
        last_use = last_uses(self._bundle_records(messages, turns)) if used else None
        return window_bundles(calls, rule, rendered, last_use)

    def _rendered_tokens(self, messages: Sequence[Message], turns: Sequence[Turn]) -> int:
        """Tokens of the history as the current plan renders it (memoised per turn)."""
        first = turns[0].start if turns else len(messages)
        total = sum(message_tokens(messages[k]) for k in range(first) if k not in self._drop)
        for t in turns:
            key = (t.turn_id, t.start, t.end)
            counts = self._turn_tokens.get(key)
            if counts is None:
                counts = tuple(message_tokens(messages[k]) for k in range(t.start, t.end))
                if t.complete:
                    self._turn_tokens[key] = counts
            total += sum(n for k, n in zip(range(t.start, t.end), counts) if k not in self._drop)
        return total + sum(message_tokens(m) for ms in self._stubs.values() for m in ms)

    def _best_cut(self, messages: Sequence[Message], plan: EvictionPlan) -> tuple[Any, int]:
        """The cost gate over every possible cut: evicting only the segments from a
        later start on re-prefills less. Returns the decision with the largest net
        saving (or, when none pays, the one for the whole plan) and its cut."""
        calls = expected_remaining_calls(
            self._calls, self.config.expected_calls_min, self.config.expected_calls_ratio
        )
        best: tuple[float, Any, int] | None = None
        first = None
        for cut in sorted({s.start for s in plan.segments}):
            segs = [s for s in plan.segments if s.start >= cut]
            evicted = {i for s in segs for i in range(s.start, s.end)}
            gross = sum(message_tokens(messages[i]) for i in evicted)
            stub_tokens = sum(message_tokens(s.stub) for s in segs if s.stub)
            drop = self._drop | evicted
            stubs = {**self._stubs, **{s.start: (s.stub,) for s in segs if s.stub is not None}}
            after = render(
                messages[cut:],
                {i - cut for i in drop if i >= cut},
                {i - cut: m for i, m in stubs.items() if i >= cut},
            )
            refill = sum(message_tokens(m) for m in after)
            if self.head_refill_tokens is not None:  # the tools change: everything is sent again
                refill += self.head_refill_tokens + sum(
                    message_tokens(messages[i]) for i in range(cut) if i not in self._drop
                )
            # The floor is for segment rules (a small retired bundle is the likeliest to be
            # needed back); a finished task nothing names goes on the gate's economics alone.
            whole_tasks = all(not s.reasons for s in segs)
            decision = should_evict(
                gross - stub_tokens,
                refill,
                calls,
                self.config.prices,
                self.config.cache_profile,
                0 if whole_tasks else self.config.min_evict_tokens,
            )
            if first is None:
                first = (decision, cut)
            net = decision.saving_usd - decision.cost_usd
            if decision.evict and (best is None or net > best[0]):
                best = (net, decision, cut)
        assert first is not None
        return (best[1], best[2]) if best is not None else first

    @property
    def segments(self) -> list[Segment]:
        with self._lock:
            return list(self._segments)

    # -- persistence ---------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: all the schedule and the gate decide from. A background run
        in flight is saved as its claim (`job`): a process loading the state waits for
        its result, or for its lease to lapse. A manual run not started yet stays with
        the host that schedules it."""
        with self._lock:
            return {
                "config": self.config.to_dict(),
                "registry": self.registry.to_dict(),
                "triggerMark": self._trigger_mark,
                "markTurn": self._mark_turn,
                "covered": self._covered,
                "job": self._job.to_dict() if self._job is not None else None,
                "calls": self._calls,
                "ready": [{"delta": r.delta, "upto": r.upto, "keepFrom": r.keep_from} for r in self._ready],
                "segments": [s.to_dict() for s in self._segments],
                "planVersion": self._plan_version,
                "stats": {**self.stats, "gate_decisions": list(self.stats["gate_decisions"])},
            }

    def load_dict(self, d: Mapping[str, Any]) -> None:
        """Restore state saved by `to_dict` into this instance, keeping its config,
        estimator and archive. A run in flight from before is discarded."""
        registry = TaskRegistry.from_dict(d["registry"])
        segments = [Segment.from_dict(s) for s in d["segments"]]
        with self._lock:
            self._generation += 1
            self.registry = registry
            self._segmenter = TurnSegmenter()
            self._records.clear()
            self._trigger_mark = int(d["triggerMark"])
            self._mark_turn = d.get("markTurn")
            self._covered = int(d["covered"])
            self._calls = int(d["calls"])
            self._ready = [_Result(dict(r["delta"]), int(r["upto"]), int(r["keepFrom"])) for r in d["ready"]]
            self._job = _Job.from_dict(d["job"]) if d.get("job") else None
            self._segments = segments
            self._drop = {i for s in segments for i in range(s.start, s.end)}
            self._stubs = {s.start: (s.stub,) for s in segments if s.stub is not None}
            self._plan_version = int(d["planVersion"])
            self.stats = {**_new_stats(), **dict(d["stats"])}
            self.stats["gate_decisions"] = list(self.stats["gate_decisions"])

    @classmethod
    def from_dict(
        cls,
        d: Mapping[str, Any],
        estimator: Estimator | None = None,
        archive: Callable[[str], str] | None = None,
        config: LifecycleConfig | None = None,
    ) -> Lifecycle:
        """A new lifecycle with saved state; `config` overrides the saved one."""
        lc = cls(config or LifecycleConfig.from_dict(d["config"]), estimator, archive)
        lc.load_dict(d)
        return lc


GATE_DECISIONS_KEPT = 32
"""The cost gate's latest decisions kept in the stats (and the saved state): enough to
explain the recent evictions, bounded so a long session's state does not grow with it."""


def _remember(decisions: list[dict[str, Any]], decision: dict[str, Any]) -> None:
    decisions.append(decision)
    del decisions[:-GATE_DECISIONS_KEPT]
