"""An eviction's archives in one store write (`SessionArchive.many`, `put_many`).

The planner plans with content ids and writes every archive of one eviction at once, so
an eviction costs one SQLite transaction (or one Redis script) instead of one per segment.
Checked here: `put_many` keeps what `put` keeps, on both backends; nothing is committed
when it fails; a store that overrides or wraps `put` still gets every write through its
`put`; and the requests a session renders are the same bytes either way.
"""

from __future__ import annotations

import errno
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from drills.crashdrill import TOOLS, system_prompt, tool_turn
from tokenpilot import ArtifactStore, TokenPilot
from tokenpilot._canonical import artifact_id_for
from tokenpilot.lifecycle.segments import SegmentRules
from tokenpilot.lifecycle.settings import LifecycleConfig
from tokenpilot.store.archive import SessionArchive
from tokenpilot.store.disk import DiskStore
from tokenpilot.store.protocol import Store

ITEMS = ["one\n", "two \ud800\n", "one\n", "x" * 40_000, b"\x00\xff raw bytes"]


@pytest.fixture(params=["artifacts", "disk", "redis"])
def make_store(request, tmp_path) -> Callable[[], Any]:
    if request.param == "artifacts":
        return lambda: ArtifactStore(tmp_path / f"a{uuid.uuid4().hex[:6]}")
    if request.param == "disk":
        return lambda: DiskStore(ArtifactStore(tmp_path / f"d{uuid.uuid4().hex[:6]}"), tmp_path / "state")
    pytest.importorskip(
        "redis", reason="the Redis store needs the redis client: pip install 'tokenpilot[redis]'"
    )
    from tokenpilot.store.redis import RedisStore

    url = request.getfixturevalue("redis_url")
    return lambda: RedisStore(f"{url}{'&' if '?' in url else '?'}namespace=test-{uuid.uuid4().hex[:12]}")


def test_put_many_keeps_what_put_keeps(make_store):
    many, one = make_store(), make_store()
    ids = many.put_many("s", ITEMS)
    assert ids == [one.put("s", x) for x in ITEMS] == [artifact_id_for(x) for x in ITEMS]
    for x, aid in zip(ITEMS, ids):
        raw = x if isinstance(x, bytes) else x.encode("utf-8", "surrogatepass")
        assert many.get_bytes("s", aid) == raw
    assert sorted(many.artifact_ids("s")) == sorted(set(ids)) == sorted(one.artifact_ids("s"))
    assert many.volume() == one.volume()  # a repeated item is counted once, as with put
    assert list(many.artifact_ids("other")) == []
    assert many.put_many("s", []) == []


def test_put_many_past_one_script_keeps_every_item(make_store):
    items = [f"segment {i}\n" * (i % 7 + 1) for i in range(150)]  # > 64: several Redis scripts
    store = make_store()
    ids = store.put_many("s", items)
    assert [store.get("s", aid) for aid in ids] == items


def test_a_failing_put_many_commits_nothing(tmp_path, monkeypatch):
    store = ArtifactStore(tmp_path / "a")
    real_add, calls = store._cache.add, []

    def add(key, value, *a: Any, **kw: Any) -> bool:
        calls.append(key)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_add(key, value, *a, **kw)

    monkeypatch.setattr(store._cache, "add", add)
    with pytest.raises(OSError):
        store.put_many("s", ["a\n", "b\n", "c\n", "d\n"])
    assert len(calls) == 3 and list(store.artifact_ids("s")) == []


class _CountingPut(ArtifactStore):
    """Overrides `put` only: every write must still come through it."""

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.puts = 0

    def put(self, session_id: str, data: str | bytes) -> str:
        self.puts += 1
        return super().put(session_id, data)


class _Wrapper:
    """Forwards everything but `put` to a store (as a user's wrapper might)."""

    def __init__(self, store: Any) -> None:
        self.store, self.puts = store, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def put(self, session_id: str, data: str | bytes) -> str:
        self.puts += 1
        return self.store.put(session_id, data)


def test_an_overridden_or_wrapped_put_sees_every_write(tmp_path):
    sub = _CountingPut(tmp_path / "a")
    assert sub.put_many("s", ["a", "b"]) == [artifact_id_for("a"), artifact_id_for("b")] and sub.puts == 2
    wrapped = _Wrapper(ArtifactStore(tmp_path / "b"))
    assert SessionArchive(wrapped, "s").many(["a", "b", "c"]) == [artifact_id_for(x) for x in "abc"]
    assert wrapped.puts == 3
    disk = DiskStore(_Wrapper(ArtifactStore(tmp_path / "c")), None)
    disk.put_many("s", ["a", "b"])
    assert disk.artifacts.puts == 2


class _Recording(ArtifactStore):
    """Records each `put_many` (items per call) and each single `put`."""

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.batches: list[int] = []

    def put_many(self, session_id: str, items: Any) -> list[str]:
        self.batches.append(len(items))
        return super().put_many(session_id, items)


def _session(store: Store | ArtifactStore, steps: int) -> list[list[Any]]:
    # the drill only runs checks: its outputs go stale with no file changed since, and its
    # cuts, which barely pay for their re-prefill, go on that alone
    cfg = LifecycleConfig(recall_risk=0.0, segments=SegmentRules(stale_after_action=False))
    tp = TokenPilot(store=store, lifecycle=cfg)
    msgs: list[Any] = [
        {"role": "system", "content": system_prompt("2026-01-01")},
        {"role": "user", "content": "go"},
    ]
    sent = []
    for step in range(steps):
        msgs = msgs + tool_turn(0, step)
        sent.append(tp.prepare(msgs, tools=TOOLS, session_id="s").messages)
        tp.session("s").lifecycle.wait()  # the background estimator done, as while the model answers
    return sent


def test_an_eviction_archives_in_one_write_and_renders_the_same_bytes(tmp_path):
    batched, single = _Recording(tmp_path / "batched"), _CountingPut(tmp_path / "single")
    a, b = _session(batched, 40), _session(single, 40)
    assert a == b  # the same requests, call by call
    assert batched.batches and max(batched.batches) > 1  # an eviction of several segments, one write
    evicted = [m for m in a[-1] if "evicted" in str(m.get("content"))]
    assert evicted  # the session did evict
    for aid in {x for m in evicted for x in re.findall(r"art_[0-9a-f]{24}", m["content"])}:
        assert batched.get("s", aid) and single.get("s", aid)  # every id a stub names is stored
