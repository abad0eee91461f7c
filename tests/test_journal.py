"""Session state as a journal of content-addressed chunks plus a small head (`journal`),
on both backends: round trips, what a save writes, versions and conflicts, a crash
between the chunks and the head, states of the old layout, and collection.

Redis comes from the shared `redis_url` fixture (conftest), else these cases skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpilot import ArtifactStore, StateConflict
from tokenpilot.store import journal as J
from tokenpilot.store import journal_blocks as JB
from tokenpilot.store import journal_memo as JM
from tokenpilot.store.disk import DiskStore
from tokenpilot.store.protocol import Store
from tokenpilot.store.state_files import StateFiles

RULES = "".join(f"Rule {n}: check the output of step {n} before the next one.\n" for n in range(150))


def as_json(data: Any) -> Any:
    """What a store gives back: the state as JSON reads it (tuples become lists, keys strings)."""
    return json.loads(json.dumps(data))


def entry(n: int) -> dict[str, Any]:
    """An entry shaped like `TokenPilot.export_session`'s, about 700 bytes."""
    cid = f"call_{n}"
    return {
        "raw_hash": f"{n:064x}",
        "ids": [cid],
        "frozen": {
            "role": "tool",
            "tool_call_id": cid,
            "content": f"step {n}: " + "".join(f"row {n}.{k} = {n * 7919 + k}\n" for k in range(20)),
        },
        "raw_tokens": 15000 + n,
        "tokens": 400 + n % 7,
        "artifact_id": f"art_{n:024x}",
        "effect": None,
        "call_infos": [],
        "unstored": False,
    }


def state(n: int, sid: str = "s") -> dict[str, Any]:
    """A proxy's saved state after `n` calls: the system prompt in three places, entries,
    and several lists and dicts that grow by one item per call."""
    return {
        "id": sid,
        "version": 1,
        "session": {
            "id": sid,
            "entries": [entry(k) for k in range(2 * n)],
            "system": {"stable": [[RULES, [], []]], "current": [[RULES, [], []]], "rendered": RULES},
            "state": {"seen": {f"art_{k:024x}": "exec" for k in range(n)}},
            "last_keys": [f"{k:020x}" for k in range(2 * n)][-40:],
            "calls_prepared": n,
        },
        "stats": {"calls": n, "series": [[k, k * 3, 0, 1.5] for k in range(n)], "hit_rate": 0.95},
        "writer": f"w:{n}",
    }


def fetcher(chunks: dict[str, str]) -> J.Fetch:
    return lambda digests: {d: chunks[d] for d in digests if d in chunks}


# ---------------------------------------------------------------------------
# The journal itself
# ---------------------------------------------------------------------------
def test_a_state_round_trips_and_the_system_prompt_is_stored_once():
    data = state(30)
    cut = J.split(data)
    head = json.loads(cut.head({"v": 7}))
    assert J.head_meta(head)["v"] == 7
    got, reached = J.join(head, fetcher(cut.chunks))
    assert got == as_json(data) and reached == set(cut.chunks)
    assert head["id"] == "s" and head["stats"]["calls"] == 30  # small fields stay readable in the head
    holding_rules = [d for d, t in cut.chunks.items() if RULES[:200] in json.loads(t)]
    assert len(holding_rules) == 1  # three places, one chunk
    assert len(cut.head()) < 2500


def test_each_save_writes_what_is_new_plus_a_head_of_bounded_size():
    """Saves that each add a call: the chunks written per save stay within twice the call's
    new content plus a constant, and the head does not grow with the session."""
    known: set[str] = set()
    written, added, heads = [], [], []
    size = len(json.dumps(state(20)))
    for n in range(21, 161):
        data = state(n)
        cut = J.split(data)
        new = cut.new_chunks(known)
        known |= set(cut.chunks)
        grown, size = len(json.dumps(data)) - size, len(json.dumps(data))
        if n > 40:
            written.append(sum(len(d) + len(t) for d, t in new.items()))
            added.append(grown)
            heads.append(len(cut.head()))
    mean_written, mean_added = sum(written) / len(written), sum(added) / len(added)
    assert mean_written <= 2 * mean_added + 2048, (mean_written, mean_added)
    assert max(heads) < 4096 and heads[-1] <= heads[0] + 512, (heads[0], max(heads), heads[-1])


def test_a_read_decodes_only_the_entry_blocks_it_has_not_decoded_before():
    """Replicas taking turns each read the other's state at every call: the blocks of
    history entries they decoded before come back as the same objects (read only), the
    new ones decoded, and the state is equal to a decode from scratch."""
    cut = J.split(state(40))
    first, _ = J.join(json.loads(cut.head()), fetcher(cut.chunks))
    later = state(41)
    later["session"]["entries"][10]["tokens"] = 1  # an entry rewritten (a history the caller changed)
    grown = J.split(later)
    again, _ = J.join(json.loads(grown.head()), fetcher(grown.chunks))
    assert again == as_json(later)
    old, new = first["session"]["entries"], again["session"]["entries"]
    shared = sum(a is b for a, b in zip(old, new))
    assert shared >= 60, shared
    assert new[10] is not old[10] and new[10]["tokens"] == 1  # its block decoded anew
    JM._ENTRY_BLOCKS.__init__()  # forget every block: the same state, decoded from scratch
    fresh, _ = J.join(json.loads(grown.head()), fetcher(grown.chunks))
    assert fresh == again and not any(a is b for a, b in zip(fresh["session"]["entries"], new))


def test_the_decoded_blocks_held_are_bounded_by_the_chars_they_keep_alive():
    blocks = JM._DecodedBlocks(max_chars=8000)
    for k in range(10):
        blocks.remember(f"d{k}", [{"content": "x" * 990}])  # about 1,000 chars each
    assert blocks.get("d0") is None and blocks.get("d9") is not None
    assert sum(blocks.get(f"d{k}") is not None for k in range(10)) <= 8
    blocks.remember("big", [{"content": "y" * 2000}])  # over an eighth of the budget: not held
    assert blocks.get("big") is None and blocks.get("d9") is not None


def test_chunks_are_the_same_in_every_process():
    """Two replicas that take turns on a session cut it the same way (no salted hash)."""
    cut = J.split(state(40))
    code = (
        "import json, sys; sys.path[:0] = ['tests', '.']; from test_journal import state; "
        "from tokenpilot.store import journal as J; c = J.split(state(40)); "
        "print(json.dumps([c.head(), sorted(c.chunks)]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [cut.head(), sorted(cut.chunks)]


def test_an_interpreter_without_jsons_c_encoder_cuts_the_same_chunks():
    """The pure-Python fallback writes the same text, so mixed replicas still agree."""
    cut = J.split(state(40))
    code = (
        "import json, json.encoder, sys; json.encoder.c_make_encoder = None; "
        "sys.path[:0] = ['tests', '.']; from test_journal import state; "
        "from tokenpilot.store import journal as J; c = J.split(state(40)); "
        "print(json.dumps([c.head(), sorted(c.chunks)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [cut.head(), sorted(cut.chunks)]


def test_a_missing_chunk_is_an_error_not_a_partial_state():
    cut = J.split(state(30))
    missing = sorted(cut.chunks)[0]
    chunks = {d: t for d, t in cut.chunks.items() if d != missing}
    with pytest.raises(J.JournalError, match=missing):
        J.join(json.loads(cut.head()), fetcher(chunks))


def test_a_reader_that_holds_a_chunk_parsed_checks_it_by_name_and_a_lost_one_is_an_error():
    cut, grown = J.split(state(30)), J.split(state(31))
    JM._CHUNKS.__init__()  # this process holds no chunk (a split offers its own)
    J.join(json.loads(cut.head()), fetcher(cut.chunks))  # now it holds the first state's
    asked: list[tuple[list[str], list[str]]] = []

    def read(wanted, held):
        asked.append((wanted, held))
        return {d: grown.chunks[d] for d in wanted}, []

    got, _ = J.join(json.loads(grown.head()), fetcher({}), read=read)
    assert got == as_json(state(31))
    wanted = {d for w, _ in asked for d in w}
    held = {d for _, h in asked for d in h}
    assert wanted == set(grown.chunks) - set(cut.chunks) and wanted  # only what is new is sent
    assert held == set(grown.chunks) & set(cut.chunks)  # the rest is checked by name
    lost = sorted(held)[0]
    with pytest.raises(J.JournalError, match=lost):  # the store lost a chunk this process holds
        J.join(
            json.loads(grown.head()), fetcher({}), read=lambda w, h: ({d: grown.chunks[d] for d in w}, [lost])
        )


def test_a_redis_replica_notices_a_chunk_the_store_lost_though_it_holds_it(redis_url):
    from tokenpilot.store.redis import RedisStore

    url = _namespaced(redis_url)
    a, b = RedisStore(url), RedisStore(url)
    v = a.save_state("s", state(30), expect=0)
    assert b.load_state("s") == (v, as_json(state(30)))  # b now holds every chunk parsed
    digests = [d.decode() for d in a._r.hkeys(a._k("j", "s"))]
    a._r.hdel(a._k("j", "s"), digests[0])
    with pytest.raises(J.JournalError, match=digests[0]):
        b.load_state("s")
    JM._CHUNKS.__init__()  # a process that holds none: it asks for every text, and one is gone
    with pytest.raises(J.JournalError, match=digests[0]):
        RedisStore(url).load_state("s")


def test_a_whole_state_of_the_old_layout_is_not_a_head():
    assert not J.is_head(as_json(state(3)))
    with pytest.raises(J.JournalError):
        J.join(as_json(state(3)), fetcher({}))


_keys = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["\x00s", "\x00l", "\x00o", "\x00journal", "\x00", "\x00\x00x", "d", "v"]),
)
_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=40),
        st.sampled_from(["\udc80 lone", "x" * 60]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=30), st.dictionaries(_keys, inner, max_size=30)),
    max_leaves=120,
)


@given(st.dictionaries(_keys, _json, max_size=8))
@settings(max_examples=80, deadline=None)
def test_any_json_state_round_trips_even_with_tiny_blocks(data):
    """Keys that look like references, lone surrogates, nesting: what comes back is what
    JSON would give back, with limits small enough that every path cuts chunks."""
    saved = {k: getattr(J, k) for k in ("STR_MIN", "SMALL", "_MANY")}
    saved_blocks = {k: getattr(JB, k) for k in ("TARGET", "MAX_BLOCK", "_SCALE")}
    try:
        J.STR_MIN, J.SMALL, J._MANY = 20, 16, 3
        JB.TARGET, JB.MAX_BLOCK = 16, 64
        JB._SCALE = 2**32 // JB.TARGET
        cut = J.split(data)
        got, _ = J.join(json.loads(cut.head({"v": 1})), fetcher(cut.chunks))
    finally:
        for k, v in saved_blocks.items():
            setattr(JB, k, v)
        for k, v in saved.items():
            setattr(J, k, v)
    assert got == as_json(data)


# ---------------------------------------------------------------------------
# Both backends
# ---------------------------------------------------------------------------
def _namespaced(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}namespace=journal-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["disk", "disk-shared", "redis"])
def make_store(request, tmp_path) -> Callable[[], Store]:
    if request.param.startswith("disk"):
        shared = request.param == "disk-shared"
        return lambda: DiskStore(ArtifactStore(tmp_path / "a"), tmp_path / "state", shared=shared)
    from tokenpilot.store.redis import RedisStore

    url = _namespaced(request.getfixturevalue("redis_url"))
    return lambda: RedisStore(url)


def test_two_processes_taking_turns_read_each_others_states_and_write_only_what_is_new(make_store):
    a, b = make_store(), make_store()
    if not a.shared:
        pytest.skip("one process owns a folder that is not shared")
    version, sent = 0, []
    for n in range(1, 41):
        writer = (a, b)[n % 2]
        if version:
            got = writer.load_state("s")
            assert got == (version, as_json(state(n - 1)))
        before = _written(writer)
        version = writer.save_state("s", state(n), expect=version)
        sent.append(_written(writer) - before)
    assert a.load_state("s") == (version, as_json(state(40)))
    full = len(json.dumps(state(40)))
    assert max(sent[10:]) < full / 4, (sent, full)


def test_a_stats_view_reads_each_head_and_only_the_chunks_its_fields_reach(make_store, monkeypatch):
    """`load_states(fields)`: what `/metrics` and `/tokenpilot/stats` read of every stored
    session. The fields come back as a whole read has them, and no chunk of a session's
    history is read (it decoded every state whole, per scrape)."""
    store = make_store()
    version = 0
    for sid in ("s", "t"):
        version = store.save_state(sid, state(60, sid), expect=0 if store.shared else None)
    whole = {d["id"]: d for _, d in make_store().load_states()}
    asked: list[str] = []
    if hasattr(store, "_r"):  # Redis: every chunk read is an HMGET on a journal key
        real = store._r.hmget

        def hmget(key, names, *args):
            if ":j:" in (key.decode() if isinstance(key, bytes) else key):
                asked.extend(names)
            return real(key, names, *args)

        reader = make_store()
        monkeypatch.setattr(reader._r, "hmget", hmget)
    else:  # disk: chunks come from the journal file, through one reader per head
        from tokenpilot.store import state_files

        real_reader = state_files._journal_reader

        def journal_reader(path, length):
            fetch = real_reader(path, length)
            return lambda digests: (asked.extend(digests), fetch(digests))[1]

        monkeypatch.setattr(state_files, "_journal_reader", journal_reader)
        reader = make_store()
    got = {d["id"]: d for _, d in reader.load_states(("stats",))}
    assert got == {sid: {"id": sid, "stats": whole[sid]["stats"]} for sid in ("s", "t")}
    head = json.loads(J.split(state(60)).head())
    reach = J.reachable({J.META: {}, "stats": head["stats"]}, fetcher(J.split(state(60)).chunks))
    history = set(J.split(state(60)).chunks) - reach
    assert history and not history & set(asked), "a stats read fetched the history"
    assert version


def _written(store: Store) -> int:
    files = getattr(store, "files", None)
    return files.bytes_written if files is not None else store.bytes_written  # type: ignore[attr-defined]


def test_a_stale_writer_is_refused_and_writes_nothing(make_store):
    store, other = make_store(), make_store()
    if not store.shared:
        pytest.skip("one process: versions are counted in memory")
    v1 = store.save_state("s", state(3), expect=0)
    v2 = other.save_state("s", state(4), expect=v1)
    size = _stored_size(store, "s")
    with pytest.raises(StateConflict):
        store.save_state("s", state(5), expect=v1)
    assert _stored_size(store, "s") == size
    assert store.load_state("s") == (v2, as_json(state(4)))


def _stored_size(store: Store, sid: str) -> int:
    files = getattr(store, "files", None)
    if files is not None:
        return sum(p.stat().st_size for p in files.path.iterdir() if not p.name.endswith(".lock"))
    r = store._r  # type: ignore[attr-defined]
    return sum(r.memory_usage(k) or 0 for k in (store._k("s", sid), store._k("j", sid)))  # type: ignore[attr-defined]


def test_closing_a_session_collects_the_chunks_its_head_no_longer_reaches(make_store):
    store = make_store()
    for n in range(1, 60):
        store.save_state("s", state(n) | {"writer": "x" * (n * 50)}, expect=None)
    store.close_session("s")
    version, data = store.load_state("s")  # type: ignore[misc]
    assert data == as_json(state(59) | {"writer": "x" * 2950})
    held = _chunks_held(store, "s")
    assert held == set(J.split(data).chunks)


def _chunks_held(store: Store, sid: str) -> set[str]:
    files = getattr(store, "files", None)
    if files is not None:
        (jnl,) = files.path.glob(f"{files.file_for(sid).stem}.*.jnl")
        return {line.split(" ", 1)[0] for line in jnl.read_text().splitlines()} - {"H"}  # H: a head
    return {k.decode() for k in store._r.hkeys(store._k("j", sid))}  # type: ignore[attr-defined]


def test_a_long_session_keeps_its_journal_bounded(make_store, monkeypatch):
    """Every save supersedes some chunks (the open blocks): they are collected as it goes
    (with the slack made small, so a short session shows it)."""
    from tokenpilot.store import state_files

    monkeypatch.setattr(state_files, "_SLACK", 8 * 1024)
    if "redis" in str(type(make_store())):
        from tokenpilot.store import redis as store_redis

        monkeypatch.setattr(store_redis, "_COLLECT_SLACK", 8)
    store = make_store()
    ever: set[str] = set()
    for n in range(1, 121):
        store.save_state("s", state(n), expect=None)
        ever |= set(J.split(state(n)).chunks)
    live = J.split(state(120)).chunks
    held = _chunks_held(store, "s")
    assert live.keys() <= held and len(held) < len(ever)  # collected, and nothing live lost
    files = getattr(store, "files", None)
    if files is not None:
        live_bytes = sum(len(d) + len(t) + 2 for d, t in live.items())
        (jnl,) = files.path.glob("*.jnl")
        assert jnl.stat().st_size <= 2 * live_bytes + 8 * 1024
    else:
        assert len(held) <= 2 * len(live) + 8
    assert store.load_state("s")[1] == as_json(state(120))  # type: ignore[index]


# ---------------------------------------------------------------------------
# Disk: a crash between the chunks and the head, the old layout
# ---------------------------------------------------------------------------
def test_a_crash_between_the_chunks_and_the_head_loses_nothing(tmp_path, monkeypatch):
    files = StateFiles(tmp_path)
    files.save("s", state(5), 1)

    def crash(self: StateFiles, target: Path, head: bytes) -> None:
        raise OSError("killed after the journal's append, before the head's copy")

    monkeypatch.setattr(StateFiles, "_write_copy", crash)
    with pytest.raises(OSError):
        files.save("s", state(6), 2)
    monkeypatch.undo()
    (jnl,) = tmp_path.glob("*.jnl")
    fresh = StateFiles(tmp_path)  # a restarted process: the copy's head counts, whole
    assert fresh.version("s") == 1 and fresh.load_versioned("s") == (1, as_json(state(5)))
    with open(jnl, "ab") as f:
        f.write(b"0123 half a rec")  # and a record torn by a crash in the middle of an append
    fresh.save("s", state(7), 2)
    assert StateFiles(tmp_path).load_versioned("s") == (2, as_json(state(7)))
    assert b"half a rec" not in jnl.read_bytes()  # cut back before the append


def test_a_torn_copy_of_the_head_falls_back_on_the_journal(tmp_path):
    files = StateFiles(tmp_path)
    files.save("s", state(5), 1)
    files.save("s", state(6), 2)
    copy = files.file_for("s")
    whole = copy.read_bytes()
    for torn in (whole[: len(whole) // 2], whole + b"]}", b""):  # half written, a longer old tail, empty
        copy.write_bytes(torn)
        again = StateFiles(tmp_path)
        assert again.version("s") == 2 and again.load_versioned("s") == (2, as_json(state(6)))
    again.save("s", state(7), 3)  # and the next save writes on from there
    assert StateFiles(tmp_path).load_versioned("s") == (3, as_json(state(7)))
    assert json.loads(copy.read_bytes())["id"] == "s"


def test_states_of_the_old_layout_load_and_their_next_save_writes_the_journal(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir()
    files = StateFiles(folder)
    old = files.file_for("s")
    old.write_text(json.dumps(state(4), ensure_ascii=True))  # as the store wrote it before
    old.with_suffix(".ver").write_text("9")
    store = DiskStore(ArtifactStore(tmp_path / "a"), folder, shared=True)
    assert store.state_version("s") == 9 and store.load_state("s") == (9, as_json(state(4)))
    assert [v for v, _ in store.load_states()] == [9]
    assert [d for _, d in store.load_states(("stats",))] == [{"id": "s", "stats": as_json(state(4)["stats"])}]
    assert store.save_state("s", state(5), expect=9) == 10
    assert not old.with_suffix(".ver").exists() and J.is_head(json.loads(old.read_text()))
    again = DiskStore(ArtifactStore(tmp_path / "a"), folder, shared=True)
    assert again.load_state("s") == (10, as_json(state(5)))
    assert [d["id"] for d in StateFiles(folder).load_all()] == ["s"]  # doctor's reader


def test_a_head_without_its_journal_is_skipped_with_a_warning(tmp_path, caplog):
    files = StateFiles(tmp_path)
    files.save("s", state(5), 1)
    for p in tmp_path.glob("*.jnl"):
        p.unlink()
    assert files.load("s") is None and list(files.load_all()) == []
    assert "skipping" in caplog.text


# ---------------------------------------------------------------------------
# Redis: the old layout (keys without hash tags)
# ---------------------------------------------------------------------------
def test_redis_states_and_originals_of_the_old_layout_still_load(redis_url):
    from tokenpilot.store.redis import RedisStore

    store = RedisStore(_namespaced(redis_url))
    r, ns, h = store._r, store.namespace, b"s".hex()
    text = "an original stored before the hash tags\n" * 40
    aid = "art_" + "ab" * 12
    r.hset(f"{ns}:s:{h}", mapping={"v": 6, "d": json.dumps(state(4))})
    r.set(f"{ns}:a:{h}:{aid}", text)
    r.sadd(f"{ns}:as:{h}", aid)
    r.zadd(f"{ns}:leases", {h: 1.0})
    r.incrby(f"{ns}:volume", len(text))
    assert store.state_version("s") == 6 and store.load_state("s") == (6, as_json(state(4)))
    assert [v for v, _ in store.load_states()] == [6]
    assert [d for _, d in store.load_states(("stats",))] == [{"id": "s", "stats": as_json(state(4)["stats"])}]
    assert store.get("s", aid) == text and list(store.artifact_ids("s")) == [aid]
    assert store.save_state("s", state(5), expect=6) == 7
    assert not r.exists(f"{ns}:s:{h}") and store.load_state("s") == (7, as_json(state(5)))
    assert store.get("s", aid) == text  # the original stays where it was
    store.size_limit_bytes = 0
    store.close_session("s")
    assert store.prune() == 1  # old and new keys go together
    assert not r.exists(f"{ns}:a:{h}:{aid}") and store.load_state("s") is None
    assert store.volume() == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 700), min_size=2, max_size=160),
    cuts=st.lists(st.integers(1, 160), min_size=1, max_size=4),
    edit=st.none() | st.integers(0, 159),
)
def test_a_list_split_again_as_it_grows_is_cut_as_if_afresh(monkeypatch, sizes, cuts, edit):
    """`_ListCuts` reuses the blocks of a growing list's unchanged prefix: every split of a
    longer (or edited) list is byte for byte what splitting it with no memory gives."""
    sealed = [J.Sealed({"n": k, "text": "x" * size}) for k, size in enumerate(sizes)]
    for n in sorted(set(min(c, len(sealed)) for c in cuts)) + [len(sealed)]:
        items = list(sealed[:n])
        if edit is not None and edit < n and n == len(sealed):
            items[edit] = J.Sealed({"n": -1, "text": "edited"})  # a rewrite inside the prefix
        got = J.split({"entries": items})
        with monkeypatch.context() as m:  # the same list cut with no memory of earlier splits
            m.setattr(J, "_LIST_CUTS", JM._ListCuts())
            m.setattr(J, "_SEALED", JM._SealedTexts())
            m.setattr(J, "_RUNS", JM._SealedRuns())
            fresh = J.split({"entries": [J.Sealed(dict(x)) for x in items]})
        assert (got.body, got.chunks) == (fresh.body, fresh.chunks)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.lists(
        st.one_of(st.integers(-5, 10**6), st.text("ab\x00\u00e9", max_size=12)), min_size=2, max_size=400
    ),
    cuts=st.lists(st.integers(1, 400), min_size=1, max_size=4),
    edit=st.none() | st.integers(0, 399),
)
def test_a_list_of_texts_made_anew_at_each_save_is_cut_as_if_afresh(monkeypatch, values, cuts, edit):
    """The cut memo finds a grown list by its texts' values: lists of short strings and
    numbers (turn ids, digests, series) are new objects at every save. Their split is byte
    for byte what splitting with no memory gives, also after an edit inside the prefix or
    a list that shrank."""
    for n in [min(c, len(values)) for c in cuts] + [len(values)]:
        items = [json.loads(json.dumps(v)) for v in values[:n]]  # new objects every time
        if edit is not None and edit < n and n == len(values):
            items[edit] = "edited"
        got = J.split({"ids": items, "more": {"ids": items[::-1]}})
        with monkeypatch.context() as m:
            m.setattr(J, "_LIST_CUTS", JM._ListCuts())
            fresh = J.split({"ids": items, "more": {"ids": items[::-1]}})
        assert (got.body, got.chunks) == (fresh.body, fresh.chunks)


def test_a_save_of_a_grown_history_cuts_only_what_is_new(monkeypatch):
    """A history that only grew is taken from its last split: the entries held are not
    looked up one by one, and the lists beside it (made anew at each save) are cut from
    where they changed, not from their start."""
    monkeypatch.setattr(J, "_LIST_CUTS", JM._ListCuts())
    monkeypatch.setattr(J, "_SEALED", JM._SealedTexts())
    monkeypatch.setattr(J, "_RUNS", JM._SealedRuns())
    entries = [J.Sealed({"n": k, "text": f"entry {k} " * 40}) for k in range(300)]
    ids = [f"t_{k:012x}" for k in range(300)]
    J.split({"entries": entries, "ids": list(ids)})
    looked_up, cut = [], []
    sealed_get, blocks = JM._SealedTexts.get, JM._blocks
    monkeypatch.setattr(JM._SealedTexts, "get", lambda self, v: looked_up.append(v) or sealed_get(self, v))
    monkeypatch.setattr(JM, "_blocks", lambda texts, m=1: cut.append(len(texts)) or blocks(texts, m))
    grown = entries + [J.Sealed({"n": 300, "text": "new"})]
    got = J.split({"entries": grown, "ids": [(i + ".")[:-1] for i in ids] + ["t_new"]})  # new strings
    assert looked_up == [grown[-1]]  # only the new entry
    assert cut and max(cut) < 100, cut  # each list of 301 cut again from its open block only
    monkeypatch.setattr(J, "_LIST_CUTS", JM._ListCuts())
    monkeypatch.setattr(J, "_SEALED", JM._SealedTexts())
    monkeypatch.setattr(J, "_RUNS", JM._SealedRuns())
    fresh = J.split({"entries": [J.Sealed(dict(e)) for e in grown], "ids": ids + ["t_new"]})
    assert (got.body, got.chunks) == (fresh.body, fresh.chunks)
