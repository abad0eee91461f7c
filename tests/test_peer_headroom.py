"""Headroom as a bench peer: its own proxy, offline, priced like every other method."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenpilot.measure.bench.peers import headroom as peer

pytestmark = pytest.mark.skipif(
    peer.missing() is not None, reason=f"Headroom peer cannot run: {peer.missing()}"
)

TRACES = Path("/work/shared/traces")
ROWS = [
    {"id": i, "name": f"item{i}", "status": "error" if i % 7 == 0 else "ok", "value": i * 3.5}
    for i in range(300)
]
BIG_JSON = json.dumps(ROWS)
BIG_LOG = "\n".join(f"2024-01-01 12:00:{i % 60:02d} INFO worker {i} processed batch ok" for i in range(400))
BIG_LOG += "\nERROR: disk full at worker 399"


def _call(i: int, name: str, args: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}],
    }


def _session(sid: str = "inline"):
    from tokenpilot.measure.traces.model import RecordedCall, Session

    msgs = [
        {"role": "system", "content": "You are a careful operations assistant."},
        {"role": "user", "content": "Which items are in error, and why did the batch job stop?"},
        _call(1, "list_items", "{}"),
        {"role": "tool", "tool_call_id": "c1", "content": BIG_JSON},
        _call(2, "bash", '{"cmd": "cat worker.log"}'),
        {"role": "tool", "tool_call_id": "c2", "content": BIG_LOG},
        {
            "role": "assistant",
            "content": "Items 0, 7, 14 are in error; the job stopped: disk full at worker 399.",
        },
    ]
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
        for n in ("list_items", "bash")
    ]
    calls = [
        RecordedCall(0, 2, timestamp=0.0),
        RecordedCall(0, 4, timestamp=5.0),
        RecordedCall(0, 6, timestamp=9.0),
    ]
    return Session(sid, "inline", "openai", msgs, tools, calls)


def _render_all(session) -> list:
    method = peer.Headroom()
    ms = method.session(session.id)
    try:
        return [ms.render(session.prompt(c), session.tools, c.timestamp) for c in session.calls]
    finally:
        ms.close()


@pytest.fixture(scope="module")
def rendered():
    return _render_all(_session())


def _tool_texts(r) -> list[str]:
    return [m["content"] for m in r.messages if m.get("role") == "tool"]


def test_big_outputs_are_compressed_by_headroom(rendered):
    """SmartCrusher turns the JSON array into its typed table; the log compressor keeps
    the error and leaves a CCR marker that the retrieve tool can redeem."""
    table, log = _tool_texts(rendered[-1])
    assert table != BIG_JSON and table.lstrip('"').startswith(
        "[300]{id:int,name:string,status:string,value:float}"
    )
    assert len(table) < len(BIG_JSON)
    assert "ERROR: disk full at worker 399" in log and len(log) < len(BIG_LOG) / 10
    assert "Retrieve more: hash=" in log
    assert "headroom_retrieve" in [t["function"]["name"] for t in rendered[-1].tools]


def test_markers_are_recallable_originals(rendered):
    last = rendered[-1]
    assert last.artifact_ids
    method = peer.Headroom()
    session = _session("recall")
    ms = method.session(session.id)
    try:
        for c in session.calls:
            r = ms.render(session.prompt(c), session.tools, c.timestamp)
        (aid,) = r.artifact_ids
        original = json.loads(ms.recall_text(aid))["original_content"]
        assert original == BIG_LOG
        assert ms.recall_text("0" * 24) is None
    finally:
        ms.close()


def test_deterministic(rendered):
    again = _render_all(_session())
    dump = [json.dumps([r.messages, r.tools], sort_keys=True) for r in rendered]
    assert dump == [json.dumps([r.messages, r.tools], sort_keys=True) for r in again]


def test_notes_say_what_ran():
    method = peer.Headroom()
    session = _session()
    ms = method.session(session.id)
    for c in session.calls:
        ms.render(session.prompt(c), session.tools, c.timestamp)
    ms.close()
    notes = "\n".join(method.notes())
    assert "router:smart_crusher" in notes and "router:log" in notes
    assert "Kompress" in notes  # its ONNX model cannot be fetched offline


def test_replay_prices_it_and_charges_recalls():
    from tokenpilot.measure.bench.methods import Vanilla
    from tokenpilot.measure.bench.replay import replay

    sessions = [_session()]
    hr = replay(sessions, peer.Headroom()).record()
    van = replay(sessions, Vanilla()).record()
    assert hr["method"] == "headroom" and hr["calls"] == 3
    assert hr["peak_context_tokens"] < van["peak_context_tokens"]
    assert hr["cost_usd"] != van["cost_usd"]
    # what the answer quotes (the error line, the error rows) survives compression
    assert hr["recoverable"] == 1.0 and hr["recalls_charged"] == 0


def _first_trace_folder() -> Path | None:
    for name in ("openclaw_pinchbench", "swe_agent"):
        if (TRACES / name).is_dir():
            return TRACES / name
    return None


@pytest.mark.skipif(_first_trace_folder() is None, reason="no shared traces on this machine")
def test_runs_on_a_real_trace_folder():
    from tokenpilot.measure.bench.replay import replay
    from tokenpilot.measure.traces import load

    folder = _first_trace_folder()
    sessions = load(str(folder))[:2]
    method = peer.Headroom()
    rec = replay(sessions, method).record()
    assert rec["calls"] == sum(len(s.calls) for s in sessions) > 0
    assert rec["cost_usd"] > 0
    assert method.requests == rec["calls"]


def test_cli_methods_can_name_the_peer(tmp_path):
    from tokenpilot.cli import main

    out = tmp_path / "r.json"
    assert main(["bench", "--sessions", "1", "--methods", "vanilla,headroom", "--json", str(out)]) == 0
    records = json.loads(out.read_text())
    records = records.get("records", records) if isinstance(records, dict) else records
    assert [r["method"] for r in records] == ["vanilla", "headroom"]


def test_bench_records_and_prints_what_ran():
    """The peer's own account (which transforms ran, which could not) reaches the JSON
    record and the printed table."""
    from rich.console import Console

    from tokenpilot.measure.bench import print_table, run_bench

    (result,) = run_bench({"inline": [_session()]}, methods=lambda: [peer.Headroom()])
    rec = result.record()
    assert rec["notes"][0].startswith("headroom (cache mode) ran: ")
    assert any("Kompress" in n for n in rec["notes"])
    console = Console(record=True, width=100)
    print_table([result], console)
    assert "headroom (cache mode) ran: " in console.export_text()
