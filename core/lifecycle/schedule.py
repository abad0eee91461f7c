"""Lifecycle-aware eviction, scheduled: the object the facade talks to.

The facade calls `observe(history)` on every render with the whole managed
history, and `view(history)` to learn what to drop and which stubs to insert.
This module is the schedule (when the estimator runs, on which thread, who holds
the job) and the saved state; the plan it hands results to is `lifecycle_plan.py`,
the settings `lifecycle_config.py`.

- Every `batch_turns` completed turns, `observe` starts the estimator on the turns
  it has not seen: inline (deterministic replays) or on a background thread (one
  run at a time; `observe` never waits for it).
- A finished estimator result is applied at the start of the next `view`: the
  registry validates it, `plan_eviction` plans, the cost gate decides, and the
  new segments join the plan in one pass. A host that delivers background results
  under the session's lock applies them then instead (`apply_ready`, on the history
  the last call left), so the plan is made between calls, beside the agent, and the
  next call only renders it; its tail rules join that pass. The batch that
  triggered the run, every later turn and the last turn stay. Between results the plan is constant, so
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
  are forgotten; nothing is shown again (`Planner.follow_rewrite`).
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

import copy
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..estimator import Estimator, OfflineEstimator, TurnRecord, build_view, turn_record
from ..messages.turns import TurnSegmenter
from ..registry import TaskRegistry
from .evict import Segment
from .plan import GATE_DECISIONS_KEPT, Batch, Planner, RenderPlan, Result
from .settings import LifecycleConfig

__all__ = ["GATE_DECISIONS_KEPT", "Lifecycle", "LifecycleConfig", "RenderPlan"]

log = logging.getLogger("tokenpilot")

Message = Mapping[str, Any]


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
        "tail_cuts": 0,
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
        self._lock = threading.RLock()
        self._segmenter = TurnSegmenter()
        self._plan = Planner(self.config, archive, _new_stats(), self._segmenter)
        self._records: dict[tuple[str, int], TurnRecord] = {}
        self._trigger_mark = 0  # complete turns when the last run started
        self._mark_turn: str | None = None  # id of the last of them, to notice a rewritten history
        self._covered = 0  # complete turns that a successful run has seen
        self._calls = 0
        self._ready: list[Result] = []
        self._inflight: Future[Any] | None = None
        self._generation = 0  # bumped by load_dict: results of older runs are dropped
        self._pending: tuple[Any, _Job, int] | None = None  # schedule "manual": the job to run
        self._job: _Job | None = None  # the background job claimed in the state, until delivered
        self._unshown = False  # `apply_ready` changed the plan after the last view: the next one joins it
        self._inflight_id: str | None = None  # the job this instance's worker runs
        self.owner = uuid.uuid4().hex[:16]  # this instance, as a job's claimant
        # Runs `apply` (a finished background result) under the session's lock, on the
        # newest state; the host writes the state back after. None: apply directly.
        self.deliver: Callable[[Callable[[], None]], None] | None = None
        # Tokens ahead of the history that the next eviction re-sends too (the system
        # prompt and tools, when evicting adds `recall_artifact` to the tools, which come
        # first); None when an eviction re-sends only what follows its cut. Set by the pilot.
        self.head_refill_tokens: int | None = None

    @property
    def stats(self) -> dict[str, Any]:
        """Counters of runs, results, evictions and the gate's latest decisions."""
        return self._plan.stats

    @stats.setter
    def stats(self, value: dict[str, Any]) -> None:
        self._plan.stats = value

    def stats_copy(self) -> dict[str, Any]:
        """The statistics as a copy the caller may change: the state keeps its own (its
        gate decisions are sealed for the journal, which reuses them by identity)."""
        with self._lock:
            stats = dict(self.stats)
            stats["gate_decisions"] = [dict(d) for d in stats["gate_decisions"]]  # plain, not sealed
            return copy.deepcopy(stats)

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
            gone = {t for seg in self._plan.segments for t in seg.task_ids}
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
            self._ready.append(Result(delta, job.upto, job.keep_from))

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
            if self._plan.segments:
                self._plan.follow_rewrite(messages)
            version = self._plan.version
            self._apply(messages)
            if self.config.batch_turns is not None:  # in the same pass as the batch's, if any
                self._plan.tail(messages, joins=self._plan.version != version or self._unshown)
            self._unshown = False
            return self._plan.render_plan()

    def apply_ready(self, messages: Sequence[Message]) -> None:
        """Apply a finished estimator result now, on `messages`: the session's managed
        history as its last call left it (the history the result was made for, or one
        the agent has extended since). For a host that delivers background results under
        the session's lock between calls: the batch's plan (the whole history weighed
        once) is made there, beside the agent, and not at the start of the next call,
        which then only renders it, its tail rules in the same pass (one break)."""
        with self._lock:
            if not self._ready:
                return
            if self._plan.segments:
                self._plan.follow_rewrite(messages)
            version = self._plan.version
            self._apply(messages)
            self._unshown = self._unshown or self._plan.version != version

    def _apply(self, messages: Sequence[Message]) -> None:
        """The finished results, applied in one pass (the caller holds the lock)."""
        if self._ready:
            ready, self._ready = self._ready, []
            self._plan.apply(messages, Batch(ready, self.registry, self._calls, self.head_refill_tokens))

    def dropped(self) -> frozenset[int]:
        """Indices of the managed history the current plan hides (no pending result applied)."""
        with self._lock:
            return self._plan.render_plan().drop

    @property
    def segments(self) -> list[Segment]:
        with self._lock:
            return list(self._plan.segments)

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
                "segments": self._plan.segment_exports(),
                "planVersion": self._plan.version,
                "tailMark": self._plan.tail_mark,
                "unshown": self._unshown,
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
            self._segmenter.recheck()  # its turns stay where the loaded history is the one it read
            # `_records` stays: a turn's record is a pure function of its messages and place,
            # which its key names, so a replica that loads the state another one saved
            # (every call, when calls alternate) does not read every turn again at its batch.
            self._trigger_mark = int(d["triggerMark"])
            self._mark_turn = d.get("markTurn")
            self._covered = int(d["covered"])
            self._calls = int(d["calls"])
            self._ready = [Result(dict(r["delta"]), int(r["upto"]), int(r["keepFrom"])) for r in d["ready"]]
            self._job = _Job.from_dict(d["job"]) if d.get("job") else None
            self._plan.load(segments, int(d["planVersion"]))
            mark = d.get("tailMark")  # a state saved before tail rules: they start from the next call
            self._plan.tail_mark = int(mark) if mark is not None else None
            self._unshown = bool(d.get("unshown", False))
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
