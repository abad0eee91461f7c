"""The built-in workload: deterministic, valid, OpenClaw-shaped, and sized as documented."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from datetime import datetime, timezone

import pytest

from tokenpilot.measure.traces import pairing_problems
from tokenpilot.measure.workload import FMT, SOURCE, builtin_sessions, generate, stats
from tokenpilot.measure.workload.prompt import DYNAMIC_CLOSE, DYNAMIC_OPEN, STABLE_CLOSE, STABLE_OPEN, TOOLS

STAMP = re.compile(r"^\[(Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{4}-\d{2}-\d{2} \d{2}:\d{2} [A-Z]{3}\] ")
RUNTIME = re.compile(
    r"\nRuntime: agent=main \| session=\S+ \| sessionId=[0-9a-f-]+ \| host=\S+ \| repo=/home/\S+ \| "
    r"os=[^|]+ \| node=v[\d.]+ \| model=\S+ \| shell=bash$"
)
MEMORY_BLOCK = re.compile(r"## /home/[^\n]*/MEMORY\.md\n.*?(?=" + re.escape(STABLE_CLOSE) + ")", re.S)
IDENT = re.compile(r"[A-Za-z0-9_./:-]*[0-9_/.-][A-Za-z0-9_./:-]*")


@pytest.fixture(scope="module")
def default() -> list:
    return builtin_sessions()


def _dump(sessions: list) -> str:
    return json.dumps([dataclasses.asdict(s) for s in sessions], sort_keys=True)


def _tool_outputs(s, upto: int) -> str:
    return "\n".join(m["content"] for m in s.messages[:upto] if m["role"] == "tool")


def _calls_by_name(s) -> list[tuple[int, str, dict, str]]:
    """(index of the assistant message, tool name, arguments, result) for every tool call."""
    results = {m["tool_call_id"]: m["content"] for m in s.messages if m["role"] == "tool"}
    out = []
    for i, m in enumerate(s.messages):
        for tc in m.get("tool_calls") or []:
            fn = tc["function"]
            out.append((i, fn["name"], json.loads(fn["arguments"]), results[tc["id"]]))
    return out


def _unnumber(text: str) -> str:
    return "\n".join(re.sub(r"^ *\d+\t", "", ln) for ln in text.split("\n"))


def test_same_seed_same_bytes_and_no_global_random():
    random.seed(1234)
    state = random.getstate()
    a = _dump(generate(seed=7, sessions=2, tasks_per_session=4))
    assert random.getstate() == state
    assert a == _dump(generate(seed=7, sessions=2, tasks_per_session=4))
    assert a != _dump(generate(seed=8, sessions=2, tasks_per_session=4))


def test_sessions_are_independent_of_how_many_are_generated():
    assert _dump(generate(seed=3, sessions=1)) == _dump(generate(seed=3, sessions=3)[:1])


def test_default_workload_shape(default):
    assert len(default) == 4
    assert _dump(default) == _dump(generate())
    total = sum(len(s.calls) for s in default)
    assert 150 <= total <= 300
    kinds = set()
    for s in default:
        assert (s.fmt, s.source) == (FMT, SOURCE)
        assert len(s.meta["task_kinds"]) == len(s.task_starts) == 5
        kinds.update(s.meta["task_kinds"])
        assert len(set(s.meta["task_kinds"])) >= 3  # kinds are mixed within a session
    assert kinds == {"research", "logs", "transcript", "csv", "coding"}
    assert len({s.id for s in default}) == 4


def test_tool_call_pairing_and_ids(default):
    for s in default:
        assert pairing_problems(s.messages) == []
        ids = [tc["id"] for m in s.messages for tc in m.get("tool_calls") or []]
        assert all(re.fullmatch(r"call_\d+", i) for i in ids)
        assert len(ids) == len(set(ids))
        assert any(len(m.get("tool_calls") or []) > 1 for m in s.messages)  # parallel calls occur


def test_task_starts_and_user_messages(default):
    for s in default:
        users = [i for i, m in enumerate(s.messages) if m["role"] == "user"]
        assert s.task_starts[0] == 1 == users[0]
        assert set(s.task_starts) <= set(users)
        assert s.task_starts == sorted(s.task_starts)
        for i in users:
            assert STAMP.match(s.messages[i]["content"])
        assert RUNTIME.search(s.messages[1]["content"])
        assert not any(RUNTIME.search(s.messages[i]["content"]) for i in users[1:])
        # each task: 2-8 tool-call steps before its first final answer, then the answer
        bounds = [*s.task_starts, len(s.messages)]
        for a, z in zip(bounds, bounds[1:]):
            steps = 0
            for m in s.messages[a:z]:
                if m["role"] == "assistant" and m.get("tool_calls"):
                    steps += 1
                elif m["role"] == "assistant":
                    break
            assert 2 <= steps <= 8, (s.id, a, steps)
        kinds = s.meta["task_kinds"]
        chain = [i for i, k in enumerate(kinds) if k == "transcript"]
        assert chain == list(range(chain[0], chain[0] + len(chain))) and len(chain) >= 2


def test_calls_cover_every_assistant_message(default):
    for s in default:
        ends = [c.end for c in s.calls]
        assistants = [i for i, m in enumerate(s.messages) if m["role"] == "assistant"]
        assert ends == assistants
        for c in s.calls:
            assert c.start == 0 and c.usage is None and c.model == s.meta.get("model", c.model)
            prompt = s.prompt(c)
            assert prompt[0] is c.system and prompt[0]["role"] == "system"
            assert prompt[1:] == s.messages[1 : c.end]
            assert s.output(c)["role"] == "assistant"
        assert s.messages[0] is s.calls[0].system


def test_time_advances_realistically(default):
    crossed = False
    for s in default:
        ts = [c.timestamp for c in s.calls]
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        assert all(g >= 5 for g in gaps)
        assert max(gaps) > 600  # an idle break longer than a provider cache lifetime
        step_gaps = [
            s.calls[k + 1].timestamp - s.calls[k].timestamp
            for k in range(len(s.calls) - 1)
            if s.messages[s.calls[k].end].get("tool_calls")
        ]
        assert all(10 <= g <= 90.5 for g in step_gaps)
        dates = {re.search(r"Current date: (\S+)", c.system["content"]).group(1) for c in s.calls}
        crossed |= len(dates) > 1
        start = datetime.fromtimestamp(ts[0], timezone.utc)
        assert start.year == 2026
    assert crossed  # at least one session runs past midnight


def test_system_prompt_layout_and_volatility(default):
    workspaces = set()
    for s in default:
        texts = [c.system["content"] for c in s.calls]
        for t in texts:
            assert 25_000 <= len(t) <= 40_000
            assert t.startswith(STABLE_OPEN) and t.rstrip().endswith(DYNAMIC_CLOSE)
            assert t.index(STABLE_CLOSE) < t.index(DYNAMIC_OPEN)
            dyn = t[t.index(DYNAMIC_OPEN) :]
            for key in ("Current date: ", "Time zone: ", "Current time: ", "Current model identity: "):
                assert key in dyn and key not in t[: t.index(DYNAMIC_OPEN)]
        ws = s.meta["workspace"]
        workspaces.add(ws)
        assert f"## {ws}/AGENTS.md" in texts[0] and f"## {ws}/MEMORY.md" in texts[0]
        assert len(set(texts)) >= len(texts) // 3  # the time of day changes many calls' prompt
        norm = {
            MEMORY_BLOCK.sub("MEMORY", re.sub(r"(Current date|Current time): [^\n]+", r"\1: X", t))
            for t in texts
        }
        assert len(norm) == 1  # nothing else varies within a session
    assert len(workspaces) == len(default)


def test_memory_writes_change_the_injected_block(default):
    changed = 0
    for s in default:
        for i, name, args, _ in _calls_by_name(s):
            if name != "edit" or not args["path"].endswith("/MEMORY.md"):
                continue
            added = args["edits"][0]["newText"][len(args["edits"][0]["oldText"]) :].strip()
            before = next(c for c in s.calls if c.end == i).system["content"]
            after = next(c for c in s.calls if c.end > i).system["content"]
            assert added not in before and added in after
            changed += 1
    assert changed >= 3


def test_tools_are_openai_definitions(default):
    names = [t["function"]["name"] for t in TOOLS]
    assert len(names) == len(set(names)) == 13
    assert {"read", "write", "edit", "exec", "grep", "web_fetch", "web_search"} <= set(names)
    for t in TOOLS:
        assert t["type"] == "function" and t["function"]["parameters"]["type"] == "object"
    assert max(len(t["function"]["description"]) for t in TOOLS) > 400
    assert all(s.tools == TOOLS for s in default)
    used = {n for s in default for _, n, _, _ in _calls_by_name(s)}
    assert used <= set(names)


def test_output_sizes_in_stated_ranges(default):
    pages = logs = transcripts = csvs = 0
    for s in default:
        for _, name, args, out in _calls_by_name(s):
            if name == "web_fetch" and "<article" in out:
                assert out.startswith("<!DOCTYPE html>") and 20_000 <= len(out) <= 122_880
                for tag in ("<head>", "<script", "<style>", "<nav", "cookie", "<table", "<aside", "<footer"):
                    assert tag in out
                pages += 1
            cmd = args.get("command", "")
            if name == "exec" and (cmd.startswith("cat logs/") or cmd.startswith("tail -n 5000")):
                assert 10_000 <= len(out) <= 80_000 and "\x1b[" in out
                logs += 1
                if cmd.startswith("cat"):
                    assert "\r" in out
                else:
                    assert "Traceback (most recent call last):" in out
            if name == "read" and args["path"].endswith("transcript.md"):
                assert 40_000 <= len(_unnumber(out)) <= 70_000
                transcripts += 1
            if name == "read" and args["path"].endswith(".csv"):
                assert 200 <= len(out.split("\n")) - 1 <= 2000
                csvs += 1
            if name == "read" and args["path"].endswith(".py"):
                assert re.match(r"^     1\t", out)
    assert pages >= 2 and logs >= 2 and transcripts >= 4 and csvs >= 1
    st = stats(default)
    assert st["peak_prompt_tokens"] < 150_000
    assert st["calls"] == sum(len(s.calls) for s in default)


def test_final_answers_quote_tool_output(default):
    for s in default:
        for c in s.calls:
            out = s.output(c)
            if out.get("tool_calls"):
                continue
            seen = _tool_outputs(s, c.end)
            idents = {x.strip(".:,)-/") for x in IDENT.findall(out["content"])}
            idents = {x for x in idents if len(x) >= 4}
            assert any(x in seen for x in idents), out["content"]


def test_tool_arguments_reference_earlier_outputs(default):
    for s in default:
        for i, name, args, _ in _calls_by_name(s):
            if name == "web_fetch":
                assert args["url"] in _tool_outputs(s, i)


def test_transcript_chain_reuses_first_read(default):
    for s in default:
        calls = _calls_by_name(s)
        reads = [
            (i, a["path"], out)
            for i, n, a, out in calls
            if n == "read" and a["path"].endswith("transcript.md")
        ]
        first_i, path, text = reads[0]
        later_tasks = [t for t in s.task_starts if t > first_i]
        assert later_tasks
        later = [(i, n, a) for i, n, a, _ in calls if i > later_tasks[0]]
        assert any(path in json.dumps(a) for _, _, a in later)  # the transcript path comes back
        ids = set(re.findall(r"\b[A-Z]{2,4}-\d{4}\b", text))
        later_args = json.dumps([a for _, _, a in later])
        assert any(t in later_args for t in ids)  # so do ticket ids first seen in that read
        finals = [
            m["content"]
            for m in s.messages[later_tasks[0] :]
            if m["role"] == "assistant" and not m.get("tool_calls")
        ]
        assert any(t in f for t in ids for f in finals)


def test_generate_arguments():
    assert generate(sessions=0) == []
    one = generate(seed=5, sessions=1, tasks_per_session=1)[0]
    assert len(one.task_starts) == 1 and pairing_problems(one.messages) == []
    with pytest.raises(ValueError):
        generate(tasks_per_session=0)
