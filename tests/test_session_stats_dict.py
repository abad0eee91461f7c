"""`SessionStats.to_dict` is written on every save: built directly instead of through
`dataclasses.asdict`, it must still give asdict's fields, order and copies."""

from __future__ import annotations

from dataclasses import asdict

from tokenpilot_proxy.sessions import SessionStats


def test_to_dict_is_asdict_with_the_hit_rate_and_shares_nothing() -> None:
    stats = SessionStats(
        calls=3,
        prompt_tokens=200,
        cached_tokens=150,
        model="gpt-5",
        series=[[1.0, 2.0, 3]] * 4,
        breaks=[{"at": 1, "why": "eviction", "detail": ["a", {"b": 1}]}],
        artifacts=["art_1", "art_2"],
    )
    got = stats.to_dict()
    want = {**asdict(stats), "hit_rate": 0.75}
    assert got == want and list(got) == list(want)
    got["series"][0].append(9.0)
    got["breaks"][0]["detail"][1]["b"] = 2
    got["artifacts"].clear()
    assert stats.series[0] == [1.0, 2.0, 3] and stats.breaks[0]["detail"][1] == {"b": 1} and stats.artifacts
    assert SessionStats.from_dict(stats.to_dict()) == stats
