"""A session that hops between replicas on every call evicts exactly as one process does.

The estimator's results, the batch marks, the gate's inputs and the claimed estimator
job all live in the session state the replicas share (Redis), written under the
session's lock. So a session sent round-robin to two replicas gets the same upstream
bytes, and the same evictions at the same calls, as the same session sent to one.

The estimator is the deterministic offline one, run in the background as `serve` runs
it; the tests wait for each run deterministically (the future of the in-process
lifecycle, or, for `tokenpilot serve` subprocesses, the stored state until its job is
delivered) before sending the next call.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from tokenpilot import TokenPilot
from tokenpilot.estimator import EstimatorView, OfflineEstimator
from tokenpilot.lifecycle.schedule import LifecycleConfig

redis = pytest.importorskip(
    "redis", reason="the Redis store needs the redis client: pip install 'tokenpilot[redis]'"
)
from drills.fleetdrill import SESSION as SID  # noqa: E402
from drills.fleetdrill import (  # noqa: E402
    TOOLS,
    namespaced,
    prefix_breaks,
    prepare_call,
    replica_settings,
    round_robin,
    session_calls,
)
from tokenpilot.store.redis import RedisStore  # noqa: E402
from tokenpilot_proxy import (  # noqa: E402
    Proxy,
    ProxySettings,  # noqa: E402
)


@pytest.fixture(autouse=True)
def offline_estimator(monkeypatch):
    monkeypatch.delenv("TOKENPILOT_ESTIMATOR_MODEL", raising=False)


# ---------------------------------------------------------------------------
# Estimators that count their runs, or hold them
# ---------------------------------------------------------------------------
class CountingEstimator(OfflineEstimator):
    """The offline estimator, counting its runs (per replica)."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def estimate(self, view: EstimatorView) -> dict[str, Any]:
        self.runs += 1
        return super().estimate(view)


class GatedEstimator(CountingEstimator):
    """Holds each run until the test opens the gate; says when a run has returned."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.returned = threading.Event()

    def estimate(self, view: EstimatorView) -> dict[str, Any]:
        assert self.gate.wait(60), "the test never opened the estimator's gate"
        try:
            return super().estimate(view)
        finally:
            self.returned.set()


# ---------------------------------------------------------------------------
# In-process replicas: two Proxy objects, each its own RedisStore, one Redis
# ---------------------------------------------------------------------------
def replica(url: str, tmp: Path, estimator: CountingEstimator, **lifecycle: Any) -> Proxy:
    """One replica as `serve --store url` builds it, with a counting offline estimator."""
    cfg = LifecycleConfig(**lifecycle) if lifecycle else None
    return Proxy(replica_settings(url, tmp), pilot=TokenPilot(store=url, lifecycle=cfg, estimator=estimator))


def send(proxy: Proxy, history: list[dict[str, Any]]) -> tuple[bytes, str | None]:
    """One call through a replica: the bytes it sends upstream, and why its prefix broke."""
    return prepare_call(proxy, history)


def settle(proxies: list[Proxy]) -> None:
    """Wait until no replica has an estimator run in flight (its result is in the store)."""
    for p in proxies:
        if SID in p.pilot.session_ids:
            assert p.pilot.session(SID).lifecycle.wait(60)


def run_session(proxies: list[Proxy], calls: list[list[dict[str, Any]]]) -> tuple[list[bytes], list[int]]:
    """Call n goes to replica n mod len(proxies); each run is waited for before the next call."""
    bodies, evictions = [], []
    for n, history in enumerate(calls):
        body, cause = send(proxies[n % len(proxies)], history)
        bodies.append(body)
        if cause == "eviction":
            evictions.append(n)
        settle(proxies)
    return bodies, evictions


def stored_lifecycle(url: str) -> dict[str, Any]:
    got = RedisStore(url).load_state(SID)
    assert got is not None
    return got[1]["session"]["lifecycle"]


def test_round_robin_replicas_send_the_bytes_and_evict_at_the_calls_of_one_replica(redis_url, tmp_path):
    calls = session_calls(22)
    assert len(calls) >= 60
    one_url, two_url = namespaced(redis_url), namespaced(redis_url)
    alone_est = CountingEstimator()
    alone = replica(one_url, tmp_path / "alone", alone_est)
    ref_bodies, ref_evictions = run_session([alone], calls)
    # The session evicts on one replica, more than once, all through the run.
    assert len(ref_evictions) >= 3 and ref_evictions[-1] > len(calls) // 2, ref_evictions
    assert len(ref_bodies[-1]) < 0.6 * len(json.dumps(calls[-1]))

    ests = [CountingEstimator(), CountingEstimator()]
    fleet = [replica(two_url, tmp_path / f"r{i}", est) for i, est in enumerate(ests)]
    bodies, evictions = run_session(fleet, calls)
    assert evictions == ref_evictions
    for n, (got, want) in enumerate(zip(bodies, ref_bodies, strict=True)):
        assert got == want, f"call {n}: the round-robin body differs from the one-replica body"
    # Each batch ran once in the fleet, on whichever replica claimed it; both ran some.
    assert sum(e.runs for e in ests) == alone_est.runs and min(e.runs for e in ests) > 0
    shared, ref = stored_lifecycle(two_url), stored_lifecycle(one_url)
    assert shared["job"] is None and shared["ready"] == []
    assert shared["stats"] == ref["stats"] and shared["segments"] == ref["segments"]


def test_a_batch_claimed_by_one_replica_is_not_run_again_by_the_other(redis_url, tmp_path):
    """No waiting: replica A's run is in flight while B serves the next calls. B sees the
    claim in the shared state and skips the batch; A's result is delivered under the
    session lock, on the newest shared state (B's calls), and planned there at once
    (`Lifecycle.apply_ready`); B renders it at its next call and runs the batch that waited."""
    url = namespaced(redis_url)
    est_a, est_b = GatedEstimator(), CountingEstimator()
    a = replica(url, tmp_path / "a", est_a, cost_gate=False)
    b = replica(url, tmp_path / "b", est_b, cost_gate=False)
    calls = session_calls(4)
    n = 0
    while stored_job(url) is None:  # A serves until a batch is due and claimed
        send(a, calls[n])
        n += 1
    job = stored_job(url)
    assert job is not None and job["owner"] == a.pilot.session(SID).lifecycle.owner
    while stored_lifecycle(url)["stats"]["estimator_skipped_busy"] == 0:  # B: the next batch is due ...
        send(b, calls[n])
        n += 1
    assert est_b.runs == 0 and stored_job(url) == job  # ... and waits: A holds the claim
    est_a.gate.set()
    assert a.pilot.session(SID).lifecycle.wait(60)
    shared = stored_lifecycle(url)
    assert shared["job"] is None and shared["ready"] == []  # delivered into the shared state ...
    assert shared["stats"]["estimator_runs"] == 1 and shared["stats"]["deltas_applied"] == 1  # ... planned
    send(b, calls[n])  # B renders A's plan, and runs the batch that waited
    assert b.pilot.session(SID).lifecycle.wait(60) and est_b.runs == 1 and est_a.runs == 1
    after = stored_lifecycle(url)
    assert after["stats"]["deltas_applied"] == 2 and after["stats"]["estimator_runs"] == 2
    assert after["ready"] == [] and after["job"] is None


def stored_job(url: str) -> dict[str, Any] | None:
    got = RedisStore(url).load_state(SID)
    if got is None or got[1].get("session") is None:
        return None
    return got[1]["session"]["lifecycle"]["job"]


def test_a_claim_whose_lease_lapsed_is_taken_over_and_the_late_result_dropped(redis_url, tmp_path):
    url = namespaced(redis_url)
    est_a, est_b = GatedEstimator(), CountingEstimator()
    a = replica(url, tmp_path / "a", est_a, cost_gate=False, job_lease_s=1e-6)
    b = replica(url, tmp_path / "b", est_b, cost_gate=False, job_lease_s=1e-6)
    calls = session_calls(4)
    n = 0
    while stored_job(url) is None:
        send(a, calls[n])
        n += 1
    first = stored_job(url)
    send(b, calls[n])  # A's lease is over: B takes the batch as if A had died
    assert b.pilot.session(SID).lifecycle.wait(60) and est_b.runs == 1
    taken = stored_lifecycle(url)
    assert taken["stats"]["estimator_jobs_released"] == 1 and taken["stats"]["estimator_runs"] == 1
    est_a.gate.set()  # A's run ends late: its claim is gone, so the state ignores it
    assert a.pilot.session(SID).lifecycle.wait(60)
    after = stored_lifecycle(url)
    assert after["stats"]["estimator_runs"] == 1 and after["ready"] == taken["ready"]
    assert first is not None and after["job"] is None


def test_the_background_estimator_changes_state_only_under_the_session_lock(tmp_path):
    """Its result waits for the session's lock: a call in progress never sees the state
    change under it; then the result is planned (`Lifecycle.apply_ready`) and the next
    call renders it."""
    est = GatedEstimator()
    tp = TokenPilot(store=tmp_path / "store", estimator=est, lifecycle=LifecycleConfig(cost_gate=False))
    calls = session_calls(4)
    n = 0
    lc = None
    while lc is None or lc.to_dict()["job"] is None:
        tp.prepare(calls[n], TOOLS, session_id=SID)
        lc = tp.session(SID).lifecycle
        n += 1
    s = tp.session(SID)
    with s.lock:  # a call in progress
        before = lc.to_dict()
        est.gate.set()
        assert est.returned.wait(60)
        assert not lc.wait(0.2)  # the result waits for the lock ...
        assert lc.to_dict() == before  # ... and nothing changed meanwhile
    assert lc.wait(60)
    state = lc.to_dict()
    assert state["job"] is None and state["ready"] == [] and state["stats"]["estimator_runs"] == 1
    assert state["stats"]["deltas_applied"] == 1


# ---------------------------------------------------------------------------
# Two real `tokenpilot serve` replicas on one redis-server
# ---------------------------------------------------------------------------
async def test_two_serve_processes_round_robin_match_one_serve_process(redis_url, tmp_path):
    """`tokenpilot serve` as shipped (offline estimator in the background); after each
    call the test waits until the stored state holds no claimed job."""
    calls = session_calls(22)
    env = {"PYTHONPATH": str(REPO), "TOKENPILOT_ESTIMATOR_MODEL": ""}
    alone = await round_robin(redis_url, 1, calls, tmp_path, settle=True, env=env)
    fleet = await round_robin(redis_url, 2, calls, tmp_path, settle=True, env=env)
    assert len(alone) == len(fleet) == len(calls)
    evictions = prefix_breaks([json.loads(b) for b in alone])
    assert len(evictions) >= 3, evictions
    assert prefix_breaks([json.loads(b) for b in fleet]) == evictions
    for n, (got, want) in enumerate(zip(fleet, alone, strict=True)):
        assert got == want, f"call {n}: the round-robin body differs from the one-replica body"


def test_one_process_restarted_mid_run_offers_the_claimed_batch_again_at_once(tmp_path):
    """Without a shared store no other process can deliver a job claimed before a restart:
    the restarted proxy releases it when it loads its state, instead of waiting the lease."""
    settings = ProxySettings(
        upstream="http://127.0.0.1:9/v1",
        store_dir=tmp_path / "store",
        state_dir=tmp_path / "state",
        flush_interval_s=0,
    )
    est = GatedEstimator()
    first = Proxy(settings, pilot=TokenPilot(store=tmp_path / "store", estimator=est))
    calls = session_calls(4)
    n = 0
    while first.pilot.session_ids == [] or first.pilot.session(SID).lifecycle.to_dict()["job"] is None:
        send(first, calls[n])
        n += 1
    # The process dies with its run in flight (its result never delivered); a new one starts.
    again_est = CountingEstimator()
    again = Proxy(settings, pilot=TokenPilot(store=tmp_path / "store", estimator=again_est))
    assert again.keeper.load_all() == 1
    lc = again.pilot.session(SID).lifecycle
    assert lc.to_dict()["job"] is None and lc.stats["estimator_jobs_released"] == 1
    send(again, calls[n])
    assert lc.wait(60) and again_est.runs == 1  # the batch ran in the new process at its first call
    est.gate.set()
    assert first.pilot.session(SID).lifecycle.wait(60)
