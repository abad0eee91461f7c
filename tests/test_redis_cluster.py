"""The Redis store on a real Redis Cluster: three `redis-server --cluster-enabled yes` on
loopback ports, joined by `redis-cli --cluster create`, started by this module (about
2 s). Every script of a session touches one slot (the hash tag `{h}`), so the contract
holds as on one server; redis-py refuses a script whose keys span slots, so a key
without the tag would fail here.

Skips when `redis-server` or `redis-cli` is not on PATH.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

redis = pytest.importorskip(
    "redis", reason="the Redis store needs the redis client: pip install 'tokenpilot[redis]'"
)
from redis.cluster import RedisCluster  # noqa: E402
from test_journal import as_json, state  # noqa: E402

from tokenpilot import StateConflict, StoreError  # noqa: E402
from tokenpilot._canonical import artifact_id_for  # noqa: E402
from tokenpilot.store.redis import RedisStore  # noqa: E402

NODES = 3


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _node_port(taken: set[int]) -> int:
    """A free port whose cluster bus port (+10000) is free and valid too."""
    for _ in range(1000):
        port = random.randrange(20000, 50000)
        if port not in taken and _free(port) and _free(port + 10000):
            taken.add(port)
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _wait(ok, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            raise RuntimeError(f"redis cluster: {what} within {timeout_s:.0f} s")
        time.sleep(0.05)


def _answers(port: int) -> bool:
    try:
        return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5).ping())
    except redis.RedisError:
        return False


def _state_ok(port: int) -> bool:
    try:
        info = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5).cluster("info")
    except redis.RedisError:
        return False
    if isinstance(info, dict):
        return info.get("cluster_state") == "ok"
    return "cluster_state:ok" in (info.decode() if isinstance(info, bytes) else str(info))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[str]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.skip("redis-server and redis-cli on PATH are needed for a local Redis Cluster")
    work: Path = tmp_path_factory.mktemp("cluster")
    taken: set[int] = set()
    ports = [_node_port(taken) for _ in range(NODES)]
    procs = []
    try:
        for port in ports:
            node = work / str(port)
            node.mkdir()
            procs.append(
                subprocess.Popen(
                    [
                        server,
                        "--port", str(port),
                        "--bind", "127.0.0.1",
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", "2000",
                        "--save", "",
                        "--appendonly", "no",
                    ],
                    cwd=node,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        for port in ports:
            _wait(lambda p=port: _answers(p), f"node {port} answering")
        created = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports), "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout}{created.stderr}")
        for port in ports:
            _wait(lambda p=port: _state_ok(p), f"node {port} seeing cluster_state:ok")
        yield f"redis://127.0.0.1:{ports[0]}/0?cluster=1"
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _store(url: str, **kw) -> RedisStore:
    return RedisStore(f"{url}&namespace=c{uuid.uuid4().hex[:8]}", **kw)


def test_the_url_option_makes_a_cluster_client(cluster):
    store = _store(cluster)
    assert store.cluster and isinstance(store._r, RedisCluster)
    assert not RedisStore(cluster.replace("cluster=1", "cluster=0")).cluster
    with pytest.raises(StoreError, match="bad Redis store URL"):
        RedisStore(cluster.replace("cluster=1", "cluster=maybe"))


def test_the_store_contract_holds_on_a_cluster(cluster):
    a, b = _store(cluster), None
    b = RedisStore(f"{cluster}&namespace={a.namespace}")
    text = "".join(f"line {n}: caf\u00e9 \ud800 {n * n}\n" for n in range(300))
    sid = "agent\ud800:main"
    aid = a.put(sid, text)
    assert aid == artifact_id_for(text) and b.get(sid, aid) == text and list(b.artifact_ids(sid)) == [aid]
    assert b.recall(sid, aid, pattern=r"line 29\d:").text.count("\n") == 10
    version = 0
    for n in range(1, 21):  # two replicas taking turns, each writing only what is new
        writer = (a, b)[n % 2]
        if version:
            assert writer.load_state(sid) == (version, as_json(state(n - 1, sid)))
        version = writer.save_state(sid, state(n, sid), expect=version)
    with pytest.raises(StateConflict):
        a.save_state(sid, state(21, sid), expect=version - 1)
    assert [d["id"] for _, d in a.load_states()] == [sid]
    with a.session_lock(sid), a.session_lock(sid):
        assert a.save_state(sid, state(21, sid), expect=version) == version + 1
    a.close_session(sid)
    assert a.load_state(sid) == (version + 1, as_json(state(21, sid)))
    a.size_limit_bytes = 0
    assert a.prune() == 1 and not a.recall(sid, aid).found and a.load_state(sid) is None
    assert a.volume() == 0


def test_every_key_of_a_session_is_in_the_slot_of_its_hash_tag(cluster):
    store = _store(cluster)
    sessions = [f"session-{n}" for n in range(12)]
    for sid in sessions:
        store.put(sid, f"the original of {sid}\n" * 50)
        many = [f"segment {k} of {sid}\n" for k in range(70)]  # an eviction's archives: two scripts
        assert [store.get(sid, aid) for aid in store.put_many(sid, many)] == many
        store.save_state(sid, state(5, sid), expect=0)
        with store.session_lock(sid):
            pass
    client = store._r
    keys = [k.decode() for k in client.keys(f"{store.namespace}:*", target_nodes=RedisCluster.PRIMARIES)]
    shared = {f"{store.namespace}:leases", f"{store.namespace}:volume"}
    slots: dict[str, set[int]] = {}
    for key in keys:
        if key in shared:
            continue
        tag = key[key.index("{") + 1 : key.index("}")]
        slots.setdefault(tag, set()).add(client.keyslot(key))
    assert len(slots) == len(sessions)
    for tag, found in slots.items():
        assert found == {client.keyslot("{" + tag + "}")}, (tag, found)
    kinds = {k.split(":")[1] for k in keys if k not in shared}
    assert kinds >= {"a", "as", "s", "j", "l"}
    nodes = {client.nodes_manager.get_node_from_slot(s.pop()).name for s in slots.values()}
    assert len(nodes) > 1  # the sessions are spread over the cluster's nodes


async def test_a_proxy_on_a_cluster_keeps_its_sessions_there(cluster):
    """`tokenpilot serve --store-url redis://...?cluster=1`: calls go through, their state
    and originals land in the cluster and read back."""
    import aiohttp

    from drills.crashdrill import TOOLS, system_prompt, tool_turn
    from tokenpilot_proxy import ProxySettings
    from tokenpilot_proxy.demo import FakeUpstream
    from tokenpilot_proxy.server import RunningProxy

    url = f"{cluster}&namespace=p{uuid.uuid4().hex[:8]}"
    history = [{"role": "system", "content": system_prompt("2026-12-02")}, {"role": "user", "content": "go"}]
    async with FakeUpstream() as upstream, aiohttp.ClientSession() as http:
        settings = ProxySettings(upstream=upstream.url, port=0, store_url=url, flush_interval_s=0)
        async with RunningProxy(settings) as proxy:
            for step in range(3):
                history += tool_turn(0, step)
                body = {"model": "m", "messages": history, "tools": TOOLS, "prompt_cache_key": "k"}
                async with http.post(f"{proxy.url}/v1/chat/completions", json=body) as r:
                    assert r.status == 200, await r.text()
    store = RedisStore(url)
    got = store.load_state("k")
    assert got is not None and got[1]["stats"]["calls"] == 3
    originals = [m["content"] for m in history if m["role"] == "tool"]
    assert sorted(store.get("k", a) for a in store.artifact_ids("k")) == sorted(originals)
