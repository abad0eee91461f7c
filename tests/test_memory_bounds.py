"""Memory stays bounded (#23 item 6): entries keep digests and frozen forms, not raw
content; idle sessions leave the proxy's memory and come back byte-identical from the
state store; huge bodies are followed by a `malloc_trim`."""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import re
import tracemalloc
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import TOOLS, call_points, session

from tokenpilot import TokenPilot
from tokenpilot._canonical import canonical_json
from tokenpilot.history.fingerprint import Digest, digest, keep, same
from tokenpilot.ingest.reshown import RESHOWN_NOTE, expand_in_context
from tokenpilot.lifecycle.schedule import LifecycleConfig
from tokenpilot.store.artifacts import ArtifactStore
from tokenpilot_proxy import ProxySettings
from tokenpilot_proxy.demo import FakeUpstream
from tokenpilot_proxy.memtrim import Trimmer, malloc_trim
from tokenpilot_proxy.residency import Residency
from tokenpilot_proxy.serve_options import add_serve_arguments
from tokenpilot_proxy.server import RunningProxy, settings_from_args

_ART = re.compile(r"art_[0-9a-f]{24}")


def _call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        ],
    }


def _big(n_chars: int, salt: str = "") -> str:
    line = f"{salt}row {{}} of a long build log with details\n"
    out = "".join(line.format(i) for i in range(n_chars // 40 + 1))
    return out[:n_chars]


def _history(output: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "build it"},
        _call("c1", "bash", {"command": "make"}),
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]


# ---------------------------------------------------------------------------
# 1. an entry keeps no raw content
# ---------------------------------------------------------------------------
def test_fingerprint_keeps_the_frozen_object_or_a_digest():
    text = "same text"
    frozen_copy = "".join(["same ", "text"])  # equal, another object
    assert keep(text, frozen_copy) is frozen_copy  # shared with the frozen form: free
    kept = keep("x" * 1000, "reduced")
    assert isinstance(kept, Digest) and kept.size == 1000
    assert same(kept, "x" * 1000) and not same(kept, "x" * 999 + "y") and not same(kept, "x" * 1001)
    assert not same(kept, ["x" * 1000])
    parts = [{"type": "text", "text": "a" * 50}]
    assert same(keep(parts, "cut"), [{"type": "text", "text": "a" * 50}])
    assert not same(keep(parts, "cut"), [{"type": "text", "text": "a" * 49 + "b"}])
    assert same(keep("\ud800 lone", None), "\ud800 lone")  # lone surrogates digest too
    assert digest("1") != digest(1)


def test_a_5_mb_tool_output_is_not_held_after_ingestion():
    tp = TokenPilot(store=ArtifactStore(), lifecycle=False)
    tp.prepare(_history(_big(300_000, "warm ")), session_id="warm")  # tokenizer, passes: loaded once
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        hist = _history(_big(5_000_001))
        p = tp.prepare(hist, session_id="s")
        sent = p.messages[-1]["content"]
        del hist, p
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    entry = tp.session("s").entries[-1]
    assert len(sent) < 5_000 and _ART.search(sent)
    assert isinstance(entry.content, Digest) and entry.content.size == 5_000_001
    assert entry.frozen["content"] == sent
    assert held - before < 1_000_000, f"{held - before:,} bytes still held for a 5 MB output"


def test_digest_matching_sees_any_change_and_no_false_one():
    tp = TokenPilot(store=ArtifactStore(), lifecycle=False)
    out = _big(400_000)
    first = tp.prepare(_history(out), session_id="s")
    again = tp.prepare([*_history(out), {"role": "assistant", "content": "Built."}], session_id="s")
    assert again.stats.ingested == 1 and again.stats.prefix_break is None
    assert again.messages[: len(first.messages)] == first.messages
    changed = out[:200_000] + "X" + out[200_001:]  # same length, one char differs
    redo = tp.prepare(_history(changed), session_id="s")
    assert redo.stats.prefix_break == "history rewritten by the caller" and redo.stats.ingested == 1
    sent_aid = _ART.findall(redo.messages[-1]["content"])[-1]
    assert tp.recall(sent_aid, session_id="s").text == changed


def test_the_raw_system_prompt_is_kept_as_a_digest_and_changes_are_still_seen():
    def hist(date: str) -> list[dict[str, Any]]:
        rules = "\n".join(f"- rule {i}: answer in short sentences" for i in range(400))
        return [
            {"role": "system", "content": f"You are an agent.\nCurrent date: {date}\n{rules}"},
            {"role": "user", "content": "hi"},
        ]

    tp, ref = (
        TokenPilot(store=ArtifactStore(), lifecycle=False),
        TokenPilot(store=ArtifactStore(), lifecycle=False),
    )
    for pilot in (tp, ref):
        pilot.prepare(hist("2026-12-02"), session_id="s")
    (kept,) = tp.session("s").system.raw
    assert isinstance(kept, Digest)  # the raw prompt differs from its stabilised text
    _reload(tp, "s")
    assert tp.session("s").system.raw == (kept,)
    for date in ("2026-12-02", "2026-12-03"):  # unchanged, then a new date: as never reloaded
        p, r = tp.prepare(hist(date), session_id="s"), ref.prepare(hist(date), session_id="s")
        assert p.messages == r.messages and p.stats.prefix_break is None
    assert p.messages[-1]["content"].count("2026-12-03") == 1  # the new date went to the tail


class FullDisk(ArtifactStore):
    full = True

    def put(self, session_id, data):
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().put(session_id, data)


def test_an_unstored_original_stays_in_memory_and_pins_its_session():
    store = FullDisk()
    tp = TokenPilot(store=store, lifecycle=False)
    out = _big(450_000)
    p = tp.prepare(_history(out), session_id="s")
    assert p.stats.unstored == 1
    assert tp.session("s").entries[-1].unstored == out  # the only copy we hold (I3)
    assert tp.unload_session("s") is False and "s" in tp.session_ids
    store.full = False
    back = tp.prepare(_history(out), session_id="s")
    assert back.stats.unstored == 0 and back.stats.reduced == 1
    assert tp.recall(back.stats.artifacts[0], session_id="s").text == out
    assert tp.unload_session("s") is True and "s" not in tp.session_ids


def test_a_session_with_an_estimator_run_in_flight_is_not_unloaded():
    class Busy:
        busy = True

    tp = TokenPilot(store=ArtifactStore(), lifecycle_factory=lambda sid, archive: Busy())
    tp.session("s")
    assert tp.unload_session("s") is False and "s" in tp.session_ids


# ---------------------------------------------------------------------------
# 2. evict + reload in the core keeps I1 and I3 (property)
# ---------------------------------------------------------------------------
def _bytes(p) -> str:
    return json.dumps({"tools": p.tools, "messages": p.stable_messages}, ensure_ascii=False)


def _reload(tp: TokenPilot, sid: str) -> None:
    """What the proxy does to an idle session: save, drop from memory, read back."""
    data = json.loads(json.dumps(tp.export_session(sid)))  # through JSON, like the state store
    assert tp.unload_session(sid)
    assert sid not in tp.session_ids
    tp.import_session(data)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(session(), st.lists(st.booleans(), min_size=1, max_size=30), st.booleans())
def test_evict_and_reload_between_calls_keeps_i1_and_i3(msgs, evictions, lifecycle):
    def pilot(store: ArtifactStore) -> TokenPilot:
        lc = LifecycleConfig(batch_turns=1, schedule="inline", cost_gate=False) if lifecycle else False
        return TokenPilot(store=store, lifecycle=lc)

    store, ref_store = ArtifactStore(), ArtifactStore()
    tp, ref = pilot(store), pilot(ref_store)  # ref never leaves memory
    prev = None
    for j, k in enumerate(call_points(msgs)):
        if j and evictions[j % len(evictions)]:
            _reload(tp, "s")
        p = tp.prepare(msgs[:k], TOOLS, session_id="s")
        r = ref.prepare(msgs[:k], TOOLS, session_id="s")
        assert p.messages == r.messages and p.tools == r.tools  # byte-identical to never evicted
        cur = _bytes(p)
        if prev is not None and p.stats.prefix_break is None:
            assert cur.startswith(prev[:-2]), "I1: call n is not a prefix of call n+1"
        if not lifecycle:
            assert p.stats.prefix_break is None
        prev = cur
    # I3: every handle in the last render recalls its original byte-exact, after a reload too
    _reload(tp, "s")
    originals = {m["tool_call_id"]: m["content"] for m in msgs if m["role"] == "tool"}
    for m in p.messages:
        text = m["content"] if isinstance(m.get("content"), str) else canonical_json(m.get("content"))
        content = m.get("content")
        if m.get("role") == "tool" and isinstance(content, str) and RESHOWN_NOTE in content:
            content = text = _expanded(tp, m)
        if isinstance(content, str) and (
            "[tokenpilot: output cut" in content or "image seen at its call" in content
        ):
            # cut in place at the tail: its recall gives the output as it was taken in,
            # whose own handles lead on to the original
            content = text = tp.recall(_ART.findall(text)[-1], session_id="s").text
            if not isinstance(originals.get(m["tool_call_id"]), str):  # parts come back as their JSON
                content = json.loads(content)
        if m.get("role") == "tool" and content != originals.get(m["tool_call_id"]):
            orig = originals[m["tool_call_id"]]
            assert tp.recall(_ART.findall(text)[-1], session_id="s").text == (
                orig if isinstance(orig, str) else canonical_json(orig)
            )
        for aid in _ART.findall(text):
            assert tp.recall(aid, session_id="s").found


def _expanded(tp: TokenPilot, m: dict) -> str:
    """A folded output rebuilt from the session's frozen history (the output its marker
    names may have been evicted since: its lines are then one recall of the stub away)."""
    frozen = [e.frozen for e in tp.session("s").entries]
    k = next(i for i, f in enumerate(frozen) if f.get("tool_call_id") == m["tool_call_id"])
    return expand_in_context(frozen, k)


# ---------------------------------------------------------------------------
# 3. the proxy: idle sessions leave memory and come back byte-identical
# ---------------------------------------------------------------------------
def test_residency_picks_the_least_recently_used_beyond_the_cap_then_the_idle():
    r = Residency(idle_s=10, max_sessions=2)
    for i, sid in enumerate("abcd"):
        r.touch(sid, 100.0 + i)
    assert r.victims(104.0) == ["a", "b"]  # over the cap by two
    assert r.victims(104.0, spare="a") == ["b", "c"]  # still two over
    assert r.due("a", 104.0) and not r.due("d", 104.0)
    r.evict("a")
    r.evict("b")
    assert r.victims(112.5) == ["c"] and r.evicted == {"a", "b"}  # idle for 10.5 s, d for 9.5
    r.touch("a", 113.0)
    assert "a" in r and "a" not in r.evicted


def test_serve_options_and_settings():
    import argparse

    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    args = p.parse_args(
        ["--upstream", "http://127.0.0.1:1/v1", "--session-idle", "60", "--max-sessions", "5"]
    )
    s = settings_from_args(args)
    assert (s.session_idle_s, s.max_sessions) == (60.0, 5)
    d = settings_from_args(p.parse_args(["--upstream", "http://127.0.0.1:1/v1"]))
    assert (d.session_idle_s, d.max_sessions) == (900.0, 1000)
    with pytest.raises(ValueError, match="max-sessions"):
        ProxySettings(upstream="http://127.0.0.1:1/v1", max_sessions=-1)


async def _post(http: aiohttp.ClientSession, rp: RunningProxy, sid: str, messages: list[dict]) -> dict:
    body = {"model": "m", "messages": messages, "prompt_cache_key": sid}
    async with http.post(rp.url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


def _turns(sid: str, n: int) -> list[list[dict[str, Any]]]:
    """Growing histories of one session: a big tool output (reduced, stored), then chat."""
    msgs = [
        {"role": "system", "content": f"You are agent {sid}. Current date: 2026-12-02"},
        {"role": "user", "content": "build it"},
        _call("c1", "bash", {"command": "make"}),
        {"role": "tool", "tool_call_id": "c1", "content": _big(120_000, sid)},
    ]
    out = [list(msgs)]
    for i in range(n - 1):
        msgs += [{"role": "assistant", "content": f"step {i} done"}, {"role": "user", "content": f"next {i}"}]
        out.append(list(msgs))
    return out


async def _run(upstream: FakeUpstream, tmp_path, name: str, sessions: list[str], **kw: Any):
    """Every session's turns, round robin; what the upstream got per session, and the proxy."""
    rp = await RunningProxy(
        ProxySettings(
            upstream=upstream.url,
            port=0,
            store_dir=tmp_path / name / "store",
            state_dir=tmp_path / name / "state",
            flush_interval_s=0,
            **kw,
        ),
        shutdown_timeout_s=1,
    ).start()
    start = len(upstream.chat_requests())
    async with aiohttp.ClientSession() as http:
        turns = {sid: _turns(sid, 4) for sid in sessions}
        for t in range(4):
            for sid in sessions:
                await _post(http, rp, sid, turns[sid][t])
    got: dict[str, list[list[Any]]] = {}
    for req in upstream.chat_requests()[start:]:
        got.setdefault(req.body["prompt_cache_key"], []).append(req.body["messages"])
    return rp, got


async def test_sessions_over_the_cap_are_evicted_and_render_byte_identical(upstream, tmp_path):
    sessions = ["a", "b", "c"]
    capped, got = await _run(upstream, tmp_path, "capped", sessions, max_sessions=1, session_idle_s=0)
    free, want = await _run(upstream, tmp_path, "free", sessions, max_sessions=0, session_idle_s=0)
    try:
        px = capped.proxy
        assert len(px.pilot.session_ids) == 1 and px.residency.evicted == {"a", "b"}
        assert got == want  # every call, byte for byte, as if nothing had left memory
        for sid in sessions:
            for a, b in zip(got[sid], got[sid][1:]):
                assert b[: len(a)] == a  # append-only across evictions (I1)
        stats = {sid: px.stats[sid].to_dict() for sid in sessions}
        assert all(st["calls"] == 4 and st["prefix_breaks"] == 0 for st in stats.values())

        # recall from an evicted session: byte-exact, and the session comes back for it
        aid = _ART.findall(got["a"][-1][3]["content"])[-1]
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{capped.url}/tokenpilot/artifacts/{aid}", params={"session": "a"}) as r:
                body = await r.json()
        assert r.status == 200 and body["text"] == _big(120_000, "a")
        assert "a" in px.pilot.session_ids
        recalls = px.pilot.session("a").state.recall_counts
        assert sum(recalls.values()) == 1  # counted in the reloaded session's state
    finally:
        await capped.stop()
        await free.stop()


async def test_an_idle_session_leaves_memory_and_its_next_call_reads_it_back(upstream, tmp_path):
    rp = await RunningProxy(
        ProxySettings(
            upstream=upstream.url,
            port=0,
            store_dir=tmp_path / "store",
            state_dir=tmp_path / "state",
            flush_interval_s=0,
            session_idle_s=0.1,
        ),
        shutdown_timeout_s=1,
    ).start()
    try:
        px = rp.proxy
        turns = _turns("idle", 3)
        async with aiohttp.ClientSession() as http:
            await _post(http, rp, "idle", turns[0])
            for _ in range(200):  # the sweep runs every 0.05 s here
                if "idle" not in px.pilot.session_ids:
                    break
                await asyncio.sleep(0.05)
            assert "idle" not in px.pilot.session_ids and "idle" in px.residency.evicted
            assert px.stats["idle"].calls == 1  # stats stay for /tokenpilot/stats
            await _post(http, rp, "idle", turns[1])
        first, second = (r.body["messages"] for r in upstream.chat_requests()[-2:])
        assert second[: len(first)] == first
        assert px.stats["idle"].prefix_breaks == 0
    finally:
        await rp.stop()


async def test_usage_that_arrives_after_an_eviction_is_saved_beside_the_stored_session(upstream, tmp_path):
    rp = await RunningProxy(
        ProxySettings(
            upstream=upstream.url,
            port=0,
            store_dir=tmp_path / "store",
            state_dir=tmp_path / "state",
            flush_interval_s=0,
            session_idle_s=0,
        ),
        shutdown_timeout_s=1,
    ).start()
    try:
        px = rp.proxy
        async with aiohttp.ClientSession() as http:
            await _post(http, rp, "u", _turns("u", 1)[0])
        stored_before = px.state.load_state("u")[1]["session"]
        assert px.evict("u", force=True) and "u" not in px.pilot.session_ids
        px.stats["u"].errors += 1  # e.g. a stream that broke after the eviction
        assert px.keeper.save("u")
        after = px.state.load_state("u")[1]
        assert after["session"] == stored_before and after["stats"]["errors"] == 1
        assert "u" not in px.pilot.session_ids  # saving stats does not load the session
    finally:
        await rp.stop()


async def test_start_up_loads_at_most_the_cap_and_the_rest_on_use(upstream, tmp_path):
    sessions = ["p", "q", "r"]
    first, got = await _run(upstream, tmp_path, "one", sessions, max_sessions=0, session_idle_s=0)
    await first.stop()
    rp = await RunningProxy(
        ProxySettings(
            upstream=upstream.url,
            port=0,
            store_dir=tmp_path / "one" / "store",
            state_dir=tmp_path / "one" / "state",
            flush_interval_s=0,
            max_sessions=2,
            session_idle_s=0,
        ),
        shutdown_timeout_s=1,
    ).start()
    try:
        px = rp.proxy
        assert len(px.pilot.session_ids) == 2 and len(px.residency.evicted) == 1
        (lazy,) = px.residency.evicted
        more = [
            *_turns(lazy, 4)[-1],
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "more"},
        ]
        async with aiohttp.ClientSession() as http:
            await _post(http, rp, lazy, more)
        sent = upstream.chat_requests()[-1].body["messages"]
        assert sent[: len(got[lazy][-1])] == got[lazy][-1]  # picks up where it was
        assert px.stats[lazy].prefix_breaks == 0 and len(px.pilot.session_ids) == 2
    finally:
        await rp.stop()


async def test_without_a_state_store_nothing_is_evicted(upstream, tmp_path):
    rp = await RunningProxy(
        ProxySettings(
            upstream=upstream.url, port=0, store_dir=tmp_path / "store", state_dir=None, max_sessions=1
        ),
        shutdown_timeout_s=1,
    ).start()
    try:
        async with aiohttp.ClientSession() as http:
            for sid in ("x", "y"):
                await _post(http, rp, sid, _turns(sid, 1)[0])
        assert set(rp.proxy.pilot.session_ids) == {"x", "y"}  # memory is their only copy
        assert not rp.proxy.residency.enabled and rp.proxy.evict("x", force=True) is False
    finally:
        await rp.stop()


# ---------------------------------------------------------------------------
# 4. huge bodies are followed by one malloc_trim
# ---------------------------------------------------------------------------
def test_trimmer_trims_once_after_the_last_huge_request():
    t = Trimmer(threshold=10)
    assert not t.huge(9) and t.huge(10) and not t.huge(None)
    t.begin()
    t.begin()
    assert t.end() is False  # another is still in flight
    assert t.end() is malloc_trim()  # the last one: trimmed (on glibc)


async def test_a_huge_request_is_followed_by_a_trim(upstream, tmp_path):
    rp = await RunningProxy(
        ProxySettings(
            upstream=upstream.url, port=0, store_dir=tmp_path / "store", state_dir=tmp_path / "state"
        ),
        shutdown_timeout_s=1,
    ).start()
    try:
        async with aiohttp.ClientSession() as http:
            await _post(http, rp, "huge", _history(_big(5 * 2**20)))
            await _post(http, rp, "small", _history("tiny"))
        for _ in range(100):
            if not rp.proxy.guard.trims:
                break
            await asyncio.sleep(0.05)
        assert rp.proxy.trimmer.trims == (1 if malloc_trim() else 0)
    finally:
        await rp.stop()


async def test_huge_bodies_take_turns_and_small_ones_never_wait():
    t = Trimmer(threshold=10, at_once=1)
    order: list[str] = []
    release = asyncio.Event()

    async def huge(name: str) -> None:
        async with t.slot(100):
            order.append(name)
            await release.wait()

    first = asyncio.create_task(huge("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(huge("second"))
    for _ in range(5):
        await asyncio.sleep(0)
    async with t.slot(5):  # small: no slot needed while both huge ones hold or wait
        order.append("small")
    assert order == ["first", "small"]
    release.set()
    await asyncio.gather(first, second)
    assert order == ["first", "small", "second"]
