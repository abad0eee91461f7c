"""A small workload for live replay on an 8k-token model (SmolLM2-135M on llama.cpp).

`generate_live(seed, sessions, tasks_per_session)` builds short multi-task sessions with
the same machinery as the default workload (`SessionBuilder`, seeded, no clock), but
with a compact OpenClaw-style system prompt (a STABLE part, then a DYNAMIC part whose
date and time change from call to call), three tools, and small tool outputs (service
logs with ANSI colours, HTML pages, grep hits), so every prompt stays well inside the
window: under `MAX_PROMPT_TOKENS` by our tokenizer, which leaves room for a tokenizer
that counts logs and HTML up to ~1.4x higher.
"""

from __future__ import annotations

import random
from typing import Any

from tokenpilot.measure.traces.model import Session

from . import content as C
from .builder import EPOCH_START, SessionBuilder
from .devtools import grep, server_log
from .prompt import DYNAMIC_CLOSE, DYNAMIC_OPEN, STABLE_CLOSE, STABLE_OPEN, runtime_line
from .prompt_tools import TOOLS
from .tasks import TOPICS

SOURCE = "builtin:live"
MAX_PROMPT_TOKENS = 4_800  # by our tokenizer; the 8k window needs slack for the engine's
LIVE_TOOLS = [t for t in TOOLS if t["function"]["name"] in ("read", "exec", "web_fetch")]
SERVICES = ("billing-api", "ingest-worker", "auth-gateway", "search-indexer", "notify")
SITES = ("example-news.com", "datawire.io", "policy-review.org", "market-notes.net")


class LiveBuilder(SessionBuilder):
    """A `SessionBuilder` with a ~600-token system prompt instead of OpenClaw's ~7k."""

    def system(self) -> dict[str, Any]:
        e, now = self.env, self.local()
        text = "\n".join(
            [
                STABLE_OPEN,
                f"You are a personal assistant running inside OpenClaw for {e.name} on {e.host}.",
                "## Tooling",
                "- read: read files (line-numbered). exec: run shell commands. web_fetch: fetch a URL.",
                "- Prefer first-class tools over shell equivalents; never invent file contents.",
                "## Safety",
                "Do not exfiltrate private data. Ask before destructive commands or sending messages.",
                "## Workspace",
                f"Your working directory is {self.ws}. Memory lives in {self.ws}/MEMORY.md.",
                "## Style",
                "Answer briefly: lead with the result, then the evidence, with exact numbers and units.",
                STABLE_CLOSE,
                DYNAMIC_OPEN,
                f"Current model identity: {e.model}. If asked which model you are, answer with this value.",
                f"Time zone: {e.tz}",
                f"Current date: {now:%Y-%m-%d}",
                f"Current time: {now:%H:%M}",
                DYNAMIC_CLOSE,
            ]
        )
        msg = self._systems.get(text)
        if msg is None:
            msg = self._systems[text] = {"role": "system", "content": text}
        return msg

    def step(self, calls, text: str = "", busy: float = 0.0) -> None:  # type: ignore[override]
        super().step(calls, text, busy)
        self.t += 45.0  # at least a minute between calls: the time in the system prompt moves every call


def _logs_task(b: LiveBuilder) -> None:
    r = b.rng
    svc = r.choice(SERVICES)
    path = f"{b.ws}/logs/{svc}.log"
    b.user(f"The {svc} service threw errors overnight. What failed and how often?", new_task=True)
    base = int(b.t) - 3600
    log = server_log(b.prose, svc, r.randint(1600, 2400), base)
    b.call("exec", {"command": f"tail -n 40 {path}"}, log.text, "log")
    hits = grep(log.lines, path, ("ERROR", "Traceback"), limit=20)
    b.call("exec", {"command": f"grep -n -E 'ERROR|Traceback' {path}"}, hits or "(no matches)\n", "log")
    b.final(
        f"{log.facts['errors']} unhandled `{log.facts['exception']}` errors in {svc}, first on "
        f"{log.facts['first_job']}, last on {log.facts['last_job']}. The pool was saturated before each one."
    )


def _research_task(b: LiveBuilder) -> None:
    r = b.rng
    label, nouns, unit = r.choice(TOPICS)
    p = b.prose.with_nouns(nouns.split("|"))
    site = r.choice(SITES)
    title = p.title()
    url = f"https://{site}/analysis/{C._slug(title)}"
    b.user(f"Find the latest {label} numbers on {site} and give me the top two.", new_task=True)
    page = C.html_page(
        p, site=site, url=url, title=title, unit=unit, date=b.date(-3), target=r.randint(2600, 3400)
    )
    html = page.html[:4200]
    b.call("web_fetch", {"url": url}, html, "html")
    rows = page.rows[:2] or [("n/a", "n/a", "n/a")]
    b.final("; ".join(f"{ent}: {val} ({year})" for ent, year, val in rows) + f" — source {url}")


def _read_task(b: LiveBuilder) -> None:
    r = b.rng
    path = f"{b.ws}/notes/{C._slug(b.prose.title())}.md"
    b.user(f"Summarise {path} in two lines.", new_task=True)
    lines = [b.prose.sentence() for _ in range(r.randint(10, 16))]
    b.call("read", {"path": path}, C.numbered("\n".join(lines) + "\n"), "text")
    b.final(lines[0] + " " + lines[-1])


TASKS = (_logs_task, _research_task, _read_task)


def _build(seed: int, index: int, tasks: int) -> Session:
    b = LiveBuilder(seed, index)
    b.t = float(EPOCH_START + b.rng.randint(0, 30) * 86400 + b.rng.randint(8, 18) * 3600)
    order = list(TASKS)
    random.Random(f"live:{seed}:{index}").shuffle(order)
    for i in range(tasks):
        if i:
            b.t += b.rng.uniform(60, 240)
        order[i % len(order)](b)
    s = b.finish(index, seed)
    s.id = f"live-{seed}-{index}"
    s.source = SOURCE
    s.tools = LIVE_TOOLS
    s.meta["task_kinds"] = [t.__name__.strip("_").removesuffix("_task") for t in order[:tasks]]
    s.meta["runtime"] = runtime_line(b.env)
    return s


def generate_live(seed: int = 0, sessions: int = 2, tasks_per_session: int = 3) -> list[Session]:
    """`sessions` short sessions of `tasks_per_session` tasks, each prompt under `MAX_PROMPT_TOKENS`."""
    if sessions < 0 or tasks_per_session < 1:
        raise ValueError("sessions must be >= 0 and tasks_per_session >= 1")
    return [_build(seed, i, tasks_per_session) for i in range(sessions)]
