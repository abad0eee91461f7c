"""A replica of a shared store reads no session at start-up: each is read at its first
use, and renders then exactly what a replica that served it all along renders; the
stats views read the store, so they list the sessions no call has touched here yet."""

from __future__ import annotations

from pathlib import Path

import pytest

redis = pytest.importorskip(
    "redis", reason="the Redis store needs the redis client: pip install 'tokenpilot[redis]'"
)

from drills.fleetdrill import SESSION as SID  # noqa: E402
from drills.fleetdrill import namespaced, prepare_call, replica_settings, session_calls  # noqa: E402
from tokenpilot import TokenPilot  # noqa: E402
from tokenpilot_proxy import Proxy, ProxySettings  # noqa: E402
from tokenpilot_proxy.metrics import session_stats  # noqa: E402


def replica(url: str, tmp: Path) -> Proxy:
    return Proxy(replica_settings(url, tmp), pilot=TokenPilot(store=url, lifecycle=False))


def send(proxy: Proxy, history: list) -> bytes:
    return prepare_call(proxy, history)[0]


def test_a_replica_started_late_reads_a_session_at_its_first_use(redis_url, tmp_path):
    calls = session_calls(3)[:12]
    alone = replica(namespaced(redis_url), tmp_path / "alone")
    want = [send(alone, c) for c in calls]

    url = namespaced(redis_url)
    first = replica(url, tmp_path / "first")
    for c in calls[:-1]:
        send(first, c)
    late = replica(url, tmp_path / "late")
    assert late.keeper.load_all() == 0 and late.pilot.session_ids == []  # nothing read at start
    assert SID in late.keeper.fleet_stats() and SID in session_stats(late)  # the store lists it
    assert late.keeper.fleet_stats()[SID].calls == first.keeper.stats[SID].calls
    assert send(late, calls[-1]) == want[-1]  # read at first use: the bytes of one replica
    assert late.pilot.session_ids == [SID]


def test_a_store_of_one_process_is_still_read_whole_at_start(tmp_path):
    """Without a shared store this process is the only reader: a restart restores its
    sessions at once (their stats in the views, their state for the next call)."""
    settings = ProxySettings(
        upstream="http://127.0.0.1:9/v1",
        store_dir=tmp_path / "store",
        state_dir=tmp_path / "state",
        flush_interval_s=0,
    )
    calls = session_calls(3)[:6]
    first = Proxy(settings, pilot=TokenPilot(store=tmp_path / "store", lifecycle=False))
    for c in calls[:-1]:
        send(first, c)
    want = send(first, calls[-1])
    first.keeper.save(SID)
    again = Proxy(settings, pilot=TokenPilot(store=tmp_path / "store", lifecycle=False))
    assert again.keeper.load_all() == 1 and again.pilot.session_ids == [SID]
    assert again.keeper.fleet_stats()[SID].calls == first.keeper.stats[SID].calls
    assert send(again, calls[-1]) == want
