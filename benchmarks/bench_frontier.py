"""The frontier, set by set: vanilla, the hindsight oracles, keep-last-N, Anthropic's
context editing and TokenPilot's three dial positions on the same recorded sessions;
TokenPilot's share of the oracle's saving; its dearest session; and where its money
above the oracle goes.

    python benchmarks/bench_frontier.py ../shared/traces/claude_code_mclaude [...] \
        [--profile openai|anthropic] [--markdown docs/frontier-openai.md]

Prices are the paper's (the bench's defaults), continuous mode, recalls charged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenpilot.lifecycle.settings import KEEP
from tokenpilot.measure.bench.context_editing import context_editing_methods
from tokenpilot.measure.bench.methods import KeepLastN, TokenPilotMethod, Vanilla, oracle_methods
from tokenpilot.measure.bench.money import money_split
from tokenpilot.measure.bench.per_session import session_rows
from tokenpilot.measure.bench.replay import replay
from tokenpilot.measure.traces import load


def frontier(path: str, profile: str) -> tuple[list[str], list[str]]:
    """The rows of one set (method lines) and its money-split line."""
    sessions = load(path)
    name = Path(path).name
    methods = [
        Vanilla(),
        *oracle_methods(),
        KeepLastN(),
        *context_editing_methods(),
        *(
            TokenPilotMethod(keep=k, name="tokenpilot" if k == "balanced" else f"tokenpilot_{k}")
            for k in KEEP
        ),
    ]
    runs = {m.name: replay(sessions, m, profile=profile, trace_set=name) for m in methods}
    van, orc, tp = runs["vanilla"], runs["oracle"], runs["tokenpilot"]
    v = van.record()["cost_usd"]
    o = orc.record()["cost_usd"]
    rows_by = session_rows(list(runs.values()))
    rows = []
    for m, run in runs.items():
        r = run.record()
        share = "" if m in ("vanilla", "oracle") or v <= o else f"{(v - r['cost_usd']) / (v - o):.0%}"
        worst = max(x.vs_vanilla or 0.0 for x in rows_by if x.method == m)
        rows.append(
            f"| {name} | {m} | {r['cost_usd']:.4f} | {r['cost_usd'] / v:.3f}× | {share} "
            f"| {r['retention']:.1%} | {r['retention_all']:.1%} | {r['recalls_charged']} | {worst:.3f}× |"
        )
    split = money_split(tp, orc)
    money = (
        f"| {name} | {split.above:.4f} | {split.too_late:.4f} | {split.cache_writes:.4f} "
        f"| {split.recalls:.4f} | {split.rest:.4f} |"
    )
    return rows, [money]


CADENCES = ((1, 1), (3, 0), (3, 1), (3, 3))  # (evict every k-th call, l calls after the last need)


def cadence(path: str, profile: str) -> str:
    """The share of the oracle's saving that perfect foresight keeps under each cadence."""
    sessions = load(path)
    v = replay(sessions, Vanilla(), profile=profile).record()["cost_usd"]
    full = replay(sessions, oracle_methods()[0], profile=profile).record()["cost_usd"]
    tp = replay(sessions, TokenPilotMethod(), profile=profile).record()["cost_usd"]
    cells = []
    for every, lag in CADENCES:
        c = replay(sessions, oracle_methods(every, lag)[0], profile=profile).record()["cost_usd"]
        cells.append(f"{(v - c) / (v - full):.0%}")
    return f"| {Path(path).name} | " + " | ".join(cells) + f" | {(v - tp) / (v - full):.0%} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--profile", default="openai")
    ap.add_argument("--markdown", help="also write the tables to this file")
    ap.add_argument(
        "--cadence",
        action="store_true",
        help="instead: the share of the oracle's saving perfect foresight keeps when it may evict "
        "only every k-th call, l calls after the last need",
    )
    args = ap.parse_args(argv)
    if args.cadence:
        print("| set | " + " | ".join(f"every {k}, {lag} late" for k, lag in CADENCES) + " | tokenpilot |")
        print("|---|" + "---:|" * (len(CADENCES) + 1))
        for p in args.paths:
            print(cadence(p, args.profile), flush=True)
        return 0
    rows, money = [], []
    for p in args.paths:
        r, m = frontier(p, args.profile)
        rows += r
        money += m
        print("\n".join(r + m), flush=True)
    text = "\n".join(
        [
            f"profile {args.profile}, paper prices, continuous mode, recalls charged",
            "",
            "| set | method | cost $ | vs vanilla | of oracle | retention | retention (any source) "
            "| recalls | dearest session |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "TokenPilot's cost above the oracle, by cause ($):",
            "",
            "| set | above the oracle | evicting too late | cache writes from evictions | recalls | rest |",
            "|---|---|---|---|---|---|",
            *money,
            "",
        ]
    )
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
