"""Checks of a running TokenPilot proxy from outside, for `doctor` (any host) and `openclaw doctor`.

Does it answer (`check_proxy`, which can start it from a service description and stop it
again), do the provider's cached tokens come back, which prefixes broke and why
(`check_stats`, from `/tokenpilot/stats` or the saved state when the proxy is down), and
what its log file says (`check_log`). Each finding is a `Check`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenpilot_proxy.breaks import DELIBERATE
from tokenpilot_proxy.sessions import StateDir, summarize

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True, slots=True)
class Check:
    status: str
    what: str
    detail: str = ""

    def line(self) -> str:
        return f"[{self.status:>4}] {self.what}" + (f": {self.detail}" if self.detail else "")


def _get_json(url: str, token: str | None, timeout_s: float = 3.0) -> Any:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def _healthy(proxy_url: str) -> str | None:
    """None when the proxy answers /health, else why not."""
    try:
        _get_json(f"{proxy_url}/health", None)
        return None
    except (OSError, ValueError) as exc:
        return str(exc)


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def start_service(
    service: Mapping[str, Any], proxy_url: str, timeout_s: float = 30.0
) -> subprocess.Popen[bytes]:
    """Start the proxy as OpenClaw would (the config's `localService`) and wait for /health."""
    env = dict(os.environ)
    for k, v in (service.get("env") or {}).items():
        env[str(k)] = _ENV_REF.sub(lambda m: os.environ.get(m.group(1), ""), str(v))
    cmd = [str(service.get("command", "")), *[str(a) for a in service.get("args") or []]]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    while _healthy(proxy_url) is not None:
        if proc.poll() is not None:
            err = (proc.stderr.read() if proc.stderr else b"").decode("utf-8", "replace").strip()
            raise RuntimeError(f"exited with status {proc.returncode}: {err.splitlines()[-1] if err else ''}")
        if time.monotonic() > deadline:
            stop_service(proc)
            raise RuntimeError(f"no answer on {proxy_url}/health within {timeout_s:g} s")
        time.sleep(0.1)
    return proc


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the proxy saves its sessions on SIGTERM
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_proxy(
    proxy_url: str,
    auth_env: str | None,
    service: Mapping[str, Any] | None = None,
    *,
    start: bool = True,
    state_dir: Path | None = None,
) -> list[Check]:
    """Health and stats of the proxy; started from `service` for the check when it is down.

    A proxy without a bearer token names no session in its stats; the sessions are then
    named from its state files in `state_dir`, which the user running doctor can read anyway."""
    token = os.environ.get(auth_env) if auth_env else None
    why = _healthy(proxy_url)
    proc = None
    out: list[Check] = []
    if why is not None:
        if not (start and isinstance(service, Mapping) and service.get("command")):
            return [
                Check(
                    WARN,
                    "proxy",
                    f"{proxy_url} not answering ({why}); OpenClaw starts it on its first model call",
                )
            ]
        try:
            proc = start_service(service, proxy_url)
        except (OSError, RuntimeError) as exc:
            return [
                Check(FAIL, "proxy", f"{proxy_url} was down and would not start from localService: {exc}")
            ]
        out.append(
            Check(OK, "proxy", f"{proxy_url} healthy (started by doctor from localService, stopped after)")
        )
    else:
        out.append(Check(OK, "proxy", f"{proxy_url} healthy"))
    try:
        stats = _get_json(f"{proxy_url}/tokenpilot/stats", token)
    except urllib.error.HTTPError as exc:
        hint = f" (set {auth_env})" if exc.code == 401 and auth_env else ""
        return [*out, Check(FAIL, "proxy stats", f"HTTP {exc.code}{hint}")]
    except (OSError, ValueError) as exc:
        return [*out, Check(FAIL, "proxy stats", str(exc))]
    finally:
        if proc is not None:
            stop_service(proc)
    if "sessions" not in stats and state_dir is not None and state_dir.is_dir():
        stats = {**stats, "sessions": saved_stats(state_dir)["sessions"]}
    return out + check_stats(stats)


def saved_stats(state: Path) -> dict[str, Any]:
    """The proxy's per-session stats as its saved state holds them (the proxy being down)."""
    stored = StateDir(state).load_all_versioned(("stats",)) if state.is_dir() else ()
    sessions = {d["id"]: d.get("stats") or {} for _v, d in stored}
    totals: dict[str, Any] = {}
    for st in sessions.values():
        for k in ("calls", "errors", "prompt_tokens", "cached_tokens", "tokens_saved", "prefix_breaks"):
            totals[k] = totals.get(k, 0) + int(st.get(k) or 0)
    prompt = totals.get("prompt_tokens", 0)
    totals["hit_rate"] = totals.get("cached_tokens", 0) / prompt if prompt else 0.0
    return {"sessions": sessions, "totals": totals}


_LOG_LEVEL = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b")


def check_log(path: Path | None, tail_bytes: int = 256 * 1024) -> list[Check]:
    """The proxy's log: warnings and errors in its recent part, the last one quoted."""
    if path is None:
        return [Check(WARN, "proxy log", "no --log-file in localService: reinstall to get one")]
    try:
        with path.open("rb") as f:
            f.seek(max(path.stat().st_size - tail_bytes, 0))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except FileNotFoundError:
        return [Check(OK, "proxy log", f"{path} (not written yet)")]
    except OSError as exc:
        return [Check(WARN, "proxy log", f"{path}: {exc}")]
    bad = [ln for ln in lines if _LOG_LEVEL.search(ln)]
    if not bad:
        return [Check(OK, "proxy log", f"{path}: no warnings in its last {len(lines)} lines")]
    return [
        Check(
            WARN,
            "proxy log",
            f"{path}: {len(bad)} warning(s)/error(s) in its last {len(lines)} lines; last: {bad[-1][-300:]}",
        )
    ]


def check_stats(stats: dict[str, Any]) -> list[Check]:
    """Are cached tokens coming back? Judged on sessions with at least two reported calls.

    From the proxy's `summary`: without its bearer token the proxy names no session, and
    then neither does doctor (saved state, read from disk, names them)."""
    sessions = stats.get("sessions") if isinstance(stats.get("sessions"), dict) else None
    summary = stats.get("summary") or summarize(sessions or {})
    if not summary.get("sessions"):
        return [Check(WARN, "cache hits", "no sessions yet: run an OpenClaw turn, then doctor again")]
    out = []
    t = stats.get("totals") or {}
    out.append(
        Check(
            OK,
            "usage",
            f"{summary['sessions']} session(s), {t.get('calls', 0)} calls, {t.get('prompt_tokens', 0):,} prompt tokens, "
            f"{t.get('cached_tokens', 0):,} cached ({100 * t.get('hit_rate', 0):.1f}%), {t.get('tokens_saved', 0):,} tokens saved",
        )
    )
    warm, cached = summary.get("multi_call_sessions", 0), summary.get("multi_call_sessions_cached", 0)
    if not warm:
        out.append(Check(WARN, "cache hits", "no session has two reported calls yet"))
    elif not cached:
        out.append(
            Check(
                FAIL,
                "cache hits",
                "none reported: the upstream may not return prompt_tokens_details.cached_tokens, or prompts are shorter than its cache minimum",
            )
        )
    else:
        out.append(Check(OK, "cache hits", f"{cached}/{warm} multi-call sessions hit the cache"))
    broken = summary.get("sessions_with_prefix_breaks", 0)
    if broken:
        total = t.get("prefix_breaks") or sum(
            int(s.get("prefix_breaks") or 0) for s in (sessions or {}).values()
        )
        breaks = {
            sid: " — ".join(
                str(x) for x in (s.get("last_prefix_break"), s.get("last_prefix_break_detail")) if x
            )
            for sid, s in (sessions or {}).items()
            if s.get("prefix_breaks")
        }
        if breaks:
            shown = "last of each: " + "; ".join(f"{sid}: {what}" for sid, what in list(breaks.items())[:5])
        else:
            causes = summary.get("last_prefix_break_causes") or {}
            shown = "last causes: " + "; ".join(f"{cause} ({n})" for cause, n in causes.items())
            shown += " (ids and messages: behind the proxy's --auth-token-env, or in its state files)"
        out.append(Check(WARN, "prefix breaks", f"{total} in {broken} session(s); {shown}"))
    if t.get("errors"):
        out.append(Check(WARN, "upstream errors", f"{t['errors']} (see the proxy's log)"))
    return out + session_checks(sessions or {})


SHOWN_SESSIONS = 10
SHOWN_BREAKS = 5


def session_checks(sessions: Mapping[str, Mapping[str, Any]]) -> list[Check]:
    """Per named session (the busiest first): its cache hit rate from the usage the provider
    reported, and each of its last prefix breaks with the first differing message, the
    likely cause and what to do (`breaks.diagnose`, recorded by the proxy)."""
    out: list[Check] = []
    busiest = sorted(sessions.items(), key=lambda kv: -int(kv[1].get("calls") or 0))[:SHOWN_SESSIONS]
    for sid, s in busiest:
        prompt, cached = int(s.get("prompt_tokens") or 0), int(s.get("cached_tokens") or 0)
        reports = int(s.get("usage_reports") or 0)
        rate = f"{100 * cached / prompt:.1f}%" if prompt else "n/a"
        good = reports < 2 or cached > 0
        out.append(
            Check(
                OK if good else WARN,
                f"session {sid}",
                f"{s.get('calls', 0)} calls, cache hit rate {rate} ({cached:,} of {prompt:,} prompt tokens)"
                + ("" if good else ": no cached tokens came back"),
            )
        )
        for b in (s.get("breaks") or [])[-SHOWN_BREAKS:]:
            if isinstance(b, Mapping):
                out.append(break_check(sid, b))
    return out


def break_check(sid: str, b: Mapping[str, Any]) -> Check:
    likely = str(b.get("likely") or "unknown")
    if b.get("role") == "tools":
        where = f"tool list [{b.get('before', '')}] -> [{b.get('after', '')}]"
    else:
        where = (
            f"first differing message #{b.get('index', '?')} ({b.get('role', '?')}): "
            f"{b.get('before', '')!r} -> {b.get('after', '')!r}"
        )
    status = OK if likely in DELIBERATE else WARN
    return Check(
        status,
        f"prefix break in {sid} at call {b.get('call', '?')}",
        f"likely cause: {likely} ({b.get('cause', '?')}); {where}; what to do: {b.get('fix', '')}",
    )
