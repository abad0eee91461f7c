"""Estimators: offline heuristics, the paper's transcript.md example, the immediate
ablation, and the LLM estimator against a local fake OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from builders import Session

from tokenpilot.errors import ConfigError
from tokenpilot.estimator import (
    EstimatorView,
    ImmediateEstimator,
    LLMEstimator,
    OfflineEstimator,
    build_view,
    departs_from,
    extract_refs,
    is_continuation,
    parse_delta,
    records_for,
)
from tokenpilot.estimator.prompts import SYSTEM_PROMPT
from tokenpilot.lifecycle.schedule import Lifecycle, LifecycleConfig
from tokenpilot.messages.pairing import validate_pairing
from tokenpilot.messages.turns import segment_turns
from tokenpilot.registry import TaskRegistry
from tokenpilot.store.artifacts import ArtifactStore

# ---------------------------------------------------------------------------
# session builder
# ---------------------------------------------------------------------------


def drive(lc: Lifecycle, s: Session, extra_end: bool = True) -> list[list[dict]]:
    """Render at every model call, like the facade; return the rendered lists."""
    renders = []
    points = s.points + ([len(s.msgs)] if extra_end else [])
    for p in points:
        h = s.msgs[:p]
        lc.observe(h)
        out = lc.view(h).apply(h)
        assert validate_pairing(out) == []
        renders.append(out)
    return renders


def inline(estimator, batch: int = 3) -> tuple[Lifecycle, ArtifactStore]:
    store = ArtifactStore()
    cfg = LifecycleConfig(batch_turns=batch, schedule="inline", cost_gate=False)
    return Lifecycle(cfg, estimator, lambda text: store.put("s", text)), store


TRANSCRIPT = (
    "Panel on heliophysics. Speakers: Dan Evans, Nicola Fox, Karen Fox, Mike Freie, Paula.\n"
    + "Dan Evans: science is hypothesis driven ... \n" * 30
    + "Q&A section follows. Q: how do sensors work? A: ...\n" * 10
)


def transcript_session(extra_unrelated: bool = False) -> Session:
    """The paper's Figure 7: four tasks over one transcript.md."""
    s = Session()
    s.user("Summarize the speakers' key points from transcript.md into speaker_summary.md")
    s.call("read", {"path": "transcript.md"}, TRANSCRIPT)
    s.call("exec", {"command": "grep -n 'Speakers' transcript.md"}, "1: Speakers: Dan Evans, Nicola Fox")
    s.call("write", {"path": "speaker_summary.md", "content": "- Dan Evans: ..."}, "ok")
    s.final("Wrote speaker_summary.md with the key points of five speakers.")
    s.user("Extract the Q&A exchanges from transcript.md into qa_exchanges.md")
    s.call("read", {"path": "transcript.md", "offset": 214}, TRANSCRIPT[-600:])
    s.call("write", {"path": "qa_exchanges.md", "content": "Q: ..."}, "ok")
    s.final("Saved 10 Q&A exchanges to qa_exchanges.md.")
    s.user("Extract the recommendations from transcript.md into recommendations.md")
    s.call("exec", {"command": "grep -n recommend transcript.md"}, "603: we recommend more sensors")
    s.call("write", {"path": "recommendations.md", "content": "1. more sensors"}, "ok")
    s.final("Wrote recommendations.md.")
    s.user("List the data sources mentioned in transcript.md in data_sources.md")
    s.call("read", {"path": "transcript.md", "offset": 943}, TRANSCRIPT[:300])
    s.call("write", {"path": "data_sources.md", "content": "- NOAA\n- FAA"}, "ok")
    s.final("Wrote data_sources.md listing 2 data sources.")
    if extra_unrelated:
        unrelated_tail(s)
    return s


def unrelated_tail(s: Session) -> None:
    s.user("Write a haiku about autumn leaves into poem.txt")
    s.call("write", {"path": "poem.txt", "content": "Red leaves drift..."}, "ok")
    s.final("Wrote the haiku to poem.txt.")
    s.user("Compute the 30th Fibonacci number with fib.py")
    s.call("write", {"path": "fib.py", "content": "def fib(n): ..."}, "ok")
    s.call("exec", {"command": "python fib.py 30"}, "832040")
    s.final("The 30th Fibonacci number is 832040.")


def evicted_ids(lc: Lifecycle) -> set[str]:
    return {tid for seg in lc.segments for tid in seg.task_ids}


def task_of_turn(lc: Lifecycle, turn_id: str) -> str:
    return lc.registry.turn_owners()[turn_id][0]


# ---------------------------------------------------------------------------
# refs and heuristics
# ---------------------------------------------------------------------------


def test_extract_refs_finds_files_paths_urls_ids_and_identifiers():
    text = (
        "Open /home/u/proj/src/main.py and docs/guide.md, see https://example.com/a?b=1. "
        "Artifact art_0123456789abcdef01234567 holds it; TaskRegistry and load_config_file "
        "call parse() with id 48213 in report.csv (and/or it). x_y and Foo are too short; 123 too."
    )
    refs = extract_refs(text)
    for want in (
        "/home/u/proj/src/main.py",
        "main.py",
        "docs/guide.md",
        "guide.md",
        "https://example.com/a?b=1",
        "art_0123456789abcdef01234567",
        "TaskRegistry",
        "load_config_file",
        "48213",
        "report.csv",
    ):
        assert want in refs, want
    for unwanted in ("and/or", "x_y", "Foo", "123", "parse"):
        assert unwanted not in refs, unwanted
    loose = extract_refs(text, identifiers=False)
    assert "TaskRegistry" not in loose and "48213" not in loose and "report.csv" in loose


@pytest.mark.parametrize(
    "text",
    [
        "also add tests",
        "Now fix that",
        "it still fails",
        "ok",
        "thanks!",
        "Instead use tabs",
        "make it shorter",
    ],
)
def test_continuations(text):
    assert is_continuation(text)
    assert not departs_from(text, "Refactor the parser in parser.py")


def test_new_request_departs_and_restatement_does_not():
    objective = "Summarize the speakers' key points from transcript.md into speaker_summary.md"
    assert departs_from("Extract the Q&A exchanges from transcript.md into qa_exchanges.md", objective)
    assert departs_from("Write a haiku about autumn", objective)
    assert not departs_from("Summarize the speakers key points from transcript.md", objective)


def test_turn_records_capture_delivery_signals():
    s = Session().user("Save notes to notes.md")
    s.call("write", {"path": "notes.md", "content": "x"}, "ok")
    s.call("edit", {"file_path": "other.md", "old": "a", "new": "b"}, "Error: file not found")
    s.final("Saved notes.md. Should I also update other.md?")
    turns = segment_turns(s.msgs)
    recs = records_for(s.msgs, turns)
    assert recs[0].wrote == ("notes.md",) and recs[0].user == "Save notes to notes.md"
    assert recs[1].wrote == ()  # the failed edit is no evidence
    assert recs[2].final and recs[2].question == "Should I also update other.md?"
    assert not recs[0].final and recs[0].tool_calls[0].name == "write"
    long = Session().user("x" * 5000)
    long.call("read", {"path": "big.txt"}, "y" * 5000)
    rec = records_for(long.msgs, segment_turns(long.msgs))[0]
    assert len(rec.user) <= 400 and all(len(r) <= 400 for r in rec.tool_results)


# ---------------------------------------------------------------------------
# offline estimator over whole sessions
# ---------------------------------------------------------------------------


def test_transcript_scenario_keeps_task_ones_reading():
    lc, _ = inline(OfflineEstimator())
    s = transcript_session()
    renders = drive(lc, s)
    tasks = lc.registry.tasks
    assert len(tasks) == 4
    assert [t.lifecycle for t in tasks[:3]] == ["completed"] * 3
    assert lc.stats["evictions"] == 0 and evicted_ids(lc) == set()
    # Task 1's read of transcript.md is still in the last rendered view, verbatim.
    read_result = next(m for m in s.msgs if m.get("role") == "tool" and m["content"] == TRANSCRIPT)
    assert read_result in renders[-1]


def test_transcript_scenario_with_immediate_estimator_evicts_task_one():
    lc, store = inline(ImmediateEstimator())
    s = transcript_session()
    renders = drive(lc, s)
    first_task = lc.registry.tasks[0]
    assert first_task.title.startswith("Summarize the speakers")
    assert first_task.lifecycle == "evictable" and first_task.task_id in evicted_ids(lc)
    read_result = next(m for m in s.msgs if m.get("role") == "tool" and m["content"] == TRANSCRIPT)
    assert read_result not in renders[-1]
    seg = next(seg for seg in lc.segments if first_task.task_id in seg.task_ids)
    assert seg.stub in renders[-1]
    assert json.loads(store.recall("s", seg.artifact_id).text) == s.msgs[seg.start : seg.end]


def test_transcript_tasks_are_released_once_the_session_moves_away_from_the_file():
    lc, _ = inline(OfflineEstimator())
    drive(lc, transcript_session(extra_unrelated=True))
    by_title = {t.title.split()[0]: t for t in lc.registry.tasks}
    assert by_title["Summarize"].lifecycle == "evictable"
    assert by_title["List"].lifecycle == "evictable"
    assert by_title["Compute"].lifecycle != "evictable"


def test_unrelated_finished_task_is_evicted_once_a_new_task_takes_over():
    s = Session()
    s.user("Write a haiku about autumn leaves into poem.txt")
    s.call("write", {"path": "poem.txt", "content": "Red leaves drift..."}, "ok")
    s.final("Wrote the haiku to poem.txt.")
    s.user("Compute the 30th Fibonacci number with fib.py")
    s.call("write", {"path": "fib.py", "content": "def fib(n): ..."}, "ok")
    s.call("exec", {"command": "python fib.py 30"}, "832040")
    lc, _ = inline(OfflineEstimator(), batch=2)
    renders = drive(lc, s)
    poem, fib = lc.registry.tasks
    assert poem.lifecycle == "evictable" and fib.lifecycle == "active"
    assert "no later task" in poem.evictable_reason or "later tasks use none" in poem.evictable_reason
    assert evicted_ids(lc) == {poem.task_id}
    assert not any(m.get("content") == "Write a haiku about autumn leaves into poem.txt" for m in renders[-1])


def test_continuation_stays_in_the_same_task():
    s = Session()
    s.user("Write a haiku about autumn leaves into poem.txt")
    s.call("write", {"path": "poem.txt", "content": "Red leaves drift..."}, "ok")
    s.final("Wrote the haiku to poem.txt.")
    s.user("Also add a title line")
    s.call("edit", {"path": "poem.txt", "content": "Autumn\n..."}, "ok")
    s.final("Added the title.")
    lc, _ = inline(OfflineEstimator(), batch=2)
    drive(lc, s)
    (task,) = lc.registry.tasks
    assert task.lifecycle == "completed" and len(task.turn_ids) == 4


def test_active_and_blocked_tasks_are_never_evicted():
    s = Session()
    s.user("Rename the config loader in settings.py")  # active: ends with a pending tool call round
    s.call("read", {"path": "settings.py"}, "def load(): ...")
    s.user("Translate the README into German")  # blocked: ends by asking the user
    s.call("read", {"path": "README.md"}, "# Project")
    s.final("Which dialect do you want?")
    s.user("Draft a tweet announcing version 2 of the mobile app for the launch")
    s.final("Version 2 is out!")
    s.user("Now compute 17 factorial in Python")
    s.call("exec", {"command": "python -c 'import math; print(math.factorial(17))'"}, "355687428096000")
    s.final("17! = 355687428096000")
    for est in (OfflineEstimator(), ImmediateEstimator()):
        lc, _ = inline(est, batch=1)
        drive(lc, s)
        life = {t.title.split()[0]: t.lifecycle for t in lc.registry.tasks}
        assert life["Rename"] == "active" and life["Translate"] == "blocked", life
        owned = {tid for t in lc.registry.tasks if t.lifecycle != "evictable" for tid in t.turn_ids}
        assert not owned & {tid for seg in lc.segments for tid in seg.turn_ids}
        assert life["Draft"] == "evictable"


def test_offline_estimator_is_deterministic():
    s = transcript_session(extra_unrelated=True)
    turns = segment_turns(s.msgs)
    reg = TaskRegistry()
    reg.note_turns(t.turn_id for t in turns)
    recs = records_for(s.msgs, turns)
    view = build_view(reg, recs, {r.turn_id: r for r in recs})
    assert OfflineEstimator().estimate(view) == OfflineEstimator().estimate(view)


# ---------------------------------------------------------------------------
# LLM estimator against a fake OpenAI-compatible server
# ---------------------------------------------------------------------------


class FakeOpenAI:
    """A scripted chat-completions endpoint on 127.0.0.1 (stdlib only)."""

    def __init__(self, script: list[dict]) -> None:
        self.script = list(script)
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                step = fake.script.pop(0) if len(fake.script) > 1 else fake.script[0]
                time.sleep(step.get("sleep", 0))
                status = step.get("status", 200)
                if status != 200:
                    payload = {"error": {"message": "boom", "type": "server_error"}}
                else:
                    payload = {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "m"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": step.get("content", "")},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                raw = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:  # the client gave up (timeout test)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_server(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    servers = []

    def start(*script: dict) -> FakeOpenAI:
        srv = FakeOpenAI(list(script))
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()


def small_view() -> tuple[EstimatorView, TaskRegistry, list[str]]:
    s = Session()
    s.user("Write a haiku about autumn leaves into poem.txt")
    s.call("write", {"path": "poem.txt", "content": "..."}, "ok")
    s.final("Wrote the haiku to poem.txt.")
    turns = segment_turns(s.msgs)
    reg = TaskRegistry()
    reg.note_turns(t.turn_id for t in turns)
    recs = records_for(s.msgs, turns)
    return build_view(reg, recs, {r.turn_id: r for r in recs}), reg, [t.turn_id for t in turns]


def good_reply(ids: list[str], base: int = 0) -> str:
    return json.dumps(
        {
            "baseVersion": base,
            "taskUpdates": [
                {
                    "taskId": "task_poem",
                    "title": "Haiku",
                    "objective": "Write a haiku into poem.txt",
                    "lifecycle": "completed",
                    "coveredTurnAbsIds": ids,
                    "completionEvidence": ["wrote poem.txt"],
                }
            ],
        }
    )


def llm(srv: FakeOpenAI, timeout_s: float = 5) -> LLMEstimator:
    return LLMEstimator("fake-model", base_url=srv.base_url, api_key="k", timeout_s=timeout_s)


def test_llm_good_json_is_applied(fake_server):
    view, reg, ids = small_view()
    srv = fake_server({"content": "<think>hmm</think>```json\n" + good_reply(ids) + "\n```"})
    est = llm(srv)
    delta = est.estimate(view)
    report = reg.apply(delta)
    assert not report.rejected and reg.get("task_poem").lifecycle == "completed"
    assert est.last_error is None and est.failures == 0
    (req,) = srv.requests
    assert req["model"] == "fake-model" and req["temperature"] == 0
    assert req["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    sent = json.loads(req["messages"][1]["content"])
    assert sent["baseVersion"] == 0 and [t["turnId"] for t in sent["newTurns"]] == ids


def test_llm_system_prompt_bytes_are_stable(fake_server):
    view, _, ids = small_view()
    srv = fake_server({"content": good_reply(ids)})
    est = llm(srv)
    est.estimate(view)
    est.estimate(view)
    assert srv.requests[0]["messages"][0] == srv.requests[1]["messages"][0]


def test_llm_repairs_once_after_a_bad_reply(fake_server):
    view, reg, ids = small_view()
    srv = fake_server({"content": "Sure! Here is the update: status completed"}, {"content": good_reply(ids)})
    delta = llm(srv).estimate(view)
    assert reg.apply(delta).changed and reg.get("task_poem") is not None
    assert len(srv.requests) == 2
    retry = srv.requests[1]["messages"]
    assert retry[2] == {"role": "assistant", "content": "Sure! Here is the update: status completed"}
    assert "could not be used" in retry[3]["content"] and "no JSON object" in retry[3]["content"]


def bad_update(ids: list[str], **change) -> str:
    upd = json.loads(good_reply(ids))
    upd["taskUpdates"][0].update(change)
    return json.dumps({k: v for k, v in upd.items()})


@pytest.mark.parametrize(
    "make_reply",
    [
        lambda ids: "not json at all",
        lambda ids: "{ broken",
        lambda ids: "[1, 2, 3]",
        lambda ids: json.dumps({"baseVersion": 0, "taskUpdates": [], "upsertTasks": []}),
        lambda ids: json.dumps({"baseVersion": 7, "taskUpdates": []}),
        lambda ids: json.dumps({"baseVersion": 0, "taskUpdates": {"a": 1}}),
        lambda ids: good_reply(ids).replace('"lifecycle"', '"status"'),
        lambda ids: good_reply(ids).replace('"objective"', '"description"'),
        lambda ids: good_reply(ids).replace('"completed"', '"done"'),
        lambda ids: good_reply(ids).replace(
            '"completionEvidence": ["wrote poem.txt"]', '"completionEvidence": "x"'
        ),
        lambda ids: good_reply(["t_000000000000"]),
        lambda ids: json.dumps(
            {
                "baseVersion": 0,
                "taskUpdates": [{"taskId": "ghost", "objective": "x", "lifecycle": "completed"}],
            }
        ),
    ],
)
def test_llm_garbage_twice_means_no_change(fake_server, make_reply, caplog):
    view, reg, ids = small_view()
    srv = fake_server({"content": make_reply(ids)})
    est = llm(srv)
    delta = est.estimate(view)
    assert delta == {"baseVersion": 0, "taskUpdates": []}
    assert len(srv.requests) == 2  # one repair, then give up
    assert est.failures == 1 and est.last_error and "estimator failed" in caplog.text
    assert not reg.apply(delta).changed


def test_llm_invalid_transition_is_rejected_by_the_registry(fake_server):
    view, reg, ids = small_view()
    reply = good_reply(ids).replace('"completed"', '"evictable"')  # nothing moved on yet
    srv = fake_server({"content": reply})
    delta = llm(srv).estimate(view)
    report = reg.apply(delta)
    assert reg.get("task_poem").lifecycle == "active"
    assert any("moved on" in r.reason for r in report.rejected)


def test_llm_timeout_means_no_change(fake_server):
    view, _, ids = small_view()
    srv = fake_server({"sleep": 2.0, "content": good_reply(ids)})
    est = llm(srv, timeout_s=0.3)
    t0 = time.monotonic()
    delta = est.estimate(view)
    assert time.monotonic() - t0 < 1.8
    assert delta["taskUpdates"] == [] and "Timeout" in (est.last_error or "")


def test_llm_server_error_means_no_change(fake_server):
    view, _, ids = small_view()
    srv = fake_server({"status": 500})
    est = llm(srv)
    assert est.estimate(view)["taskUpdates"] == []
    assert len(srv.requests) == 1 and est.failures == 1 and "500" in est.last_error


def test_llm_client_exception_means_no_change():
    class Boom:
        class chat:  # noqa: N801 - mimics the openai client shape
            class completions:  # noqa: N801
                @staticmethod
                def create(**kw):
                    raise RuntimeError("network down")

    view, _, _ = small_view()
    est = LLMEstimator("m", client=Boom())
    assert est.estimate(view)["taskUpdates"] == [] and "network down" in est.last_error


def test_llm_config_from_environment(monkeypatch, fake_server):
    view, reg, ids = small_view()
    srv = fake_server({"content": good_reply(ids)})
    monkeypatch.setenv("TOKENPILOT_ESTIMATOR_MODEL", "env-model")
    monkeypatch.setenv("TOKENPILOT_ESTIMATOR_BASE_URL", srv.base_url)
    monkeypatch.setenv("TOKENPILOT_ESTIMATOR_API_KEY", "env-key")
    est = LLMEstimator()
    assert est.model == "env-model" and est.base_url == srv.base_url
    reg.apply(est.estimate(view))
    assert srv.requests[0]["model"] == "env-model" and reg.get("task_poem") is not None
    monkeypatch.delenv("TOKENPILOT_ESTIMATOR_MODEL")
    with pytest.raises(ConfigError):
        LLMEstimator()


def test_llm_estimator_in_the_lifecycle_failure_leaves_history_unchanged(fake_server):
    srv = fake_server({"status": 500})
    lc, _ = inline(LLMEstimator("m", base_url=srv.base_url, api_key="k", timeout_s=2), batch=1)
    s = transcript_session()
    renders = drive(lc, s)
    assert renders[-1] == s.msgs
    assert lc.stats["estimator_failures"] == lc.stats["estimator_runs"] > 0
    assert lc.registry.version == 0


def test_parse_delta_accepts_known_turns_and_existing_tasks():
    view, reg, ids = small_view()
    delta = parse_delta(good_reply(ids), view)
    reg.apply(delta)
    view2 = build_view(reg, [], {})
    lifecycle_only = {
        "baseVersion": 1,
        "taskUpdates": [{"taskId": "task_poem", "objective": "x", "lifecycle": "active"}],
    }
    assert parse_delta(json.dumps(lifecycle_only), view2) == lifecycle_only


def test_a_use_named_in_words_keeps_the_reading_task_even_among_many_refs():
    """I6 probe: the current request names transcript.md, which an earlier, finished task
    read. That task has many other refs (sorted before 'transcript.md'); all count."""
    s = Session()
    s.user("Summarize the speakers' key points from transcript.md into speaker_summary.md")
    s.call("read", {"path": "transcript.md"}, TRANSCRIPT)
    for k in range(3):
        names = "\n".join(f"see appendix_{k}{i:03d}.md and Figure_{k}{i:03d}.png" for i in range(80))
        s.call("exec", {"command": f"ls appendix_{k}"}, "ok", text="Checking: " + names)
    s.final("Wrote speaker_summary.md.")
    s.user("Write a haiku about autumn leaves into poem.txt")
    s.final("Here is the haiku.")
    s.user("Extract the Q&A from transcript.md")
    s.call("write", {"path": "qa.md", "content": "Q: ..."}, "ok")
    s.final("Saved qa.md.")
    s.user("thanks")
    s.final("welcome")
    lc, _ = inline(OfflineEstimator(), batch=3)
    renders = drive(lc, s)
    reading = task_of_turn(lc, segment_turns(s.msgs)[0].turn_id)
    # The task stays (only its `ls` bundles, answered and unused, may go stale), and so
    # does its read of the file the request names.
    assert all(not seg.task_ids or seg.reasons for seg in lc.segments if reading in seg.task_ids)
    read_at = next(i for i, m in enumerate(s.msgs) if m.get("content") == TRANSCRIPT)
    assert not any(seg.start <= read_at < seg.end for seg in lc.segments)
    assert any(TRANSCRIPT in str(m.get("content")) for m in renders[-1])
