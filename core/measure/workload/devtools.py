"""Generated developer-tool output: build, test and server logs, grep results, source files.

Logs carry what real terminals capture: ANSI colours, `\\r` progress redraws, ISO
timestamps and stack traces. Each generator returns the text and the facts in it
(error codes, failing tests, file:line, request ids, counts) for the assistant to quote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from .prose import Prose

RED, GREEN, YELLOW, CYAN, DIM, BOLD, RESET = (
    "\x1b[31m",
    "\x1b[32m",
    "\x1b[33m",
    "\x1b[36m",
    "\x1b[2m",
    "\x1b[1m",
    "\x1b[0m",
)
MODULES = "billing scheduler inventory notifications auth exporter ledger search checkout webhooks".split()
ENTITIES = "invoice job order token batch report account shipment event session".split()
VERBS = "parse load validate compute render normalize merge fetch apply build resolve collect".split()
ENDPOINTS = (
    "/v1/orders",
    "/v1/invoices",
    "/v1/users/me",
    "/v1/search",
    "/v1/webhooks/stripe",
    "/healthz",
    "/v1/exports",
)


EXC_DETAIL = {
    "psycopg.errors.DeadlockDetected": "deadlock detected DETAIL: Process {n} waits for ShareLock on transaction",
    "redis.exceptions.TimeoutError": "Timeout reading from socket (pool redis://cache-{n}:6379/0)",
    "sqlalchemy.exc.TimeoutError": "QueuePool limit of size 20 overflow 0 reached, connection timed out, timeout {n}ms",
}


@dataclass
class Log:
    text: str
    facts: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def _ts(base: int, sec: float) -> str:
    """ISO-8601 UTC timestamp with milliseconds, `sec` seconds after epoch second `base`."""
    when = datetime.fromtimestamp(base + int(sec), timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{int(sec * 1000) % 1000:03d}Z"


def build_log(p: Prose, repo: str, target: int, base: int) -> Log:
    """`npm ci && npm run build`: install progress bars, a bundler run with \\r redraws, a TS error."""
    r = p.rng
    total = r.randint(900, 1900)
    bars = "".join(
        f"\r[{'#' * (pct // 5)}{'.' * (20 - pct // 5)}] {pct:3d}% reify:{r.choice(ENTITIES)}-{r.choice(VERBS)}: timing reifyNode"
        for pct in range(0, 101, r.choice((2, 3, 4)))
    )
    out = [
        f"{DIM}$ npm ci && npm run build{RESET}",
        bars
        + "\r"
        + " " * 64
        + "\r"
        + f"added {total} packages, and audited {total + 1} packages in {r.randint(9, 70)}s",
        "",
        f"{YELLOW}{r.randint(2, 9)} moderate severity vulnerabilities{RESET}",
        "",
        f"> {repo}@{r.randint(0, 4)}.{r.randint(0, 30)}.{r.randint(0, 9)} build",
        "> tsc -b && vite build",
        "",
        f"{CYAN}vite v5.4.{r.randint(1, 14)}{RESET} {GREEN}building for production...{RESET}",
    ]
    size = sum(len(x) + 1 for x in out)
    n = 0
    files: list[str] = []
    redraw: list[str] = []
    while size < target * 0.8:
        n += 1
        suffix = r.choice(("View", "Store", "Form", "List", "Api", ""))
        f = f"src/{r.choice(MODULES)}/{r.choice(ENTITIES)}{suffix}.{r.choice(('tsx', 'ts'))}"
        files.append(f)
        line = f"\rtransforming ({n}) {DIM}{f}{RESET}"
        redraw.append(line)
        if r.random() < 0.03:
            out.append("".join(redraw))
            redraw = []
            line = (
                f"{YELLOW}[plugin:vite:reporter] (!) {f} is dynamically imported by src/routes.tsx but also "
                f"statically imported by src/{r.choice(MODULES)}/index.ts, dynamic import will not move module "
                f"into another chunk.{RESET}"
            )
            out.append(line)
        size += len(line)
    out.append("".join(redraw))
    err_file = r.choice(files) if files else "src/app.ts"
    line_no, col = r.randint(25, 480), r.randint(16, 40)
    source = (
        f"  const id = {r.choice(VERBS)}{r.choice(ENTITIES).title()}(params.get('{r.choice(ENTITIES)}'));"
    )
    out += [
        f"{GREEN}✓{RESET} {n} modules transformed.",
        f"{RED}{err_file}({line_no},{col}): error TS2345: Argument of type 'string | null' is not "
        f"assignable to parameter of type 'string'.{RESET}",
        f"  {line_no} |{source}",
        "    |" + " " * col + "^" * r.randint(8, 24),
    ]
    while size < target:
        line = f"{DIM}{_ts(base, size / 37)}{RESET} vite:transform {r.choice(files)} {r.randint(1, 900)}ms"
        out.append(line)
        size += len(line) + 1
    out += [
        "",
        f"{RED}error during build:{RESET}",
        f"Error: Build failed with 1 error: {err_file}:{line_no}:{col}",
        "npm ERR! code ELIFECYCLE",
        "npm ERR! errno 2",
        f"npm ERR! {repo} build: `tsc -b && vite build`",
    ]
    facts = {"file": err_file, "line": str(line_no), "code": "TS2345", "modules": str(n), "source": source}
    return Log("\n".join(out) + "\n", facts)


def server_log(p: Prose, service: str, target: int, base: int) -> Log:
    """A service log with request lines, pool warnings and a recurring exception with a traceback."""
    r = p.rng
    lines: list[str] = []
    size = 0
    sec = 0.0
    exc = r.choice(sorted(EXC_DETAIL))
    job_ids: list[str] = []
    errors = 0
    while size < target:
        sec += r.uniform(0.05, 3.5)
        roll = r.random()
        ts = _ts(base, sec)
        if roll < 0.025:
            errors += 1
            job = f"job_{r.randint(10000, 99999)}"
            job_ids.append(job)
            block = [
                f"{ts} {RED}ERROR{RESET} [worker-{r.randint(1, 8)}] Unhandled exception processing {job}",
                "Traceback (most recent call last):",
                f'  File "/srv/{service}/app/workers/{r.choice(MODULES)}.py", line {r.randint(40, 400)}, in run',
                f"    result = self.{r.choice(VERBS)}_{r.choice(ENTITIES)}(payload)",
                f'  File "/srv/{service}/app/db/session.py", line {r.randint(60, 200)}, in execute',
                "    return cursor.execute(sql, params)",
                f"{exc}: " + EXC_DETAIL[exc].replace("{n}", str(r.randint(1000, 99999))),
            ]
            lines += block
            size += sum(len(x) + 1 for x in block)
            continue
        if roll < 0.08:
            line = f"{ts} {YELLOW}WARN{RESET}  [pool] connection pool at {r.randint(85, 100)}% ({r.randint(17, 20)}/20), waiting {r.randint(5, 900)}ms"
        else:
            status = r.choice((200,) * 12 + (201, 204, 304, 400, 404, 429, 502))
            line = (
                f"{ts} INFO  [api-{r.getrandbits(16):04x}] {r.choice(('GET', 'GET', 'POST', 'PUT'))} "
                f"{r.choice(ENDPOINTS)}/{r.randint(1000, 99999)} {status} {r.randint(2, 2400)}ms "
                f"req_id={r.getrandbits(48):012x}"
            )
        lines.append(line)
        size += len(line) + 1
    if not job_ids:
        job_ids.append(f"job_{r.randint(10000, 99999)}")
    facts = {"exception": exc, "errors": str(errors), "first_job": job_ids[0], "last_job": job_ids[-1]}
    return Log("\n".join(lines) + "\n", facts, lines)


def grep(lines: list[str], path: str, needles: tuple[str, ...], limit: int = 400) -> str:
    """`grep -n` output over generated lines: `path:lineno:line` for each line holding a needle."""
    hits = [f"{path}:{i}:{ln}" for i, ln in enumerate(lines, 1) if any(n in ln for n in needles)]
    return "\n".join(hits[:limit]) + ("\n" if hits else "")


@dataclass
class Module:
    path: str
    test_path: str
    source: str
    test_source: str
    func: str
    bug_line: int
    old: str
    new: str
    tests: list[str]


def _function(p: Prose, name: str, ent: str) -> list[str]:
    r = p.rng
    arg = r.choice(("items", "rows", "payload", "records", "batch"))
    body = [
        f"def {name}({arg}: list[dict], *, limit: int = {r.randint(10, 500)}) -> list[{ent.title()}]:",
        f'    """{p.sentence()}"""',
        f"    out: list[{ent.title()}] = []",
        f"    for raw in {arg}[:limit]:",
        f"        if not raw.get({r.choice(ENTITIES)!r}):",
        "            continue",
    ]
    for _ in range(r.randint(1, 6)):
        body.append(
            f"        raw[{r.choice(ENTITIES)!r}] = {r.choice(VERBS)}_{r.choice(ENTITIES)}(raw, strict={r.choice(('True', 'False'))})"
        )
    body += [f"        out.append({ent.title()}.from_dict(raw))", "    return out", "", ""]
    return body


def module(p: Prose, root: str) -> Module:
    """A Python module with a planted off-by-one in its retry helper, and its test file."""
    r = p.rng
    mod = r.choice(MODULES)
    ent = r.choice(ENTITIES)
    lines = [
        f'"""{mod.title()} helpers: {p.sentence()}"""',
        "",
        "from __future__ import annotations",
        "",
        "import logging",
        "from dataclasses import dataclass, field",
        "",
        f"log = logging.getLogger({mod!r})",
        f"MAX_ATTEMPTS = {r.randint(3, 8)}",
        "",
        "",
        "@dataclass",
        f"class {ent.title()}:",
        "    id: str",
        "    status: str = 'pending'",
        "    attempts: int = 0",
        "    tags: list[str] = field(default_factory=list)",
        "",
        "    @classmethod",
        f"    def from_dict(cls, d: dict) -> {ent.title()}:",
        "        return cls(str(d['id']), d.get('status', 'pending'), int(d.get('attempts', 0)))",
        "",
        "",
    ]
    names = []
    for _ in range(r.randint(6, 16)):
        name = f"{r.choice(VERBS)}_{r.choice(ENTITIES)}s"
        if name in names:
            continue
        names.append(name)
        lines += _function(p, name, ent)
    func = f"should_retry_{ent}"
    lines += [
        f"def {func}(item: {ent.title()}, max_attempts: int = MAX_ATTEMPTS) -> bool:",
        f'    """True while {ent} `item` may be retried: {p.sentence()}"""',
        "    if item.status == 'failed':",
    ]
    bug_line = len(lines) + 1
    old = "        return item.attempts <= max_attempts"
    new = "        return item.attempts < max_attempts"
    lines += [old, "    return False", ""]
    path = f"{root}/src/{mod}/{ent}s.py"
    tests = [f"test_{n}_empty" for n in names[:4]] + [f"test_{func}_boundary", f"test_{func}_fresh"]
    tsrc = [f"from {mod}.{ent}s import {ent.title()}, {func}, " + ", ".join(names[:4]), "", ""]
    for n in names[:4]:
        tsrc += [f"def test_{n}_empty():", f"    assert {n}([]) == []", "", ""]
    tsrc += [
        f"def test_{func}_boundary():",
        f"    item = {ent.title()}('x1', status='failed', attempts=3)",
        f"    assert not {func}(item, max_attempts=3)",
        "",
        "",
        f"def test_{func}_fresh():",
        f"    assert {func}({ent.title()}('x2', status='failed'))",
        "",
    ]
    return Module(
        path,
        f"{root}/tests/test_{ent}s.py",
        "\n".join(lines),
        "\n".join(tsrc),
        func,
        bug_line,
        old,
        new,
        tests,
    )


def pytest_log(p: Prose, m: Module, others: int, failing: bool, target: int) -> tuple[str, dict[str, str]]:
    """A colourised pytest run over `others` unrelated tests plus the module's; optionally failing."""
    r = p.rng
    out = [
        f"{BOLD}============================= test session starts =============================={RESET}",
        f"platform linux -- Python 3.12.{r.randint(1, 8)}, pytest-8.3.{r.randint(2, 5)}, pluggy-1.5.0",
        "rootdir: " + m.path.split("/src/")[0],
        "configfile: pyproject.toml",
        f"plugins: asyncio-0.24.0, cov-5.0.0, xdist-3.6.{r.randint(0, 1)}",
        f"collected {others + len(m.tests)} items",
        "",
    ]
    files = [f"tests/test_{r.choice(MODULES)}_{r.choice(ENTITIES)}.py" for _ in range(max(1, others // 25))]
    done = 0
    total = others + len(m.tests)
    for f in files:
        k = min(r.randint(10, 40), others - done) if f != files[-1] else others - done
        done += k
        out.append(f"{f} {GREEN}{'.' * k}{RESET}{' ' * max(1, 60 - k - len(f))}[{done * 100 // total:3d}%]")
    marks = "".join(("F" if failing and t.endswith("boundary") else ".") for t in m.tests)
    short = m.test_path.split("/tests/")[-1]
    out.append(f"tests/{short} {RED if failing else GREEN}{marks}{RESET}{' ' * 20}[100%]")
    facts = {"passed": str(total - (1 if failing else 0)), "failed": "1" if failing else "0"}
    if failing:
        test = next(t for t in m.tests if t.endswith("boundary"))
        out += [
            "",
            f"{RED}=================================== FAILURES ==================================={RESET}",
            f"{RED}{BOLD}_{'_' * 20} {test} {'_' * 20}{RESET}",
            "",
            f"    def {test}():",
            f"        item = {m.func.split('_')[-1].title()}('x1', status='failed', attempts=3)",
            f">       assert not {m.func}(item, max_attempts=3)",
            f"{RED}E       AssertionError: assert not True{RESET}",
            f"{RED}E        +  where True = {m.func}(item, max_attempts=3){RESET}",
            "",
            f"{m.path.split('/src/')[-1]}:{m.bug_line}: AssertionError",
        ]
        facts["test"] = test
    size = sum(len(x) + 1 for x in out)
    if size < target:
        out.append(
            f"{YELLOW}=============================== warnings summary ==============================={RESET}"
        )
        while size < target:
            w = (
                f"tests/test_{r.choice(MODULES)}_{r.choice(ENTITIES)}.py::test_{r.choice(VERBS)}_{r.choice(ENTITIES)}\n"
                f"  /usr/lib/python3.12/site-packages/{r.choice(MODULES)}/compat.py:{r.randint(10, 300)}: "
                f"DeprecationWarning: datetime.datetime.utcnow() is deprecated and scheduled for removal.\n"
            )
            out.append(w)
            size += len(w) + 1
    dur = f"{r.uniform(3, 90):.2f}s"
    facts["duration"] = dur
    tail = f"{facts['failed']} failed, {facts['passed']} passed" if failing else f"{facts['passed']} passed"
    colour = RED if failing else GREEN
    out.append(f"{colour}{'=' * 20} {tail}, {r.randint(1, 30)} warnings in {dur} {'=' * 20}{RESET}")
    return "\n".join(out) + "\n", facts
