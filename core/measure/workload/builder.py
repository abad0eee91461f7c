"""The session builder: the clock, the messages and the recorded calls of one session.

A `SessionBuilder` owns one seeded `random.Random`; every value in the session (names,
paths, times, tool outputs, ids) is drawn from it in a fixed order, so a seed always
gives the same session. Each model call is recorded with the system message it would
have been sent with at its own time (date, time of day, current MEMORY.md). The task
scripts that drive it are in `tasks.py`; `sessions.py` plans which run.

Tool outputs are sized against a token budget (estimated from character counts with
fixed per-kind ratios, never with a tokenizer, so the bytes do not depend on which
tokenizer is installed): each task gets a share of what is left, which keeps the
largest prompt of a session well under 150k tokens.
"""

from __future__ import annotations

import calendar
import json
import random
from datetime import datetime, timedelta, timezone
from typing import Any

from tokenpilot.measure.traces.model import RecordedCall, Session

from . import content as C
from .prompt import dynamic_part, memory_block, runtime_line, stable_prefix
from .prompt_tools import TOOLS
from .prose import Prose
from .session_env import Env
from .skills import skill_md, skill_path
from .workspace_files import initial_memory

FMT, SOURCE = "tokenpilot-workload", "builtin:default"
MAX_STEPS = 8  # tool-call steps per task before its answer
BUDGET_TOKENS = 122_000  # estimated history tokens per session, so the peak prompt stays under ~150k
EPOCH_START = calendar.timegm((2026, 11, 9, 0, 0, 0))
TZS = (
    ("UTC", "UTC", 0),
    ("Europe/Berlin", "CET", 60),
    ("America/New_York", "EST", -300),
    ("Asia/Tokyo", "JST", 540),
    ("Asia/Kolkata", "IST", 330),
    ("America/Los_Angeles", "PST", -480),
)
USERS = ("alice", "bob", "priya", "mateo", "jonas", "aiko", "samir", "elena", "grace", "diego")
WORKSPACES = ("ws", "workspace", "clawd", "agent-home", "openclaw-ws", "assistant")
MODELS = (
    "openai/gpt-5.4-mini",
    "openai/gpt-5.4",
    "deepseek/deepseek-chat",
    "openrouter/qwen/qwen3.5-35b-a3b",
)
RATIO = {"html": 3.5, "log": 2.1, "md": 3.8, "csv": 1.7, "code": 3.1, "text": 3.6}  # chars per token, as JSON


def _est(text: str, kind: str = "text") -> int:
    return int(len(text) / RATIO[kind])


class SessionBuilder:
    """Builds one session; the task scripts in `tasks.py` call `user`, `step` and `final` on it."""

    def __init__(self, seed: int, index: int) -> None:
        self.rng = r = random.Random(f"tokenpilot-workload:{seed}:{index}")
        self.prose = Prose(r)
        user = r.choice(USERS)
        tz = r.choice(TZS)
        home = f"/home/{user}"
        self.env = Env(
            user=user, name=f"{user.title()} {self.prose.person().split()[1]}", home=home,
            workspace=f"{home}/{r.choice(WORKSPACES)}", host=f"{r.choice(('devbox', 'nuc', 'studio', 'vm'))}-{r.randint(1, 99)}",
            tz=tz[0], tz_abbr=tz[1], tz_offset_min=tz[2], model=r.choice(MODELS),
            session_id="-".join(f"{r.getrandbits(4 * n):0{n}x}" for n in (8, 4, 4, 4, 12)),
            node=f"v{r.choice((22, 24))}.{r.randint(1, 16)}.{r.randint(0, 9)}",
            os=f"Linux 6.{r.randint(1, 18)}.{r.randint(0, 60)}-generic (x64)",
        )  # fmt: skip
        late = index % 4 == 2  # every fourth session starts late in the evening and crosses midnight
        local_start = (
            r.randint(0, 35) * 86400
            + (r.randint(23 * 60 + 35, 23 * 60 + 50) if late else r.randint(480, 1140)) * 60
        )
        self.t = float(EPOCH_START + local_start - tz[2] * 60)
        self.ws = self.env.workspace
        self.stable = stable_prefix(self.env)
        self.memory = initial_memory(self.env, self._standing_facts())
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": ""}]
        self.calls: list[RecordedCall] = []
        self.task_starts: list[int] = []
        self.kinds: list[str] = []
        self.n_calls = 0
        self.est = 0
        self.task_cap = BUDGET_TOKENS
        self.meeting: dict[str, Any] | None = None
        self._systems: dict[str, dict[str, Any]] = {}
        self.skills_read: set[str] = set()

    # ------------------------------------------------------------------ plumbing
    def _standing_facts(self) -> list[str]:
        r, e = self.rng, self.env
        return [
            f"{e.name} prefers briefs under fifteen lines; numbers exact, with units.",
            f"Team stand-up is at {r.randint(9, 10)}:{r.choice(('00', '15', '30'))} {e.tz_abbr}, Monday to Thursday.",
            f"CI runs on GitHub Actions; logs are pulled into `{self.ws}/logs/` with scripts/pull-ci-logs.sh.",
            f"The data venv is `~/.venvs/data` (pandas {r.randint(1, 2)}.{r.randint(0, 3)}); use it for CSV work.",
            f"On-call rotation: {self.prose.person()} this week, {self.prose.person()} next week.",
        ]

    def local(self, t: float | None = None) -> datetime:
        return datetime.fromtimestamp(self.t if t is None else t, timezone.utc) + timedelta(
            minutes=self.env.tz_offset_min
        )

    def date(self, days: int = 0) -> str:
        return (self.local() + timedelta(days=days)).strftime("%Y-%m-%d")

    def system(self) -> dict[str, Any]:
        now = self.local()
        text = (
            self.stable
            + memory_block(self.env, self.memory)
            + dynamic_part(self.env, now.strftime("%Y-%m-%d"), now.strftime("%H:%M"))
        )
        msg = self._systems.get(text)
        if msg is None:
            msg = self._systems[text] = {"role": "system", "content": text}
        return msg

    def begin_task(self, remaining: int) -> None:
        """Give the next task its share of the token budget left (`remaining` tasks, this one included)."""
        self.task_cap = self.est + int((BUDGET_TOKENS - self.est) * min(1.0, 1.7 / max(1, remaining)))

    def task_left(self) -> int:
        """Estimated tokens left in the current task's share of the budget."""
        return self.task_cap - self.est

    def size(self, lo: int, hi: int, kind: str, share: float = 0.3) -> int:
        """A size in chars within [lo, hi], smaller when the task's share of the budget runs low."""
        want = self.rng.randint(lo, hi)
        cap = int(self.task_left() * share * RATIO[kind])
        return max(lo, min(want, cap))

    def room(self, tokens: int) -> bool:
        return self.est + tokens < BUDGET_TOKENS

    @staticmethod
    def estimate(text: str, kind: str = "text") -> int:
        return _est(text, kind)

    def user(self, text: str, new_task: bool = False) -> None:
        stamp = self.local().strftime(f"%a %Y-%m-%d %H:%M {self.env.tz_abbr}")
        body = f"[{stamp}] {text}"
        if not any(m["role"] == "user" for m in self.messages):
            body += "\n\n" + runtime_line(self.env)
        if new_task:
            self.task_starts.append(len(self.messages))
        self.messages.append({"role": "user", "content": body})
        self.est += _est(body)
        self.t += self.rng.uniform(1, 4)

    def _record(self) -> None:
        self.calls.append(
            RecordedCall(0, len(self.messages), None, round(self.t, 3), self.env.model, self.system())
        )

    def step(
        self, calls: list[tuple[str, dict[str, Any], str, str]], text: str = "", busy: float = 0.0
    ) -> None:
        """One assistant message with tool calls, then their results; `calls` = (tool, args, output, kind)."""
        self._record()
        tcs, results = [], []
        for name, args, out, kind in calls:
            self.n_calls += 1
            cid = f"call_{self.n_calls}"
            arg_text = json.dumps(args, ensure_ascii=False)
            tcs.append({"id": cid, "type": "function", "function": {"name": name, "arguments": arg_text}})
            results.append({"role": "tool", "tool_call_id": cid, "content": out})
            self.est += _est(arg_text) + _est(out, kind)
        self.messages.append({"role": "assistant", "content": text, "tool_calls": tcs})
        self.messages.extend(results)
        self.t += min(90.0, self.rng.uniform(10, 45) + busy)

    def call(self, name: str, args: dict[str, Any], out: str, kind: str = "text", busy: float = 0.0) -> None:
        """A step with a single tool call."""
        self.step([(name, args, out, kind)], busy=busy)

    def fit(self, required: int, options: list[tuple[str, bool, int]]) -> set[str]:
        """The wanted optional steps (name, wanted, cost) that fit, in order, beside `required` steps.

        Keeps every task at most MAX_STEPS tool-call steps before its answer.
        """
        kept, used = set(), required
        for name, wanted, cost in options:
            if wanted and used + cost <= MAX_STEPS:
                kept.add(name)
                used += cost
        return kept

    def wants_skill(self, name: str, chance: float = 0.6) -> bool:
        return name not in self.skills_read and self.rng.random() < chance

    def recall(self, query: str, chance: float = 0.35) -> None:
        """OpenClaw's memory recall step before a task that may touch prior work (with `chance`)."""
        if self.rng.random() >= chance:
            return
        lines = [ln for ln in self.memory.split("\n") if ln.startswith("- ")]
        picks = self.rng.sample(lines, min(2, len(lines)))
        hits = [{"path": "MEMORY.md", "line": self.memory.split("\n").index(x) + 1, "score": round(self.rng.uniform(0.3, 0.8), 2),
                 "snippet": x[2:]} for x in picks]  # fmt: skip
        self.step([("memory_search", {"query": query}, json.dumps({"results": hits}, indent=2), "text")])

    def skill(self, name: str, chance: float = 0.6) -> None:
        """Read a matching skill's SKILL.md, as the prompt tells the agent to (once per session)."""
        if chance < 1 and not self.wants_skill(name, chance):
            return
        self.skills_read.add(name)
        p = self.prose
        steps = [f"{p.sentence()}" for _ in range(self.rng.randint(5, 9))]
        notes = [p.sentence() for _ in range(self.rng.randint(3, 6))]
        path = skill_path(self.env, name)
        self.step([("read", {"path": path}, C.numbered(skill_md(name, steps, notes)), "text")])

    def remember(self, lines: str) -> None:
        """Edit MEMORY.md (add `lines` under Decisions); later calls see the new injected block."""
        old = "## Decisions\n"
        path = f"{self.ws}/MEMORY.md"
        edit = {"path": path, "edits": [{"oldText": old, "newText": old + "\n" + lines}]}
        self.step([("edit", edit, f"Successfully replaced 1 block(s) in {path}.", "text")])
        self.memory = self.memory.replace(old, old + "\n" + lines, 1)

    def final(self, text: str) -> None:
        self._record()
        self.messages.append({"role": "assistant", "content": text})
        self.est += _est(text)
        self.t += self.rng.uniform(5, 20)

    def written(self, path: str, text: str) -> str:
        return f"Successfully wrote {len(text.encode())} bytes to {path}"

    def finish(self, index: int, seed: int) -> Session:
        self.messages[0] = self.calls[0].system or self.messages[0]
        meta = {
            "task_kinds": self.kinds,
            "seed": seed,
            "user": self.env.user,
            "workspace": self.ws,
            "timezone": self.env.tz,
            "model": self.env.model,
            "session_id": self.env.session_id,
            "usage": "not recorded: prompts and outputs are counted by the consumer",
        }
        return Session(
            f"workload-{seed}-{index}",
            SOURCE,
            FMT,
            self.messages,
            TOOLS,
            self.calls,
            0,
            self.task_starts,
            meta,
        )
