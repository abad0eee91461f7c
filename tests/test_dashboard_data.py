"""The dashboard's data without a browser: who sees sessions, and bounded per-session series."""

from __future__ import annotations

import aiohttp

from tokenpilot_proxy import ProxySettings, timeline
from tokenpilot_proxy.demo import FakeUpstream
from tokenpilot_proxy.server import RunningProxy
from tokenpilot_proxy.sessions import SessionStats


async def test_without_token_or_list_sessions_the_dashboard_shows_totals_only(tmp_path):
    async with FakeUpstream(cache_min_tokens=0, cache_step_tokens=1) as up:
        settings = ProxySettings(upstream=up.url, port=0, store_dir=tmp_path / "s", state_dir=tmp_path / "t")
        async with RunningProxy(settings) as proxy, aiohttp.ClientSession() as http:
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                    "prompt_cache_key": "alice-secret-session"}  # fmt: skip
            async with http.post(proxy.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200
            async with http.get(proxy.url + "/tokenpilot/dashboard") as r:
                page = await r.text()
            assert r.status == 200 and "alice-secret-session" not in page
            assert 'data-k="totals.calls" data-v="1"' in page and "<script>" in page
            assert "http://" not in page.replace(proxy.url, "") and "https://" not in page  # nothing fetched
            async with http.get(proxy.url + "/tokenpilot/dashboard/data") as r:
                data = await r.json()
            assert "sessions" not in data and data["totals"]["calls"] == 1
            async with http.get(
                proxy.url + "/tokenpilot/dashboard/artifact/art_x", params={"session": "alice-secret-session"}
            ) as r:
                assert r.status == 403


def test_a_session_series_stays_bounded_and_spans_the_whole_session():
    stats = SessionStats()
    for call in range(1, 1001):
        stats.calls = call
        timeline.add_point(stats, now=float(call))
    assert len(stats.series) <= timeline.SERIES_POINTS
    times = [p[0] for p in stats.series]
    assert times == sorted(times) and times[0] == 1.0 and times[-1] == 1000.0
    assert [p[1] for p in stats.series] == [int(t) for t in times]  # each point is that call's totals


def test_a_break_whose_first_difference_is_unknown_says_why_not_hash_question_mark():
    """Issue #41: a break's detail showed `#? (?)` where no message could be located."""
    from tokenpilot_proxy.breaks import break_where, diagnose

    cur = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    after_restart = diagnose("history rewritten", None, cur, call=3)
    assert "previous request is not kept" in break_where(after_restart)
    shorter = diagnose("history rewritten", [*cur, {"role": "user", "content": "v"}], cur, call=4)
    assert break_where(shorter) == "#2 (user)"  # the first message dropped
    same = diagnose("history rewritten", cur, list(cur), call=4)
    assert "the messages of both requests are the same" in break_where(same)
    located = diagnose("history rewritten", cur, [cur[0], {"role": "user", "content": "w"}], call=5)
    assert break_where(located) == "#1 (user)"
    assert break_where({"index": None, "role": "?"}).startswith("not located")  # an old record
    for b in (after_restart, shorter, same, located):
        assert "#?" not in break_where(b) and "(?)" not in break_where(b)


def test_charts_draw_measured_points_and_steps_between_them():
    """Issue #41: no slope between two sparse points as if it had been measured."""
    import re

    from tokenpilot_proxy.dashboard import line_chart

    svg = line_chart("t", [("n", "#000", [(0.0, 0.0), (10.0, 5.0), (20.0, 5.0)])])
    assert svg.count('<circle class="pt"') == 3  # one dot per measured point, no more
    (points,) = re.findall(r'<polyline points="([^"]+)"', svg)
    xy = [tuple(map(float, p.split(","))) for p in points.split()]
    for (x0, y0), (x1, y1) in zip(xy, xy[1:]):
        assert x0 == x1 or y0 == y1  # horizontal or vertical: a step, never a slope
