"""Task scripts: what the user asks, which tools the agent calls with what results, what it answers.

Each script appends one task (a user request, 2-8 tool-call steps, a final answer, and
sometimes a follow-up question) to a `SessionBuilder`. Answers quote the identifiers,
paths and numbers that the task's tool outputs contained; tool-call arguments re-use
paths and URLs from earlier outputs, and the transcript tasks re-use the first task's
transcript path and ticket ids.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from . import content as C
from . import devtools as D

if TYPE_CHECKING:
    from .builder import SessionBuilder

TOPICS = (
    (
        "residential heat pumps",
        "heat pump|compressor|refrigerant|installer|retrofit|radiator|insulation|COP rating",
        "kWh",
    ),
    (
        "grid-scale battery storage",
        "battery|cell|inverter|interconnect|storage site|cycle life|lithium supply",
        "MWh",
    ),
    (
        "urban cycling infrastructure",
        "bike lane|cycle path|commuter|junction|e-bike|parking rack|ridership",
        "km",
    ),
    ("specialty coffee supply chains", "coffee|roaster|importer|green bean|harvest|cooperative|freight", "t"),
    ("open-source vector databases", "index|embedding|query latency|shard|recall|HNSW graph|replica", "QPS"),
    (
        "municipal composting",
        "compost|food waste|collection route|digester|bin|landfill diversion|hauler",
        "t",
    ),
    (
        "container shipping rates",
        "container|freight rate|port|vessel|charter|transit time|bunker fuel",
        "USD/FEU",
    ),
)
SITES = ("energy-ledger.org", "www.policy-brief.net", "data.urbanreview.com", "insights.fieldnotes.io",
         "www.marketwatchers.co", "research.openmetrics.dev", "www.tradejournal.eu")  # fmt: skip
CSV_NAMES = {"sales": "orders", "tickets": "support_tickets", "sensors": "sensor_readings"}


def task_research(b: SessionBuilder) -> None:
    r = b.rng
    label, nouns, unit = r.choice(TOPICS)
    p = b.prose.with_nouns(nouns.split("|"))
    slug = C._slug(label)
    b.user(f"Can you research {label} for me? I'd like the current numbers, who is ahead, and what is still "
           f"uncertain. Short brief with sources, and save it under research/.", new_task=True)  # fmt: skip
    n_pages = 2 if b.task_left() < 45_000 else r.randint(2, 4)
    opt = b.fit(4, [("more", n_pages > 2, 2), ("skill", b.wants_skill("web-research"), 1),
                    ("blocked", r.random() < 0.5, 1), ("seq", r.random() < 0.5, 1), ("recall", r.random() < 0.35, 1)])  # fmt: skip
    n_pages = n_pages if "more" in opt else 2
    if "recall" in opt:
        b.recall(f"{label} research notes", 1)
    if "skill" in opt:
        b.skill("web-research", 1)
    hits = []
    for site in r.sample(SITES, n_pages):
        title = p.title()
        hits.append((f"https://{site}/analysis/{C._slug(title)}", title))
    bad = f"https://www.{r.choice(('statista.com', 'ft.com', 'bloomberg.com'))}/{C._slug(p.title())}"
    q1 = f"{label} {b.date()[:4]} data comparison"
    first = hits[:2] + ([(bad, p.title())] if "blocked" in opt else [])
    b.step([("web_search", {"query": q1, "count": 8}, C.search_results(p, q1, first), "text")])
    pages = []
    for i, (url, title) in enumerate(hits):
        site = url.split("/")[2]
        pages.append(C.html_page(p, site=site, url=url, title=title, unit=unit, date=b.date(-r.randint(2, 60)),
                                 target=b.size(20_000, 118_000, "html", 0.9 / n_pages)))  # fmt: skip
        if i == 1 and n_pages > 2:
            q2 = f"{label} {r.choice(nouns.split('|'))} {r.choice(('forecast', 'costs', 'survey'))}"
            b.step([("web_search", {"query": q2}, C.search_results(p, q2, hits[2:]), "text")])
    fetch = [("web_fetch", {"url": pg.url}, pg.html, "html") for pg in pages]
    if "seq" in opt:
        b.step(fetch[:1], busy=4)
        b.step(fetch[1:2], busy=4)
    else:
        b.step(fetch[:2], text="Reading the two most relevant sources.", busy=8)
    if "blocked" in opt:
        b.step([("web_fetch", {"url": bad}, C.blocked_page(p, bad), "html")])
    if fetch[2:]:
        b.step(fetch[2:], busy=8)
    facts = [(pg, row) for pg in pages for row in pg.rows[:2]]
    ent, year, val = facts[0][1]
    q3 = f'"{ent}" {label} {year} {unit}'
    other = [(pg.url, pg.title) for pg in pages[1:2]]
    b.step([("web_search", {"query": q3}, C.search_results(p, q3, other), "text")])
    brief = [f"# {label.title()} — brief ({b.date()})", ""]
    for pg, (ent, year, val) in facts:
        brief.append(f"- {ent}: {val} in {year} ({pg.url})")
    brief += [
        "",
        "## Sources",
        *[f"- {pg.title}: {pg.url}" for pg in pages],
        "",
        "## Notes",
        p.paragraph(4, 9),
    ]
    path = f"{b.ws}/research/{slug}.md"
    text = "\n".join(brief) + "\n"
    b.step([("write", {"path": path, "content": text}, b.written(path, text), "text")])
    lead = facts[0]
    answer = [f"**{label.title()}** — saved to `{path}`.", ""]
    answer += [
        f"- **{ent}** reached {val} in {year} (source: {pg.url})" for pg, (ent, year, val) in facts[:4]
    ]
    answer += ["", f"Key quote from *{pages[0].title}*: \"{pages[0].stat}\"" if pages[0].stat else "",
               f"Uncertain: the {lead[1][1]} figures for {lead[1][0]} are single-source; the other pages do not repeat them."]  # fmt: skip
    b.final("\n".join(answer))
    if r.random() < 0.45 and b.room(b.estimate(pages[-1].html, "html") + 8_000):
        b.user(f"Can you double-check the {lead[1][0]} number against {pages[-1].url}?")
        b.step([("web_fetch", {"url": pages[-1].url}, pages[-1].html, "html")], busy=4)
        b.final(f"{pages[-1].url} lists {pages[-1].rows[0][0]} at {pages[-1].rows[0][2]} ({pages[-1].rows[0][1]}); "
                f"it does not mention {lead[1][0]}, so the {lead[1][2]} figure still rests on {lead[0].url} alone.")  # fmt: skip


def _ts_snippet(b: SessionBuilder, start: int, err_line: int, bad: str, n: int = 40) -> str:
    """Numbered TypeScript lines around the failing line `bad`."""
    r = b.rng
    lines = []
    for i in range(start, start + n):
        if i == err_line:
            lines.append(bad)
        else:
            lines.append(r.choice((
                f"  const {r.choice(D.ENTITIES)}s = await api.{r.choice(D.VERBS)}({r.choice(D.ENTITIES)}Id);",
                f"  if (!{r.choice(D.ENTITIES)}) return null;", "  }", "",
                f"export function {r.choice(D.VERBS)}{r.choice(D.ENTITIES).title()}(raw: string): string {{",
                f"  // {b.prose.sentence()}", "  return raw.trim().toLowerCase();",
            )))  # fmt: skip
    return C.numbered("\n".join(lines), start)


def task_logs(b: SessionBuilder) -> None:
    r, p = b.rng, b.prose
    if r.random() < 0.5:
        repo = r.choice(("web-console", "storefront", "admin-ui", "docs-site"))
        run = r.randint(10**9, 10**10)
        branch = f"{r.choice(('feat', 'fix', 'chore'))}/{r.choice(D.ENTITIES)}-{r.choice(D.VERBS)}"
        b.user(
            f"CI for {repo} is red on `{branch}` (run {run}). Pull the log and tell me what broke.",
            new_task=True,
        )
        b.skill("log-triage")
        d = f"logs/ci-{run}"
        log = D.build_log(p, repo, b.size(10_000, 78_000, "log"), int(b.t) - 600)
        listing = (f"fetched 2 artifacts for run {run}\ntotal {len(log.text) // 1024 + 9}K\n"
                   f"-rw-r--r-- 1 {b.env.user} {b.env.user} {len(log.text):>7} build.log\n"
                   f"-rw-r--r-- 1 {b.env.user} {b.env.user} {r.randint(900, 9000):>7} summary.json")  # fmt: skip
        b.step(
            [("exec", {"command": f"scripts/pull-ci-logs.sh {run} && ls -l {d}/"}, listing, "text")], busy=12
        )
        b.step([("exec", {"command": f"cat {d}/build.log"}, log.text, "log")])
        hits = D.grep(log.text.split("\n"), f"{d}/build.log", ("error", "ERR!"))
        b.step([("grep", {"pattern": "error|ERR!", "path": f"{d}/build.log"}, hits, "text")])
        f, line = log.facts["file"], int(log.facts["line"])
        src = f"{b.ws}/projects/{repo}/{f}"
        bad = log.facts["source"]
        snippet = _ts_snippet(b, line - 20, line, bad)
        b.step([("read", {"path": src, "offset": line - 20, "limit": 40}, snippet, "code")])
        commits = "\n".join(
            f"{r.getrandbits(28):07x} {r.choice(('fix', 'feat', 'refactor'))}: {p.phrase()} ({p.person()})"
            for _ in range(5)
        )
        b.step([("exec", {"command": f"cd projects/{repo} && git log --oneline -5 -- {f}"}, commits, "text")])
        first = commits.split("\n")[0]
        b.step([("edit", {"path": src, "edits": [{"oldText": bad.strip(), "newText": bad.strip().replace("));", ") ?? '');")}]},
                 f"Successfully replaced 1 block(s) in {src}.", "text")], text="Guarding the nullable parameter.")  # fmt: skip
        b.step([("exec", {"command": f"cd projects/{repo} && npx tsc -b && npx vite build 2>&1 | tail -n 4"},
                 f"{D.GREEN}✓{D.RESET} {log.facts['modules']} modules transformed.\ndist/index.html   0.6{r.randint(0, 9)} kB\n"
                 f"dist/assets/index-{r.getrandbits(32):08x}.js  {r.randint(300, 900)}.{r.randint(10, 99)} kB\n"
                 f"{D.GREEN}✓ built in {r.uniform(4, 30):.2f}s{D.RESET}", "log")], busy=25)  # fmt: skip
        b.final(f"The build fails in `tsc`, not in vite: `{f}:{line}` raises **{log.facts['code']}** "
                f"(`string | null` passed where `string` is required) after {log.facts['modules']} modules were "
                f"transformed. The line came in with `{first.split()[0]}` ({first.split(' ', 1)[1]}). I guarded the "
                f"`params.get(...)` result and the build passes locally again. Full log: `{d}/build.log`.")  # fmt: skip
        return
    svc = r.choice(("payments-api", "ingest-worker", "notifier", "orders-api"))
    base = int(b.t) - 86400
    day = datetime.fromtimestamp(base, timezone.utc).strftime("%Y-%m-%d")
    b.user(
        f"{svc} threw a burst of 5xx last night. Can you dig through the logs and tell me what happened?",
        new_task=True,
    )
    b.skill("log-triage")
    path = f"/var/log/{svc}/{svc}-{day}.log"
    log = D.server_log(p, svc, b.size(10_000, 78_000, "log"), base)
    listing = "\n".join(f"-rw-r----- 1 {svc} adm {r.randint(10**5, 10**7):>9} {svc}-{day[:8]}{d:02d}.log"
                        for d in range(1, 5)) + f"\n-rw-r----- 1 {svc} adm {len(log.text):>9} {svc}-{day}.log"  # fmt: skip
    b.step([("exec", {"command": f"ls -l /var/log/{svc}/"}, listing, "text")])
    b.step([("exec", {"command": f"tail -n 5000 {path}"}, log.text, "log")], busy=3)
    errs = D.grep(log.lines, path, ("ERROR", "WARN"))
    jobs = D.grep(log.lines, path, (log.facts["first_job"],))
    b.step([("grep", {"pattern": "ERROR|WARN", "path": path}, errs, "log"),
            ("grep", {"pattern": log.facts["first_job"], "path": path}, jobs, "text")])  # fmt: skip
    n = log.facts["errors"]
    b.step([("exec", {"command": f"grep -c 'Unhandled exception' {path}"}, n, "text")])
    conf = f"/etc/{svc}/config.yaml"
    cfg = (f"service: {svc}\nlisten: 0.0.0.0:{r.randint(8000, 9000)}\ndatabase:\n  pool_size: 20\n  max_overflow: 0\n"
           f"  statement_timeout_ms: {r.choice((5000, 15000, 30000))}\nworkers: {r.randint(4, 16)}\nlog_level: info\n")  # fmt: skip
    b.step([("read", {"path": conf}, C.numbered(cfg), "text")])
    b.step([("exec", {"command": f"journalctl -u {svc} --since '{day} 18:00' --no-pager | grep -iE 'oom|killed|restart' | tail -n 20"},
             "-- No entries --" if r.random() < 0.5 else f"{day} 23:{r.randint(10, 59)}:{r.randint(10, 59)} {b.env.host} systemd[1]: "
             f"{svc}.service: Scheduled restart job, restart counter is at {r.randint(1, 4)}.", "text")])  # fmt: skip
    b.final(f"`{path}` shows {n} unhandled exceptions, all `{log.facts['exception']}`, from "
            f"`{log.facts['first_job']}` to `{log.facts['last_job']}`. They coincide with the connection pool "
            f"warnings (pool at 85-100%), so the 5xx are requests waiting on a saturated pool, not bad input. "
            f"Next step: raise the pool size or shorten the worker transactions.")  # fmt: skip
    if r.random() < 0.5:
        b.user("Is it still happening right now?")
        tail = "\n".join(log.lines[-12:])
        b.step([("exec", {"command": f"tail -n 12 {path}"}, tail, "log")])
        b.final(
            f"The last 12 lines of `{path}` are {'clean' if 'ERROR' not in tail else 'still showing errors'}; "
            f"the last failure was `{log.facts['last_job']}`."
        )


def task_transcript(b: SessionBuilder, stage: int, last: bool = False) -> None:
    """Stage 0 extracts action items, 1 writes a summary, 2 updates MEMORY.md and drafts a follow-up.

    A chain that ends at stage 1 (`last`) also records the decisions in MEMORY.md there.
    """
    r, ws = b.rng, b.ws
    if stage == 0 or b.meeting is None:
        p = b.prose.with_nouns(r.sample(("migration", "error budget", "launch", "pricing page", "on-call", "data contract", "billing cron", "SLO", "vendor"), 5))  # fmt: skip
        title = r.choice(
            ("Platform sync", "Q1 planning", "Incident review", "Launch readiness", "Design review")
        )
        date = b.date(-1)
        folder = f"{ws}/meetings/{date}-{C._slug(title)}"
        tr = C.transcript(p, title=title, date=date, project=r.choice(("PLAT", "OPS", "WEB", "DATA")),
                          due_days=[b.date(d) for d in (3, 5, 7, 10, 14)], target=b.size(40_000, 69_000, "md", 0.5))  # fmt: skip
        b.meeting = m = {"folder": folder, "tr": tr, "read": C.numbered(tr.text)}
        b.user(f"The recorder dropped yesterday's {title.lower()} into meetings/. Pull out the action items (owner, "
               f"due date, ticket) into action_items.md next to the transcript.", new_task=True)  # fmt: skip
        b.skill("meeting-notes", 0.8)
        older = [f'"{b.date(-d)}-{C._slug(p.phrase())}/"' for d in (4, 9, 16)]
        short = f"meetings/{folder.rsplit('/', 1)[1]}"
        b.call("ls", {"path": f"{ws}/meetings"}, "\n".join(sorted([*older, f'"{short[9:]}/"'])))
        wc = f"{tr.text.count(chr(10))} {len(tr.text.encode())} {short}/transcript.md"
        b.call("exec", {"command": f"wc -l -c {short}/transcript.md"}, wc)
        b.call("read", {"path": f"{folder}/transcript.md"}, m["read"], "md", busy=2)
        rows = ["| Owner | Action | Ticket | Due |", "|---|---|---|---|"]
        rows += [f"| {o} | {t} | {k} | {d} |" for o, t, k, d in tr.actions]
        m["actions"] = text = (
            f"# Action items — {title} ({date})\n\nSource: `{folder}/transcript.md`\n\n"
            + "\n".join(rows)
            + "\n"
        )
        out = f"{folder}/action_items.md"
        b.call("write", {"path": out, "content": text}, b.written(out, text))
        n_act = sum(ln.count("Action item:") for ln in tr.text.split("\n"))
        b.call("exec", {"command": f"grep -c 'Action item:' {short}/transcript.md"}, str(n_act))
        if r.random() < 0.5:
            b.call("read", {"path": out}, C.numbered(text))
        items = "\n".join(f"- **{o}**: {t} — `{k}`, due {d}" for o, t, k, d in tr.actions)
        b.final(
            f"{len(tr.actions)} action items from the {title.lower()} ({date}), saved to `{folder}/action_items.md`:\n\n{items}"
        )
        if r.random() < 0.4:
            owners: dict[str, int] = {}
            for a in tr.actions:
                owners[a[0]] = owners.get(a[0], 0) + 1
            top = max(sorted(owners), key=lambda o: owners[o])
            b.user("Who ended up with the most items?")
            b.final(
                f"{top}: {owners[top]} of {len(tr.actions)} ({', '.join(f'`{a[2]}`' for a in tr.actions if a[0] == top)})."
            )
        return
    m = b.meeting
    tr, folder = m["tr"], m["folder"]
    if stage == 1:
        b.user(
            "Now write summary.md for people who missed it: decisions, open questions and who owns what. Keep the ticket numbers.",
            new_task=True,
        )
        b.recall(f"{tr.title} summary", 0.5)
        b.step([("ls", {"path": folder}, '"action_items.md"\n"recording.m4a"\n"transcript.md"', "text")])
        b.step([("read", {"path": f"{folder}/action_items.md"}, C.numbered(m["actions"]), "text")])
        if b.room(b.estimate(m["read"], "md") + 15_000):
            b.step([("read", {"path": f"{folder}/transcript.md"}, m["read"], "md")], busy=2)
        else:
            lines = tr.text.split("\n")
            b.step([("grep", {"pattern": "decision is|Action item", "path": f"{folder}/transcript.md"},
                     D.grep(lines, f"{folder}/transcript.md", ("decision is", "Action item")), "text")])  # fmt: skip
        lines = tr.text.split("\n")
        b.step([("grep", {"pattern": "decision is", "path": f"{folder}/transcript.md"},
                 D.grep(lines, f"{folder}/transcript.md", ("decision is",)), "text")])  # fmt: skip
        if last:
            b.remember(_decisions(tr, folder))
        open_t = [t for t in tr.tickets if t not in {a[2] for a in tr.actions}]
        summary = [f"# {tr.title} — summary ({tr.date})", "", "## Decisions", *[f"- {d}" for d in tr.decisions],
                   "", "## Open", *[f"- `{t}` still open" for t in open_t[:6]], "", "## Owners",
                   *[f"- {o}: {t} (`{k}`, due {d})" for o, t, k, d in tr.actions], "",
                   f"Attendees: {', '.join(n for n, _ in tr.attendees)}"]  # fmt: skip
        m["summary"] = text = "\n".join(summary) + "\n"
        b.call(
            "write",
            {"path": f"{folder}/summary.md", "content": text},
            b.written(f"{folder}/summary.md", text),
        )
        b.final(f"Wrote `{folder}/summary.md`: {len(tr.decisions)} decisions (first: {tr.decisions[0]}), "
                f"{len(open_t)} open tickets ({', '.join(f'`{t}`' for t in open_t[:3]) or 'none'}), and owners for "
                f"{len(tr.actions)} actions, e.g. {tr.actions[0][0]} on `{tr.actions[0][2]}` due {tr.actions[0][3]}."
                + (" The decisions are also in `MEMORY.md`." if last else ""))  # fmt: skip
        return
    owner, task, ticket, due = tr.actions[-1]
    first = owner.split()[0].lower()
    b.user(
        f"Add the meeting's decisions to MEMORY.md, and draft a follow-up to {owner} about {ticket} as followup_{first}.md.",
        new_task=True,
    )
    b.step([("memory_search", {"query": f"{tr.title} decisions {ticket}"},
             json.dumps({"results": [{"path": "MEMORY.md", "line": 5, "score": 0.41, "snippet": b.memory.split("\n")[4]}]}), "text")])  # fmt: skip
    names = ["action_items.md", "recording.m4a", "summary.md", "transcript.md"]
    b.call("ls", {"path": folder}, "\n".join(f'"{n}"' for n in names if n != "summary.md" or "summary" in m))
    if "summary" in m:
        b.step([("read", {"path": f"{folder}/summary.md"}, C.numbered(m["summary"]), "text")])
    hits = D.grep(tr.text.split("\n"), f"{folder}/transcript.md", (ticket,))
    b.step([("grep", {"pattern": ticket, "path": f"{folder}/transcript.md"}, hits, "text"),
            ("read", {"path": f"{ws}/MEMORY.md"}, C.numbered(b.memory), "text")])  # fmt: skip
    b.remember(_decisions(tr, folder))
    mail = (f"Subject: Follow-up on {ticket}\n\nHi {owner.split()[0]},\n\nFrom the {tr.title.lower()} on {tr.date}: you "
            f"took {task} ({ticket}), due {due}. {b.prose.paragraph(2, 4)}\n\nThanks,\n{b.env.name.split()[0]}\n")  # fmt: skip
    path = f"{folder}/followup_{first}.md"
    b.step([("write", {"path": path, "content": mail}, b.written(path, mail), "text")])
    b.final(
        f"Added {len(tr.decisions)} decision(s) from {tr.date} to `MEMORY.md` under Decisions, and drafted "
        f"`{path}` for {owner} about `{ticket}` (due {due}). Not sent."
    )


def _decisions(tr: C.Transcript, folder: str) -> str:
    return "".join(f"- {tr.date}: {d} ({tr.title}, `{folder}/transcript.md`)\n" for d in tr.decisions)


def task_csv(b: SessionBuilder) -> None:
    r = b.rng
    kind = r.choice(sorted(C.SCHEMAS))
    year, month = b.local().year, b.local().month
    name = f"{CSV_NAMES[kind]}_{year}_{month:02d}"
    rows = max(200, min(r.randint(200, 2000), int(b.task_left() * 0.45 / 33)))
    t = C.csv_table(b.prose, kind, rows, month)
    rel = f"data/{name}.csv"
    b.user(f"{rel} is this month's export. Which {t.group} has the highest total {t.metric}, and how does it "
           f"compare with the others? Put a small table in reports/.", new_task=True)  # fmt: skip
    listing = "\n".join(f"-rw-r--r-- 1 {b.env.user} {b.env.user} {r.randint(10**4, 10**6):>8} {n}_{year}_{mm:02d}.csv"
                        for n in sorted(CSV_NAMES.values()) for mm in (month - 1, month) if n != CSV_NAMES[kind] or mm != month)  # fmt: skip
    listing += f"\n{len(t.rows) + 1} {rel}"
    b.skill("csv-analyst")
    b.step([("exec", {"command": f"ls -l data/ && wc -l {rel}"}, listing, "text")])
    b.step([("exec", {"command": f"head -n 5 {rel}"}, "\n".join(t.text.split("\n")[:5]), "text")])
    b.step([("read", {"path": f"{b.ws}/{rel}"}, C.numbered(t.text), "csv")])
    stats = C.group_stats(t)
    py = f"import pandas as pd; df = pd.read_csv('{rel}'); print(df.groupby('{t.group}')['{t.metric}'].agg(['count', 'sum', 'mean']).sort_values('sum', ascending=False))"
    b.call(
        "exec",
        {"command": f'~/.venvs/data/bin/python -c "{py}"'},
        C.frame(t.group, ["count", "sum", "mean"], stats),
    )
    mi = t.header.index(t.metric)
    top = sorted(range(len(t.rows)), key=lambda i: -float(t.rows[i][mi]))[:10]
    py2 = f"import pandas as pd; df = pd.read_csv('{rel}'); print(df.nlargest(10, '{t.metric}'))"
    b.step([("exec", {"command": f'~/.venvs/data/bin/python -c "{py2}"'},
             C.frame("", t.header, [(str(i), *t.rows[i]) for i in top]), "text")])  # fmt: skip
    best, worst = stats[0], stats[-1]
    report = f"# {t.metric} by {t.group} — {name}\n\nRows: {len(t.rows)}\n\n| {t.group} | count | sum | mean |\n|---|---|---|---|\n"
    report += "".join(f"| {g} | {n} | {s:.2f} | {m:.2f} |\n" for g, n, s, m in stats)
    path = f"{b.ws}/reports/{name}_by_{t.group}.md"
    b.step([("write", {"path": path, "content": report}, b.written(path, report), "text")])
    b.final(f"**{best[0]}** leads on total {t.metric}: {best[2]:.2f} over {best[1]} rows (mean {best[3]:.2f}), "
            f"versus {worst[2]:.2f} for {worst[0]}, the lowest. All {len(t.rows)} rows of `{rel}` included; the single "
            f"largest row is {t.rows[top[0]][0]} ({t.rows[top[0]][mi]}). Table saved to `{path}`.")  # fmt: skip
    if r.random() < 0.5:
        b.user(f"And the mean {t.metric} per {t.group}, sorted ascending?")
        asc = sorted(stats, key=lambda s: s[3])
        b.step([("exec", {"command": f"~/.venvs/data/bin/python -c \"import pandas as pd; print(pd.read_csv('{rel}')"
                          f".groupby('{t.group}')['{t.metric}'].mean().sort_values())\""},
                 C.frame(t.group, [t.metric], [(g, m) for g, _, _, m in asc]), "text")])  # fmt: skip
        b.final(f"Lowest mean: {asc[0][0]} ({asc[0][3]:.2f}); highest: {asc[-1][0]} ({asc[-1][3]:.2f}).")


def task_coding(b: SessionBuilder) -> None:
    r, p = b.rng, b.prose
    repo = r.choice(("ledger-service", "jobrunner", "shipit", "notify-core"))
    root = f"{b.ws}/projects/{repo}"
    m = D.module(p, root)
    others = r.randint(60, 400)
    b.user(
        f"Tests in projects/{repo} started failing after yesterday's merge. Can you find and fix it?",
        new_task=True,
    )
    fail, ff = D.pytest_log(p, m, others, True, b.size(3_000, 30_000, "log", 0.15))
    b.step([("exec", {"command": f"cd projects/{repo} && pytest -q"}, fail, "log")], busy=20)
    opt = b.fit(5, [("skill", b.wants_skill("python-testing"), 1), ("diff", r.random() < 0.6, 1),
                    ("matrix", r.random() < 0.5, 1), ("memory", r.random() < 0.45, 1), ("recall", r.random() < 0.35, 1)])  # fmt: skip
    if "recall" in opt:
        b.recall(f"{repo} tests retry", 1)
    if "skill" in opt:
        b.skill("python-testing", 1)
    src_lines = m.source.split("\n")
    b.call(
        "grep",
        {"pattern": f"def {m.func}", "path": f"{root}/src"},
        D.grep(src_lines, m.path, (f"def {m.func}",)),
    )
    b.step([("read", {"path": m.path}, C.numbered(m.source), "code"),
            ("read", {"path": m.test_path}, C.numbered(m.test_source), "code")])  # fmt: skip
    if r.random() < 0.4:  # some agents rewrite the whole file rather than edit one line
        fixed_src = m.source.replace(m.old, m.new)
        b.step([("write", {"path": m.path, "content": fixed_src}, b.written(m.path, fixed_src), "text")])
    else:
        b.step([("edit", {"path": m.path, "edits": [{"oldText": m.old, "newText": m.new}]},
                 f"Successfully replaced 1 block(s) in {m.path}.", "text")])  # fmt: skip
    if "diff" in opt:
        rel = m.path.split(f"{root}/")[1]
        diff = (f"diff --git a/{rel} b/{rel}\nindex {r.getrandbits(28):07x}..{r.getrandbits(28):07x} 100644\n--- a/{rel}\n"
                f"+++ b/{rel}\n@@ -{m.bug_line - 2},4 +{m.bug_line - 2},4 @@\n {src_lines[m.bug_line - 3]}\n"
                f" {src_lines[m.bug_line - 2]}\n-{m.old}\n+{m.new}\n     return False\n")  # fmt: skip
        b.step([("exec", {"command": f"cd projects/{repo} && git diff"}, diff, "text")])
    ok, okf = D.pytest_log(p, m, others, False, b.size(2_000, 12_000, "log", 0.1))
    b.step([("exec", {"command": f"cd projects/{repo} && pytest -q"}, ok, "log")], busy=20)
    extra = ""
    if "matrix" in opt:
        cases = "\n".join(f"    ({a}, {m_}, {a < m_})," for a in range(0, 9) for m_ in (1, 3, 5, 8))
        content = (f"import pytest\n\nfrom {m.path.split('/src/')[1][:-3].replace('/', '.')} import "
                   f"{m.func.split('_')[-1].title()}, {m.func}\n\n\n@pytest.mark.parametrize(\n    "
                   f"'attempts, max_attempts, expected',\n    [\n{cases}\n    ],\n)\ndef test_{m.func}_matrix("
                   f"attempts, max_attempts, expected):\n    item = {m.func.split('_')[-1].title()}('m', status='failed', "
                   f"attempts=attempts)\n    assert {m.func}(item, max_attempts=max_attempts) is expected\n")  # fmt: skip
        path = m.test_path.replace(".py", "_matrix.py")
        b.step([("write", {"path": path, "content": content}, b.written(path, content), "text")])
        extra = f" I also added `{path}` with {content.count('),')} boundary cases."
    if "memory" in opt:
        note = f"- {b.date()}: `{m.func}` in `{m.path}` must stop at max_attempts (off-by-one fixed). <!-- project: path:{b.ws} -->\n"
        b.remember(note)
    fixed = (f"Fixed. `{ff['test']}` failed because `{m.func}` at `{m.path}:{m.bug_line}` used `<=`, allowing one "
            f"retry too many; it now uses `<`. The suite is green again: {okf['passed']} passed in {okf['duration']} "
            f"(was {ff['failed']} failed, {ff['passed']} passed).{extra}")  # fmt: skip
    b.final(fixed)
    if r.random() < 0.5:
        b.user("Can you run the whole suite with coverage for that package?")
        mod = m.path.split("/src/")[1].split("/")[0]
        rows = [
            (f"src/{mod}/{n}.py", r.randint(20, 400), r.randint(0, 60))
            for n in sorted({m.path.rsplit("/", 1)[1][:-3], *r.sample(D.ENTITIES, 5)})
        ]
        cov = "\n".join(
            f"{f:<40} {st:>6} {mi:>6} {100 * (st - min(mi, st)) // max(st, 1):>5}%" for f, st, mi in rows
        )
        total = sum(x[1] for x in rows), sum(min(x[2], x[1]) for x in rows)
        out = (f"{ok}\n---------- coverage: platform linux, python 3.12 ----------\n{'Name':<40} {'Stmts':>6} {'Miss':>6} "
               f"{'Cover':>6}\n{'-' * 62}\n{cov}\n{'-' * 62}\n{'TOTAL':<40} {total[0]:>6} {total[1]:>6} "
               f"{100 * (total[0] - total[1]) // total[0]:>5}%\n")  # fmt: skip
        cmd = f"cd projects/{repo} && pytest --cov=src/{mod} --cov-report=term"
        b.call("exec", {"command": cmd}, out, "log", busy=30)
        b.final(f"All green: {okf['passed']} passed; `src/{mod}` coverage is {100 * (total[0] - total[1]) // total[0]}% "
                f"({total[1]} of {total[0]} statements missed).")  # fmt: skip


SCRIPTS = {"research": task_research, "logs": task_logs, "csv": task_csv, "coding": task_coding}
