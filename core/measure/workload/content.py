"""Generated tool outputs for the workload: web pages, search results, transcripts, CSV files.

Every generator takes a `Prose` (and through it the seeded rng) and a size target in
characters, and returns the text plus the facts in it (titles, identifiers, numbers)
that the scripted assistant later quotes. Logs and code live in `devtools.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .prose import ADJECTIVES, GENERAL_NOUNS, ORGS, PLACES, Prose

# --------------------------------------------------------------------------- web pages

NAV = "News|Analysis|Data|Policy|Markets|Technology|Climate|Cities|Opinion|Podcasts|Events|Newsletters|Jobs|About"
CSS_PROPS = (
    ("margin", "0 auto|0|1.5rem 0|0 0 1rem|4px 8px"),
    ("padding", "0|12px 16px|1rem|0.25rem 0.5rem|24px"),
    ("color", "#1a1a1a|#333|#0b5cad|#6b7280|#fff|var(--fg)"),
    ("background", "#fff|#f7f7f8|transparent|var(--bg-muted)|#0b5cad"),
    ("font-size", "14px|1rem|1.125rem|0.875rem|clamp(1.5rem,4vw,2.5rem)"),
    ("display", "flex|grid|block|inline-flex|none"),
    ("border-radius", "4px|8px|999px|0"),
    ("line-height", "1.4|1.6|1.25|24px"),
)
CSS_CLASSES = (
    "site-header main-nav logo search cookie-consent btn btn-accept layout post byline hero "
    "breadcrumbs data-table ad-slot sidebar newsletter most-read site-footer footer-col share-bar "
    "tag-list pull-quote related-card author-box toc"
).split()


def _hex(p: Prose, n: int = 8) -> str:
    return f"{p.rng.getrandbits(4 * n):0{n}x}"


def _slug(text: str) -> str:
    out = "".join(c.lower() if c.isalnum() else "-" for c in text)
    return "-".join(s for s in out.split("-") if s)[:60]


def _css(p: Prose, rules: int) -> str:
    r = p.rng
    lines = [":root{--fg:#111;--bg-muted:#f3f4f6;--accent:#0b5cad}"]
    for _ in range(rules):
        sel = "." + r.choice(CSS_CLASSES)
        if r.random() < 0.4:
            sel += " " + r.choice(("a", "p", "li", "h2", "img", "button", "td", ":hover", "> span"))
        props = ";".join(f"{k}:{r.choice(v.split('|'))}" for k, v in r.sample(CSS_PROPS, r.randint(2, 5)))
        if r.random() < 0.15:
            lines.append(f"@media (max-width:{r.choice((480, 768, 1024))}px){{{sel}{{{props}}}}}")
        else:
            lines.append(f"{sel}{{{props}}}")
    return "\n".join(lines)


def _link(p: Prose, site: str, text: str) -> str:
    return f'<a href="https://{site}/{p.rng.choice(("analysis", "data", "news", "explainer"))}/{_slug(text)}">{text}</a>'


def _para(p: Prose, site: str) -> str:
    sents = [p.sentence() for _ in range(p.rng.randint(3, 6))]
    i = p.rng.randrange(len(sents))
    words = sents[i].split(" ")
    if len(words) > 6:
        j = p.rng.randrange(1, len(words) - 3)
        words[j : j + 3] = [_link(p, site, " ".join(words[j : j + 3]))]
        sents[i] = " ".join(words)
    if p.rng.random() < 0.4:
        k = p.rng.randrange(len(sents))
        sents[k] = f"<strong>{sents[k]}</strong>"
    return "<p>" + " ".join(sents) + "</p>"


def _table(p: Prose, unit: str) -> tuple[str, list[tuple[str, str, str]]]:
    r = p.rng
    years = sorted(r.sample(range(2019, 2027), 3))
    rows: list[tuple[str, str, str]] = []
    body = []
    for ent in r.sample(ORGS + PLACES, r.randint(5, 9)):
        vals = [f"{r.randint(40, 9800):,}" for _ in years]
        rows.append((ent, str(years[-1]), f"{vals[-1]} {unit}"))
        cells = "".join(f"<td>{v}</td>" for v in vals)
        body.append(f'<tr><th scope="row">{ent}</th>{cells}<td>{p.pct()}</td></tr>')
    head = "".join(f'<th scope="col">{y}</th>' for y in years)
    html = (
        f'<table class="data-table"><caption>{p.phrase().capitalize()} ({unit})</caption>'
        f'<thead><tr><th scope="col">Entity</th>{head}<th scope="col">Change</th></tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )
    return html, rows


@dataclass
class Page:
    url: str
    title: str
    html: str
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    stat: str = ""
    author: str = ""


def html_page(p: Prose, *, site: str, url: str, title: str, unit: str, date: str, target: int) -> Page:
    """A full HTML document of about `target` characters: head, chrome, article, sidebar, footer."""
    r = p.rng
    site_name = site.split(".")[-2].replace("-", " ").title()
    author = p.person()
    head = (
        '<!DOCTYPE html>\n<html lang="en" class="no-js">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title} | {site_name}</title>\n"
        f'<meta name="description" content="{p.sentence()}">\n'
        f'<meta property="og:title" content="{title}">\n<meta property="og:url" content="{url}">\n'
        f'<meta property="og:image" content="https://{site}/media/{_hex(p, 12)}.jpg">\n'
        f'<link rel="canonical" href="{url}">\n<link rel="preconnect" href="https://fonts.gstatic.com" crossorigin>\n'
        f'<link rel="stylesheet" href="https://{site}/assets/css/main.{_hex(p)}.css">\n'
        f"<style>\n{_css(p, r.randint(40, 110))}\n</style>\n"
        '<script type="application/ld+json">'
        + json.dumps(
            {
                "@context": "https://schema.org",
                "@type": "NewsArticle",
                "headline": title,
                "datePublished": date,
                "author": {"@type": "Person", "name": author},
                "publisher": {"@type": "Organization", "name": site_name},
            }
        )
        + "</script>\n"
        f"<script>(function(w,d,s,l,i){{w[l]=w[l]||[];w[l].push({{'gtm.start':{r.randint(10**12, 10**13)},"
        f"event:'gtm.js'}});var f=d.getElementsByTagName(s)[0],j=d.createElement(s);j.async=true;"
        f"j.src='https://www.googletagmanager.com/gtm.js?id='+i;f.parentNode.insertBefore(j,f);}})"
        f"(window,document,'script','dataLayer','GTM-{_hex(p, 6).upper()}');</script>\n</head>\n"
    )
    nav = "".join(
        f'<li><a href="/{n.lower()}">{n}</a></li>' for n in r.sample(NAV.split("|"), r.randint(8, 13))
    )
    chrome = (
        '<body class="article-page">\n<div id="cookie-banner" class="cookie-consent" role="dialog" aria-live="polite">'
        f"<p>We and our {r.randint(40, 900)} partners use cookies to measure traffic and personalise content. "
        'See our <a href="/privacy">privacy policy</a>.</p><button class="btn btn-accept" data-consent="all">'
        'Accept all</button><button class="btn" data-consent="manage">Manage preferences</button></div>\n'
        f'<header class="site-header"><a class="logo" href="/"><svg width="28" height="28" viewBox="0 0 28 28">'
        f'<path d="M{r.randint(1, 9)} 4h{r.randint(8, 18)}v20H4z"/></svg>{site_name}</a>'
        f'<nav class="main-nav" aria-label="Primary"><ul>{nav}</ul></nav>'
        '<form class="search" action="/search"><input type="search" name="q" placeholder="Search"></form></header>\n'
    )
    article = [
        '<div class="layout">\n<main id="content"><article class="post" itemscope itemtype="https://schema.org/Article">',
        f'<nav class="breadcrumbs"><a href="/">Home</a> › <a href="/analysis">Analysis</a> › {title}</nav>',
        f'<h1 itemprop="headline">{title}</h1>',
        f'<div class="byline">By <a rel="author" href="/authors/{_slug(author)}">{author}</a> · '
        f'<time datetime="{date}">{date}</time> · {r.randint(4, 16)} min read</div>',
        f'<figure class="hero"><img src="https://{site}/media/{_hex(p, 12)}-960.jpg" srcset="https://{site}/media/'
        f'{_hex(p, 12)}-480.jpg 480w, https://{site}/media/{_hex(p, 12)}-960.jpg 960w" alt="{p.phrase()}">'
        f"<figcaption>{p.sentence()}</figcaption></figure>",
    ]
    related = "".join(f"<li>{_link(p, site, p.title())}</li>" for _ in range(r.randint(6, 10)))
    sidebar = (
        '</article></main>\n<aside class="sidebar"><section class="related"><h2>Related</h2>'
        f"<ul>{related}</ul></section>"
        '<section class="newsletter"><h2>The weekly briefing</h2><form action="/subscribe" method="post">'
        '<input type="email" name="email" required><button class="btn">Sign up</button></form></section></aside>\n</div>\n'
    )
    cols = "".join(
        f'<div class="footer-col"><h3>{n}</h3><ul>'
        + "".join(f'<li><a href="/{_slug(n)}/{_slug(x)}">{x}</a></li>' for x in r.sample(GENERAL_NOUNS, 5))
        + "</ul></div>"
        for n in ("Company", "Topics", "Resources", "Legal")
    )
    state = {"page": "article", "id": _hex(p, 16), "tags": r.sample(list(p.nouns), min(4, len(p.nouns)))}
    footer = (
        f'<footer class="site-footer">{cols}<p>© 2026 {site_name}. All rights reserved.</p></footer>\n'
        f'<script src="https://{site}/assets/js/app.{_hex(p)}.js" defer></script>\n'
        f"<script>window.__APP_STATE__ = {json.dumps(state)};</script>\n</body>\n</html>\n"
    )
    fixed = len(head) + len(chrome) + len(sidebar) + len(footer)
    size = fixed + sum(len(x) for x in article)
    rows: list[tuple[str, str, str]] = []
    stat = ""
    section = 0
    while size < target:
        section += 1
        heading = p.phrase().capitalize()
        block = [f'<h2 id="{_slug(heading)}">{heading}</h2>']
        block += [_para(p, site) for _ in range(r.randint(2, 5))]
        if section == 2 or (section > 2 and not rows):
            tbl, rows = _table(p, unit)
            block.append(tbl)
        elif section == 1:
            stat = p.sentence()
            block.append(
                f'<blockquote class="pull-quote"><p>{stat}</p><cite>{p.person()}</cite></blockquote>'
            )
        elif r.random() < 0.3:
            block.append(
                "<ul>" + "".join(f"<li>{p.sentence()}</li>" for _ in range(r.randint(3, 6))) + "</ul>"
            )
        elif r.random() < 0.3:
            block.append(
                f'<div class="ad-slot" data-ad-unit="/{r.randint(10**7, 10**8)}/article_mid_{section}"></div>'
            )
        chunk = "\n".join(block)
        article.append(chunk)
        size += len(chunk) + 1
    html = head + chrome + "\n".join(article) + "\n" + sidebar + footer
    return Page(url, title, html, rows, stat, author)


def blocked_page(p: Prose, url: str) -> str:
    """The small interstitial a paywalled or bot-protected site sends instead of the article."""
    r = p.rng
    ray = _hex(p, 16)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Just a moment...</title>'
        '<meta name="robots" content="noindex,nofollow"><style>body{font-family:system-ui;margin:0}'
        '.main{max-width:60rem;margin:8rem auto;padding:0 1.5rem}</style></head><body><div class="main">'
        f"<h1>{url.split('/')[2]}</h1><h2>Verifying you are human. This may take a few seconds.</h2>"
        f"<noscript>Enable JavaScript and cookies to continue</noscript><p>Ray ID: <code>{ray}</code> · "
        f"Performance &amp; security by a CDN · {r.randint(100, 999)} ms</p></div>"
        f"<script>window._cf_chl_opt={{cvId:'3',cType:'managed',cRay:'{ray}',cH:'{_hex(p, 40)}'}};</script>"
        "</body></html>"
    )


def search_results(p: Prose, query: str, hits: list[tuple[str, str]]) -> str:
    """A web_search result as JSON text: the given (url, title) hits plus a few distractors."""
    r = p.rng
    results = [
        {"title": t, "url": u, "description": p.sentence(), "age": f"{r.randint(1, 40)} days ago"}
        for u, t in hits
    ]
    for _ in range(r.randint(2, 4)):
        t = p.title()
        results.insert(
            r.randint(0, len(results)),
            {
                "title": t,
                "url": f"https://www.{r.choice(('medium.com', 'reddit.com/r/energy', 'wikipedia.org/wiki'))}/{_slug(t)}",
                "description": p.sentence(),
                "age": f"{r.randint(1, 300)} days ago",
            },
        )
    return json.dumps(
        {"query": query, "provider": "brave", "count": len(results), "results": results}, indent=2
    )


# --------------------------------------------------------------------------- meeting transcripts

FILLERS = (
    "Yeah, so",
    "Right.",
    "Okay.",
    "I think",
    "To be honest,",
    "Quick point:",
    "Sure.",
    "Hmm,",
    "Agreed.",
)
TASK_VERBS = (
    "migrate",
    "document",
    "benchmark",
    "review",
    "rotate",
    "deprecate",
    "load-test",
    "draft",
    "triage",
)


@dataclass
class Transcript:
    text: str
    title: str
    date: str
    attendees: list[tuple[str, str]]
    actions: list[tuple[str, str, str, str]]  # owner, task, ticket, due
    decisions: list[str]
    tickets: list[str]


def transcript(
    p: Prose, *, title: str, date: str, project: str, due_days: list[str], target: int
) -> Transcript:
    """A meeting transcript in markdown with speakers, timestamps, decisions and action items."""
    r = p.rng
    roles = (
        "Engineering lead",
        "Product manager",
        "SRE",
        "Data analyst",
        "Designer",
        "Finance partner",
        "QA lead",
    )
    attendees = [(p.person(), role) for role in r.sample(roles, r.randint(4, 7))]
    agenda = [p.phrase().capitalize() for _ in range(r.randint(4, 7))]
    head = [
        f"# {title} — {date}",
        "",
        "**Attendees:** " + ", ".join(f"{n} ({ro})" for n, ro in attendees),
        f"**Recording:** recording.m4a ({r.randint(0, 1):02d}:{r.randint(10, 59):02d}:{r.randint(0, 59):02d})",
        "**Agenda:** " + "; ".join(f"{i + 1}. {a}" for i, a in enumerate(agenda)),
        "",
        "---",
    ]
    text_len = sum(len(x) + 1 for x in head)
    lines = head
    actions: list[tuple[str, str, str, str]] = []
    decisions: list[str] = []
    tickets: list[str] = []
    t = r.randint(5, 40)
    item = 0
    while text_len < target:
        if item < len(agenda) and (item == 0 or r.random() < 0.12):
            lines += ["", f"## {item + 1}. {agenda[item]}", ""]
            item += 1
        who = r.choice(attendees)[0]
        t += r.randint(8, 95)
        parts = [r.choice(FILLERS)] if r.random() < 0.5 else []
        parts += [p.sentence() for _ in range(r.randint(1, 4))]
        roll = r.random()
        if roll < 0.035:
            ticket = f"{project}-{r.randint(1000, 4999)}"
            owner = r.choice(attendees)[0]
            task = f"{r.choice(TASK_VERBS)} the {p.phrase()}"
            due = r.choice(due_days)
            actions.append((owner, task, ticket, due))
            tickets.append(ticket)
            parts.append(f"Action item: {owner} will {task}, tracked in {ticket}, due {due}.")
        elif roll < 0.06:
            dec = f"we go with the {r.choice(ADJECTIVES)} {r.choice(p.nouns)} option and revisit it in {r.randint(2, 8)} weeks"
            decisions.append(dec)
            parts.append(f"So the decision is: {dec}.")
        elif roll < 0.12:
            ticket = f"{project}-{r.randint(1000, 4999)}"
            tickets.append(ticket)
            parts.append(f"That's still open in {ticket}, last update was {r.randint(2, 19)} days ago.")
        line = f"**[{t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}] {who}:** " + " ".join(parts)
        lines.append(line)
        text_len += len(line) + 1
    if not actions:
        owner = attendees[0][0]
        ticket = f"{project}-{r.randint(1000, 4999)}"
        actions.append((owner, "circulate the notes", ticket, due_days[0]))
        tickets.append(ticket)
        lines.append(
            f"**[{t // 3600:02d}:{t // 60 % 60:02d}:{(t + 30) % 60:02d}] {owner}:** Action item: I'll circulate the notes, {ticket}."
        )
    if not decisions:
        decisions.append(f"keep the current {p.nouns[0]} plan until the next review")
    return Transcript("\n".join(lines) + "\n", title, date, attendees, actions, decisions, tickets)


# --------------------------------------------------------------------------- CSV data

SCHEMAS: dict[str, dict[str, Any]] = {
    "sales": {
        "cols": ["order_date", "region", "product", "channel", "units", "unit_price", "revenue"],
        "group": "region",
        "cats": {
            "region": ["EMEA", "APAC", "NA-East", "NA-West", "LATAM"],
            "channel": ["web", "retail", "partner"],
        },
        "metric": "revenue",
    },
    "tickets": {
        "cols": [
            "ticket_id",
            "created_at",
            "priority",
            "team",
            "first_response_min",
            "resolution_hours",
            "csat",
        ],
        "group": "team",
        "cats": {
            "team": ["billing", "platform", "mobile", "identity", "data"],
            "priority": ["P1", "P2", "P3", "P4"],
        },
        "metric": "resolution_hours",
    },
    "sensors": {
        "cols": ["timestamp", "site", "sensor_id", "temp_c", "humidity_pct", "co2_ppm"],
        "group": "site",
        "cats": {"site": ["lab-north", "lab-south", "warehouse", "office-3f", "datacenter-b"]},
        "metric": "co2_ppm",
    },
}


@dataclass
class Table:
    kind: str
    header: list[str]
    rows: list[list[str]]
    text: str
    group: str
    metric: str


def csv_table(p: Prose, kind: str, rows: int, month: int) -> Table:
    r = p.rng
    sch = SCHEMAS[kind]
    cats = sch["cats"]
    products = [f"{w}-{r.randint(100, 999)}" for w in r.sample(list(p.nouns) + GENERAL_NOUNS[:10], 6)]
    out: list[list[str]] = []
    for i in range(rows):
        day = 1 + i * 28 // rows
        if kind == "sales":
            units = r.randint(1, 240)
            price = round(r.uniform(4, 480), 2)
            out.append(
                [
                    f"2026-{month:02d}-{day:02d}",
                    r.choice(cats["region"]),
                    r.choice(products),
                    r.choice(cats["channel"]),
                    str(units),
                    f"{price:.2f}",
                    f"{units * price:.2f}",
                ]
            )
        elif kind == "tickets":
            out.append(
                [
                    f"TCK-{40000 + i * 7 + r.randint(0, 6)}",
                    f"2026-{month:02d}-{day:02d}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00Z",
                    r.choice(cats["priority"]),
                    r.choice(cats["team"]),
                    str(r.randint(1, 600)),
                    f"{r.uniform(0.2, 96):.1f}",
                    str(r.randint(1, 5)),
                ]
            )
        else:
            out.append(
                [
                    f"2026-{month:02d}-{day:02d}T{r.randint(0, 23):02d}:{r.choice((0, 15, 30, 45)):02d}:00Z",
                    r.choice(cats["site"]),
                    f"sn-{r.randint(100, 140)}",
                    f"{r.uniform(17, 31):.2f}",
                    f"{r.uniform(20, 70):.1f}",
                    str(r.randint(380, 1900)),
                ]
            )
    text = ",".join(sch["cols"]) + "\n" + "\n".join(",".join(row) for row in out) + "\n"
    return Table(kind, list(sch["cols"]), out, text, sch["group"], sch["metric"])


def group_stats(t: Table) -> list[tuple[str, int, float, float]]:
    """(group, count, sum, mean) of the table's metric per group, largest sum first."""
    gi, mi = t.header.index(t.group), t.header.index(t.metric)
    acc: dict[str, list[float]] = {}
    for row in t.rows:
        acc.setdefault(row[gi], []).append(float(row[mi]))
    stats = [(g, len(v), sum(v), sum(v) / len(v)) for g, v in acc.items()]
    return sorted(stats, key=lambda s: -s[2])


def frame(index_name: str, cols: list[str], rows: list[tuple[Any, ...]]) -> str:
    """Rows printed the way pandas prints a small DataFrame with a named index."""
    cells = [[str(x) if not isinstance(x, float) else f"{x:.2f}" for x in row] for row in rows]
    w0 = max([len(index_name)] + [len(c[0]) for c in cells])
    widths = [max([len(c)] + [len(row[i + 1]) for row in cells]) for i, c in enumerate(cols)]
    lines = [" " * w0 + "".join(f"  {c:>{w}}" for c, w in zip(cols, widths))]
    lines.append(f"{index_name:<{w0}}" + "".join("  " + " " * w for w in widths))
    for row in cells:
        lines.append(f"{row[0]:<{w0}}" + "".join(f"  {v:>{w}}" for v, w in zip(row[1:], widths)))
    return "\n".join(lines)


def numbered(text: str, start: int = 1) -> str:
    """`cat -n` style line numbers, as OpenClaw's read returns a text file."""
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(text.rstrip("\n").split("\n"), start))
