"""The built-in default workload of `tokenpilot bench`: seeded, realistic OpenClaw-style sessions.

`generate(seed, sessions, tasks_per_session)` writes multi-task agent sessions in the
neutral OpenAI chat format with tool calls, the way OpenClaw sends them: a ~26 KB
system prompt split into STABLE and DYNAMIC parts (workspace files injected under
absolute per-session paths; date, time zone, time of day and model identity in
DYNAMIC), 13 tools, `[Wed 2026-12-02 09:17 UTC]`-prefixed user messages and a Runtime
line on the session's first message. Tasks mix web research over full HTML pages, log
triage, CSV analysis, coding with test runs, and a chain of 2-3 consecutive tasks over
one meeting transcript (the later ones re-use the first one's ids and paths; the last
writes MEMORY.md, which changes the injected MEMORY.md block for later calls).

Everything comes from `random.Random` seeded per session: no global random state, no
clock, no environment lookups, so one seed always gives the same bytes.

Each `RecordedCall` has `start=0`, `end` = the index of its assistant output, a
`timestamp` (epoch seconds; 10-90 s per step, minutes between tasks, at least one idle
gap over 10 minutes per session, and every fourth session crosses midnight) and its own
`system` message rendered at that time. `usage` is left None on purpose: the prompt
and output are all there, so a consumer counts them with its own tokenizer (recorded
counts from our estimate would only add a second, slightly different number).
"""

from __future__ import annotations

from tokenpilot.measure.traces.model import Session

from .sessions import FMT, SOURCE, build_session

__all__ = ["FMT", "SOURCE", "builtin_sessions", "generate", "stats"]


def generate(seed: int = 0, sessions: int = 4, tasks_per_session: int = 5) -> list[Session]:
    """`sessions` independent sessions of `tasks_per_session` tasks each, all determined by `seed`."""
    if sessions < 0 or tasks_per_session < 1:
        raise ValueError("sessions must be >= 0 and tasks_per_session >= 1")
    return [build_session(seed, i, tasks_per_session) for i in range(sessions)]


def builtin_sessions() -> list[Session]:
    """The default workload: `generate()` with its defaults (4 sessions x 5 tasks, seed 0)."""
    return generate()


def stats(sessions: list[Session]) -> dict[str, float]:
    """Size figures of a workload: calls, tool results, tool output chars, prompt tokens.

    Prompt tokens are counted per call as the system message + each message as canonical
    JSON + the tools as canonical JSON (each distinct piece counted once, then summed),
    with `tokenpilot.tokens.count_tokens`: an approximation of what a provider bills.
    """
    from statistics import median

    from tokenpilot._canonical import canonical_json
    from tokenpilot.tokens import count_tokens

    calls = results = total = peak = 0
    sizes: list[int] = []
    for s in sessions:
        tools = count_tokens(canonical_json(s.tools))
        per = [count_tokens(canonical_json(m)) for m in s.messages]
        sys_cache: dict[int, int] = {}
        prefix = [0]
        for n in per:
            prefix.append(prefix[-1] + n)
        for c in s.calls:
            sysmsg = c.system or s.messages[0]
            st = sys_cache.get(id(sysmsg))
            if st is None:
                st = sys_cache[id(sysmsg)] = count_tokens(canonical_json(sysmsg))
            tokens = tools + st + prefix[c.end] - prefix[max(c.start, 1)]
            total += tokens
            peak = max(peak, tokens)
        calls += len(s.calls)
        for m in s.messages:
            if m.get("role") == "tool":
                results += 1
                sizes.append(len(m["content"]))
    return {
        "sessions": len(sessions),
        "calls": calls,
        "tool_results": results,
        "median_tool_chars": median(sizes) if sizes else 0,
        "max_tool_chars": max(sizes, default=0),
        "total_prompt_tokens": total,
        "peak_prompt_tokens": peak,
    }
