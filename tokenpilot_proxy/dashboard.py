"""`/tokenpilot/dashboard`: what TokenPilot saved, per session and in total, in a browser.

Server-rendered HTML and SVG, no script or style from anywhere else (it works offline):
the page's only script fetches `/tokenpilot/dashboard/view` (the same HTML, rendered
again) every `POLL_S` seconds, so the figures move while the agent works. The figures
come from the sessions' stats (`SessionStats`, `timeline`): tokens sent against what
the agent would have sent (TokenPilot's counts), the provider's cache hit rate, dollars
spent and saved at the model's list price (`tokenpilot.model_prices`), and evictions,
recalls and prefix breaks over time. `/tokenpilot/dashboard/data` is the same as JSON.
An artifact page shows an original beside the reduced form the model was sent.

Access follows `/tokenpilot/stats`: behind `--auth-token-env` the dashboard needs the
token (a browser opens `/tokenpilot/dashboard?token=...` once: the token goes into an
HttpOnly cookie for the dashboard's paths only and leaves the address bar); sessions
are listed (ids, per-session figures, artifacts) only behind the token or with
`--list-sessions`, else the page shows totals.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tokenpilot.messages.model import content_text
from tokenpilot.model_prices import prices_for, spent_and_saved
from tokenpilot_proxy.breaks import break_where
from tokenpilot_proxy.errors import foreign_derived, json_error
from tokenpilot_proxy.sessions import SessionStats, derived_owner
from tokenpilot_proxy.timeline import POINT, as_dicts, point

if TYPE_CHECKING:
    from tokenpilot_proxy.proxy_view import ProxyView

PREFIX = "/tokenpilot/dashboard"
COOKIE = "tokenpilot_dashboard"
POLL_S = 2.0
SHOWN_SESSIONS = 50  # the most recently active; totals count every session
SHOWN_CHARS = 200_000  # of an original or a reduced form on the artifact page
CHART_POINTS = 300

COLORS = {"raw": "#9aa5b1", "sent": "#2563eb", "hit": "#059669", "evict": "#d97706", "recall": "#7c3aed",
          "break": "#dc2626"}  # fmt: skip


def browser_authorized(request: web.Request, token: str) -> bool:
    """A dashboard path with the dashboard's cookie, or the page itself with `?token=`."""
    if not (request.path == PREFIX or request.path.startswith(PREFIX + "/")):
        return False
    given = request.cookies.get(COOKIE) or (request.query.get("token", "") if request.path == PREFIX else "")
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())


def figures(st: SessionStats, prices: Mapping[str, Any]) -> dict[str, Any]:
    """One session's (or a total's) figures, as the page shows them and `/data` returns them."""
    price = prices_for(st.model, prices)
    spent, saved = spent_and_saved(
        price, st.prompt_tokens, st.cached_tokens, st.output_tokens, st.tokens_saved
    )
    return {
        "model": st.model,
        "priced": price.known,
        "calls": st.calls,
        "prompt_tokens": st.prompt_tokens,
        "cached_tokens": st.cached_tokens,
        "output_tokens": st.output_tokens,
        "tokens_sent": st.tokens_sent,
        "tokens_raw": st.tokens_raw,
        "tokens_saved": st.tokens_saved,
        "hit_rate": round(st.hit_rate, 4),
        "spent_usd": spent,
        "saved_usd": saved,
        "evictions": st.evictions,
        "recalls": st.recalls,
        "prefix_breaks": st.prefix_breaks,
    }


_SUMMED = ("calls", "prompt_tokens", "cached_tokens", "output_tokens", "tokens_sent", "tokens_raw",
           "tokens_saved", "spent_usd", "saved_usd", "evictions", "recalls", "prefix_breaks")  # fmt: skip


def totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: sum(r[k] for r in rows) for k in _SUMMED}
    out["hit_rate"] = round(out["cached_tokens"] / out["prompt_tokens"], 4) if out["prompt_tokens"] else 0.0
    return out


def total_series(series: Mapping[str, list[dict[str, float]]]) -> list[dict[str, float]]:
    """The sessions' cumulative points summed over time (each session counts its latest point)."""
    events = sorted((p["t"], sid, p) for sid, pts in series.items() for p in pts)
    latest: dict[str, dict[str, float]] = {}
    run: dict[str, float] = {}
    out: list[dict[str, float]] = []
    for t, sid, p in events:
        old = latest.get(sid, {})
        for k, v in p.items():
            if k != "t":
                run[k] = run.get(k, 0) + v - old.get(k, 0)
        latest[sid] = p
        out.append({"t": t, **run})
    if len(out) > CHART_POINTS:  # keep the shape, not every call
        step = len(out) / CHART_POINTS
        out = [out[int(i * step)] for i in range(CHART_POINTS - 1)] + [out[-1]]
    return out


# ---------------------------------------------------------------------------
# SVG
# ---------------------------------------------------------------------------
def _fmt(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:g}" if v == int(v) else f"{v:.2f}"


def line_chart(
    title: str,
    lines: Sequence[tuple[str, str, Sequence[tuple[float, float]]]],
    *,
    width: int = 460,
    height: int = 180,
    percent: bool = False,
    dashed: bool = False,
) -> str:
    """An SVG chart of (label, color, [(t, value)]) lines against time, with its legend;
    `dashed`: lines after the first are dashed, so counts that coincide stay visible. A dot
    per measured point; between two, a step holds the earlier value (nothing looks measured)."""
    pad_l, pad_r, pad_t, pad_b = 48, 10, 40, 22
    pts = [p for _, _, ps in lines for p in ps]
    esc = html.escape
    head = f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="{esc(title)}">'
    head += f'<text x="{pad_l}" y="15" class="ct">{esc(title)}</text>'
    if not pts:
        return head + f'<text x="{pad_l}" y="{height // 2}" class="muted">no calls yet</text></svg>'
    t0, t1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = 1.0 if percent else max(max(p[1] for p in pts), 1)
    w, h = width - pad_l - pad_r, height - pad_t - pad_b

    def xy(t: float, v: float) -> str:
        x = pad_l + (w * (t - t0) / (t1 - t0) if t1 > t0 else w)
        return f"{x:.1f},{pad_t + h - h * v / y1:.1f}"

    out = [head]
    for frac in (0, 0.5, 1):
        y = pad_t + h - h * frac
        label = f"{100 * frac * y1:.0f}%" if percent else _fmt(frac * y1)
        out.append(f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{pad_l - 4}" y="{y + 4:.1f}" class="ax" text-anchor="end">{label}</text>')
    span = t1 - t0
    out.append(
        f'<text x="{pad_l}" y="{height - 6}" class="ax">{time.strftime("%H:%M:%S", time.localtime(t0))}</text>'
    )
    out.append(
        f'<text x="{width - pad_r}" y="{height - 6}" class="ax" text-anchor="end">+{span:.0f} s</text>'
    )
    lx = pad_l
    for n, (label, color, ps) in enumerate(lines):
        if ps:  # a value holds until the next measurement: steps, not slopes, and a dot per point
            steps = [ps[0]] + [q for prev, cur in zip(ps, ps[1:]) for q in ((cur[0], prev[1]), cur)]
            path = " ".join(xy(t, v) for t, v in steps)
            dash = f' stroke-dasharray="{("", "7 4", "2 3")[min(n, 2)]}"' if dashed and n else ""
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            for t, v in ps:
                x, y = xy(t, v).split(",")
                out.append(f'<circle class="pt" cx="{x}" cy="{y}" r="2.5" fill="{color}"/>')
        out.append(f'<rect x="{lx}" y="22" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{lx + 14}" y="31" class="ax">{esc(label)}</text>')
        lx += 14 + 7 * len(label) + 12
    out.append("</svg>")
    return "".join(out)


def charts(points: Sequence[Mapping[str, float]]) -> str:
    tokens = line_chart(
        "Prompt tokens, summed over calls",
        [
            ("would have sent", COLORS["raw"], [(p["t"], p["tokens_raw"]) for p in points]),
            ("sent", COLORS["sent"], [(p["t"], p["tokens_sent"]) for p in points]),
        ],
    )
    hit = line_chart(
        "Cache hit rate (provider usage, cumulative)",
        [
            (
                "hit rate",
                COLORS["hit"],
                [(p["t"], p["cached_tokens"] / p["prompt_tokens"]) for p in points if p["prompt_tokens"]],
            )
        ],
        percent=True,
    )
    events = line_chart(
        "Evictions, recalls and prefix breaks",
        [
            ("evictions", COLORS["evict"], [(p["t"], p["evictions"]) for p in points]),
            ("recalls", COLORS["recall"], [(p["t"], p["recalls"]) for p in points]),
            ("breaks", COLORS["break"], [(p["t"], p["prefix_breaks"]) for p in points]),
        ],
        dashed=True,
    )
    return f'<div class="charts">{tokens}{hit}{events}</div>'


def _bar(sent: int, raw: int) -> str:
    frac = sent / raw if raw else 1.0
    return (
        f'<svg width="120" height="10" class="bar"><rect width="120" height="10" fill="{COLORS["raw"]}"/>'
        f'<rect width="{120 * min(frac, 1):.1f}" height="10" fill="{COLORS["sent"]}"/></svg>'
    )


# ---------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------
def _v(key: str, value: Any, shown: str) -> str:
    """A figure with its exact value in `data-v` (what a test or a scraper reads)."""
    return f'<span class="v" data-k="{html.escape(key)}" data-v="{html.escape(str(value))}">{html.escape(shown)}</span>'


def _usd(v: float) -> str:
    return f"${v:,.4f}" if v < 1 else f"${v:,.2f}"


def _card(title: str, body: str, sub: str = "") -> str:
    return f'<div class="card"><div class="ct">{title}</div><div class="big">{body}</div><div class="muted">{sub}</div></div>'


def cards(t: Mapping[str, Any]) -> str:
    cut = 1 - t["tokens_sent"] / t["tokens_raw"] if t["tokens_raw"] else 0.0
    return '<div class="cards">' + "".join(
        (
            _card(
                "Tokens sent",
                _v("totals.tokens_sent", t["tokens_sent"], f"{t['tokens_sent']:,}"),
                "of " + _v("totals.tokens_raw", t["tokens_raw"], f"{t['tokens_raw']:,}")
                + f" the agent would have sent ({100 * cut:.1f}% less)",
            ),
            _card(
                "Cache hit rate",
                _v("totals.hit_rate", t["hit_rate"], f"{100 * t['hit_rate']:.1f}%"),
                _v("totals.cached_tokens", t["cached_tokens"], f"{t['cached_tokens']:,}")
                + " of " + _v("totals.prompt_tokens", t["prompt_tokens"], f"{t['prompt_tokens']:,}")
                + " prompt tokens",
            ),
            _card("Spent", _v("totals.spent_usd", round(t["spent_usd"], 6), _usd(t["spent_usd"])),
                  "at list prices"),
            _card("Saved", _v("totals.saved_usd", round(t["saved_usd"], 6), _usd(t["saved_usd"])),
                  _v("totals.tokens_saved", t["tokens_saved"], f"{t['tokens_saved']:,}") + " tokens kept out"),
            _card("Calls", _v("totals.calls", t["calls"], f"{t['calls']:,}"),
                  _v("totals.evictions", t["evictions"], str(t["evictions"])) + " eviction(s) · "
                  + _v("totals.recalls", t["recalls"], str(t["recalls"])) + " recall(s) · "
                  + _v("totals.prefix_breaks", t["prefix_breaks"], str(t["prefix_breaks"])) + " prefix break(s)"),
        )
    ) + "</div>"  # fmt: skip


class Dashboard:
    """The dashboard's routes on a proxy (`ProxyView`: its stats, prices, store and access rules)."""

    def __init__(self, proxy: ProxyView) -> None:
        self.proxy = proxy

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(PREFIX, self.page)
        app.router.add_get(PREFIX + "/view", self.view)
        app.router.add_get(PREFIX + "/data", self.data_view)
        app.router.add_get(PREFIX + "/artifact/{artifact_id}", self.artifact)

    @property
    def listed(self) -> bool:
        return self.proxy.auth_token is not None or self.proxy.settings.list_sessions

    def data(self, now: float | None = None) -> dict[str, Any]:
        """Figures per session (when listed) and in total; series of the most recent sessions.

        The totals count every session; the charts draw the `SHOWN_SESSIONS` most recently
        active ones, so a poll costs the same however many sessions the proxy holds."""
        now = time.time() if now is None else now
        stats = dict(self.proxy.stats)
        rows = {sid: figures(st, self.proxy.prices) for sid, st in stats.items()}
        seen = self.proxy.keeper.last_seen
        recent = sorted(stats, key=lambda sid: seen.get(sid, 0), reverse=True)[:SHOWN_SESSIONS]
        series = {
            sid: [*as_dicts(stats[sid].series), dict(zip(POINT, point(stats[sid], now)))] for sid in recent
        }
        body: dict[str, Any] = {
            "totals": totals(list(rows.values())),
            "series": total_series(series),
            "charted_sessions": len(recent),
            "sessions_total": len(stats),
            "sessions_listed": self.listed,
            "uptime_s": round(now - self.proxy.started, 1),
        }
        if self.listed:
            body["sessions"] = {
                sid: {
                    **rows[sid],
                    "series": series[sid],
                    "breaks": list(stats[sid].breaks),
                    "artifacts": list(stats[sid].artifacts),
                }
                for sid in recent
            }
        return body

    def render(self) -> str:
        d = self.data()
        parts = [cards(d["totals"]), charts(d["series"])]
        if d["charted_sessions"] < d["sessions_total"]:
            parts.append(
                f'<p class="muted">Charts: the {d["charted_sessions"]} most recently active of '
                f"{d['sessions_total']} sessions; the figures above count them all.</p>"
            )
        if d["sessions_listed"]:
            parts.append(self._sessions(d["sessions"]))
        else:
            parts.append(
                '<p class="muted">Sessions are listed behind the proxy\'s --auth-token-env, or with '
                "--list-sessions.</p>"
            )
        stamp = time.strftime("%H:%M:%S")
        parts.append(f'<p class="muted">updated {stamp}, every {POLL_S:g} s · up {d["uptime_s"]:.0f} s</p>')
        return "".join(parts)

    def _sessions(self, sessions: Mapping[str, Mapping[str, Any]]) -> str:
        esc = html.escape
        head = (
            "<tr><th>session</th><th>model</th><th>calls</th><th>sent / would have sent</th><th>hit rate</th>"
            "<th>spent</th><th>saved</th><th>evictions</th><th>recalls</th><th>breaks</th></tr>"
        )
        rows, details = [], []
        for sid, s in sessions.items():
            sent, raw, rate = s["tokens_sent"], s["tokens_raw"], s["hit_rate"]
            cached, prompt, kept = s["cached_tokens"], s["prompt_tokens"], s["tokens_saved"]
            model = esc(s["model"] or "?") + (
                "" if s["priced"] else ' <span class="muted">(default prices)</span>'
            )
            rows.append(
                f'<tr data-session="{esc(sid)}"><td class="sid">{esc(sid)}</td><td>{model}</td>'
                f"<td>{_v('calls', s['calls'], str(s['calls']))}</td>"
                f"<td>{_bar(sent, raw)} {_v('tokens_sent', sent, f'{sent:,}')}"
                f" / {_v('tokens_raw', raw, f'{raw:,}')}</td>"
                f"<td>{_v('hit_rate', rate, f'{100 * rate:.1f}%')}<br><span class='muted'>"
                f"{_v('cached_tokens', s['cached_tokens'], f'{cached:,}')} of "
                f"{_v('prompt_tokens', s['prompt_tokens'], f'{prompt:,}')}</span></td>"
                f"<td>{_v('spent_usd', round(s['spent_usd'], 6), _usd(s['spent_usd']))}</td>"
                f"<td>{_v('saved_usd', round(s['saved_usd'], 6), _usd(s['saved_usd']))}<br><span class='muted'>"
                f"{_v('tokens_saved', s['tokens_saved'], f'{kept:,}')} tokens</span></td>"
                f"<td>{_v('evictions', s['evictions'], str(s['evictions']))}</td>"
                f"<td>{_v('recalls', s['recalls'], str(s['recalls']))}</td>"
                f"<td>{_v('prefix_breaks', s['prefix_breaks'], str(s['prefix_breaks']))}</td></tr>"
            )
            details.append(self._detail(sid, s))
        table = f'<h2>Sessions</h2><table class="sessions">{head}{"".join(rows)}</table>'
        return table + "".join(details)

    def _detail(self, sid: str, s: Mapping[str, Any]) -> str:
        esc = html.escape
        out = [f'<details data-detail="{esc(sid)}"><summary>{esc(sid)}: breaks and artifacts</summary>']
        out.append(charts(s["series"]))
        if s["breaks"]:
            out.append(
                "<table class='breaks'><tr><th>call</th><th>likely cause</th><th>first differing message</th><th>what to do</th></tr>"
            )
            for b in reversed(s["breaks"]):
                where = esc(break_where(b))
                diff = f"{where}<br><code>{esc(str(b.get('before', '')))}</code> → <code>{esc(str(b.get('after', '')))}</code>"
                out.append(
                    f"<tr><td>{esc(str(b.get('call', '')))}</td><td>{esc(str(b.get('likely', '')))}"
                    f"<br><span class='muted'>{esc(str(b.get('cause', '')))}</span></td><td>{diff}</td>"
                    f"<td>{esc(str(b.get('fix', '')))}</td></tr>"
                )
            out.append("</table>")
        if s["artifacts"]:
            links = " ".join(
                f'<a href="{PREFIX}/artifact/{esc(a)}?session={esc(sid)}">{esc(a[:16])}</a>'
                for a in reversed(s["artifacts"])
            )
            out.append(f"<p>Artifacts (original beside reduced form): {links}</p>")
        out.append("</details>")
        return "".join(out)

    # -- handlers ---------------------------------------------------------------
    async def page(self, request: web.Request) -> web.Response:
        token = self.proxy.auth_token
        if token and "token" in request.query:  # to the cookie, out of the address bar
            found = web.HTTPFound(PREFIX)
            found.set_cookie(COOKIE, request.query["token"], path=PREFIX, httponly=True, samesite="Strict")
            raise found
        body = await asyncio.to_thread(self.render)
        page = PAGE.replace("{{body}}", body).replace("{{script}}", SCRIPT)
        return web.Response(text=page, content_type="text/html", charset="utf-8")

    async def view(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(self.render)
        return web.Response(text=body, content_type="text/html", charset="utf-8",
                            headers={"Cache-Control": "no-store"})  # fmt: skip

    async def data_view(self, request: web.Request) -> web.Response:
        return web.json_response(await asyncio.to_thread(self.data))

    async def artifact(self, request: web.Request) -> web.Response:
        """An original (from the store, not counted as the agent's recall) beside its reduced form."""
        if not self.listed:
            return json_error(403, "artifacts are shown behind --auth-token-env or with --list-sessions",
                              type_="permission_error", code="sessions_not_listed")  # fmt: skip
        sid = request.query.get("session", "")
        aid = request.match_info["artifact_id"]
        if not sid or (sid not in self.proxy.stats and not derived_owner(sid)[0]):
            return json_error(404, "no such session", type_="not_found", param="session")
        if (refused := foreign_derived(sid, request.headers)) is not None:
            return refused
        try:
            result = await asyncio.to_thread(self.proxy.pilot.store.recall, sid, aid)
        except OSError as exc:
            return json_error(503, f"the artifact store cannot be read: {exc}", type_="server_error",
                              code="store_unavailable")  # fmt: skip
        if not result.found:
            return json_error(404, result.note, type_="not_found", code="artifact_not_found")
        original = result.text or ""
        reduced = reduced_form(self.proxy.keeper.last_stable.get(sid) or [], aid)
        page = PAGE.replace("{{body}}", artifact_body(sid, aid, original, reduced)).replace("{{script}}", "")
        return web.Response(text=page, content_type="text/html", charset="utf-8")


def reduced_form(messages: Sequence[Any], aid: str) -> str | None:
    """The message of the last rendered prefix that carries the artifact's handle."""
    for m in messages:
        if isinstance(m, Mapping):
            text = content_text(m.get("content"))
            if aid in text:
                return text
    return None


def artifact_body(sid: str, aid: str, original: str, reduced: str | None) -> str:
    esc = html.escape

    def pane(title: str, text: str | None, key: str) -> str:
        if text is None:
            body = (
                '<p class="muted">not in the last rendered prompt (evicted, or the proxy restarted since)</p>'
            )
            n = 0
        else:
            n = len(text)
            shown = text[:SHOWN_CHARS] + ("\n[… shown up to here]" if n > SHOWN_CHARS else "")
            body = f'<pre data-pane="{key}">{esc(shown)}</pre>'
        return f'<div class="pane"><h2>{title} · {_v(key + "_chars", n, f"{n:,} chars")}</h2>{body}</div>'

    head = f'<p><a href="{PREFIX}">← dashboard</a> · session <code>{esc(sid)}</code> · artifact <code>{esc(aid)}</code></p>'
    return (
        head
        + '<div class="panes">'
        + pane("Original", original, "original")
        + pane("Sent to the model", reduced, "reduced")
        + "</div>"
    )


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>TokenPilot</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:20px;color:#1f2933;background:#f7f8fa}
h1{font-size:20px;margin:0 0 12px}h2{font-size:16px;margin:18px 0 8px}
.cards{display:flex;flex-wrap:wrap;gap:12px}.card{background:#fff;border:1px solid #e4e7eb;border-radius:8px;padding:10px 14px;min-width:190px}
.ct{font-size:12px;color:#52606d;fill:#52606d}.big{font-size:24px;font-weight:600;margin:2px 0}
.muted{color:#7b8794;fill:#7b8794;font-size:12px}.charts{display:flex;flex-wrap:wrap;gap:12px;margin-top:14px}
.chart{background:#fff;border:1px solid #e4e7eb;border-radius:8px}.grid{stroke:#e4e7eb}.ax{font-size:10px;fill:#7b8794}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #e4e7eb;padding:4px 8px;text-align:left;vertical-align:top}
.sid{font-family:ui-monospace,monospace;font-size:12px;max-width:260px;overflow-wrap:anywhere}
details{margin:10px 0;background:#fff;border:1px solid #e4e7eb;border-radius:8px;padding:6px 10px}
code{font-size:12px;background:#f0f4f8;overflow-wrap:anywhere}.panes{display:flex;gap:12px}
.pane{flex:1;min-width:0}pre{background:#fff;border:1px solid #e4e7eb;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere;max-height:80vh;overflow:auto;font-size:12px}
</style></head>
<body><h1>TokenPilot</h1><div id="main">{{body}}</div>{{script}}</body></html>
"""

SCRIPT = """<script>
async function refresh() {
  const open = [...document.querySelectorAll("details[open]")].map(d => d.dataset.detail);
  try {
    const r = await fetch("dashboard/view", {credentials: "same-origin", cache: "no-store"});
    if (!r.ok) return;
    document.getElementById("main").innerHTML = await r.text();
    for (const d of document.querySelectorAll("details")) if (open.includes(d.dataset.detail)) d.open = true;
  } catch (e) { /* the proxy restarts: try again at the next tick */ }
}
setInterval(refresh, __POLL_MS__);
</script>""".replace("__POLL_MS__", str(int(POLL_S * 1000)))
