"""`evictable_bundles` in one backward pass gives exactly what the pairwise scan over
later turns gave (kept here as the reference), on random records with tricky spellings
of paths; and its cost per turn stays flat (timing lives in the benchmark, not here)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.lifecycle.segments import (
    BundleRecord,
    SegmentRules,
    _same_file,
    evictable_bundles,
    last_uses,
    stale,
)

PATHS = [
    "a.py",
    "./a.py",
    "src/a.py",
    "/repo/src/a.py",
    "../a.py",
    "./.env",
    "x/env",
    "env",
    "dir/",
    ".",
    "b.py",
    "src/b.py",
]
REFS = ["a.py", "b.py", "env", "x1", "x2", "src/a.py"]


def _reference(records: Sequence[BundleRecord], rules: SegmentRules, upto: int | None) -> dict[int, str]:
    """The pairwise scan `evictable_bundles` did before: every turn against all later ones."""
    n = len(records) if upto is None else min(upto, len(records))
    if not rules.enabled or n == 0:
        return {}
    recs = records[:n]
    last_use = last_uses(recs)
    out: dict[int, str] = {}
    for i, r in enumerate(recs):
        if not r.has_calls or n - 1 - i < rules.min_age_turns:
            continue
        later = recs[i + 1 :]
        reason = None
        if rules.superseded_reads and r.kind == "read" and r.paths:
            for path in r.paths:
                for o in later:
                    if not any(_same_file(path, p) for p in o.paths) or o.failed or o.repeat:
                        continue
                    if o.kind == "read" and (o.whole_read or o.call_key == r.call_key):
                        break
                    if (o.kind == "write" and o.whole_read) or (
                        o.kind == "edit" and rules.edit_supersedes_read
                    ):
                        break
                else:
                    break
            else:
                reason = "superseded read: the file was read or written again later"
        if rules.superseded_writes and r.kind == "write" and r.whole_read and r.authored and r.paths:
            if all(
                any(
                    o.kind in ("read", "write")
                    and o.whole_read
                    and not o.failed
                    and not o.repeat
                    and any(_same_file(path, p) for p in o.paths)
                    for o in later
                )
                for path in r.paths
            ):
                reason = "superseded write: the file was written whole or read whole again later"
        if reason is None and rules.superseded_commands and r.kind in ("command", "search"):
            if any(o.call_key == r.call_key and not o.repeat for o in later):
                reason = "superseded command: the same call ran again later"
        if reason is None and rules.consumed_listings and r.kind == "search" and r.hits:
            opened = {p for o in later if o.kind in ("read", "edit", "write") for p in o.paths}
            named = set().union(*(o.uses for o in later)) if later else set()
            reason = "consumed listing: its hits were opened later or never named again"
            for hit in r.hits:
                if any(_same_file(hit, p) for p in opened):
                    continue
                if hit in named:
                    reason = None
                    break
            if reason is not None and last_use[i] > i and not opened:
                reason = None
        acted = any(o.kind in ("write", "edit") and not o.failed for o in later) or (
            rules.answer_is_action
            and r.kind != "read"
            and any(not o.has_calls or o.opens_with_user for o in later)
        )
        if reason is None and (acted or not rules.stale_after_action):
            reason = stale(r, n - 1 - last_use[i], rules)  # unchanged by the backward pass
        if reason is not None:
            out[i] = reason
    return out


@st.composite
def record(draw, i: int) -> BundleRecord:
    kind = draw(st.sampled_from(["read", "write", "edit", "search", "command", "none"]))
    paths = tuple(draw(st.lists(st.sampled_from(PATHS), max_size=2))) if kind != "none" else ()
    return BundleRecord(
        turn_id=f"t{i}",
        opens_with_user=draw(st.booleans()),
        has_calls=kind != "none" or draw(st.booleans()),
        kind=kind,
        paths=paths,
        whole_read=draw(st.booleans()),
        call_key=draw(st.sampled_from(["k1", "k2", "k3"])),
        uses=frozenset(draw(st.lists(st.sampled_from(REFS), max_size=3))),
        said=frozenset(),
        provides=frozenset(draw(st.lists(st.sampled_from(REFS), max_size=3))),
        hits=frozenset(draw(st.lists(st.sampled_from(PATHS), max_size=3)))
        if kind == "search"
        else frozenset(),
        failed=draw(st.integers(0, 9)) == 0,
        repeat=draw(st.integers(0, 9)) == 0,
        tokens=draw(st.integers(0, 8000)),
        authored=kind == "write" and draw(st.booleans()),
    )


@st.composite
def records(draw) -> list[BundleRecord]:
    n = draw(st.integers(0, 25))
    return [draw(record(i)) for i in range(n)]


@st.composite
def rules(draw) -> SegmentRules:
    return SegmentRules(
        superseded_reads=draw(st.booleans()),
        superseded_writes=draw(st.booleans()),
        superseded_commands=draw(st.booleans()),
        consumed_listings=draw(st.booleans()),
        edit_supersedes_read=draw(st.booleans()),
        min_age_turns=draw(st.integers(0, 3)),
        stale_after_turns=draw(st.sampled_from([None, 1, 3, 6])),
        stale_min_tokens=draw(st.sampled_from([0, 2000])),
        stale_after_action=draw(st.booleans()),
    )


@settings(max_examples=1500, deadline=None)
@given(records(), rules(), st.one_of(st.none(), st.integers(0, 30)))
def test_the_backward_pass_retires_what_the_pairwise_scan_did(recs, r, upto):
    assert evictable_bundles(recs, r, upto=upto) == _reference(recs, r, upto)


def test_spellings_of_one_file_share_a_key():
    from tokenpilot.lifecycle.segments import _file_key

    for a in PATHS:
        for b in PATHS:
            if _same_file(a, b):
                assert _file_key(a) == _file_key(b), (a, b)
