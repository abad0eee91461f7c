"""The hindsight oracle: the most any eviction could save on a recorded session.

It reads the whole session first, so it knows the last call that needs each turn, and
removes a turn only after that call: nothing it hides is ever needed again (retention
100% under both of the bench's rules, no recall tool, no recalls). What is left to choose is
*when*: every eviction breaks the provider's prefix cache from the first changed
message, so evicting all that is dead at every call can cost more than never evicting.
The oracle picks the cheapest schedule by an exact dynamic programme over eviction
points (`best_schedule`), under a closed-form price of each call (`CostModel`), then
the bench prices the chosen schedule through its own simulator like any method.

Choices, after `../shared/FRONTIER.md`:
- *Granularity: the turn.* An assistant message and the tool outputs that answer it
  (observations too, for text-action agents) become one stub, which is what
  TokenPilot's segment eviction removes. User and system messages stay.
- *Needs, both rules.* What a call needs is every identifier its recorded output uses
  that an earlier message of its prompt showed first, the agent's own words and
  arguments included (`NeedIndex.needs(any_source=True)`): what the agent wrote itself
  (a file through a heredoc, its notes) is kept for as long as it is used, never
  dropped for free.
- *One holder.* An identifier a call needs stays visible in at least one message: a
  message that is not evictable, or one turn kept for it (the one already kept, else
  the smallest that holds it, greedily).
- *Read once.* A turn is dead no earlier than the first call whose prompt holds it:
  the agent reads every result it was given (what it did next was teacher-forced on
  having seen it), so a turn no call needs leaves after that call, never before.
- *At an eviction point e* everything dead at e leaves: the turns in call e's prompt
  that no call from e on needs. Turns that arrive later wait for the next point.
- *Ingestion* (`base`). `oracle` ingests as TokenPilot does (its reductions, system
  placeholders and tool list: `tokenpilot_global`'s renders), so the comparison
  isolates what to evict and when, except where a reduction hides what a later call
  needs: that message is shown as the agent sent it, from its arrival on
  (`keep_what_is_needed`; the form is chosen once, so the prefix stays stable).
  `oracle_raw` evicts from the agent's own prompt.

The closed form (`CostModel.call_cost`) prices a call from the previous call's request
alone: the cached prefix is the part both share (up to the first changed message), cut
to the profile's minimum and granularity, lost across an idle gap longer than the
cache's lifetime. For a breakpoint cache (Anthropic) a changed history is read only up
to the fixed breakpoints (hidden prefix, tools, system): an earlier request's end lies
more than the lookback behind the new one. The DP is exact for this cost; the tests
check it against brute force over every schedule of small sessions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...pricing import Prices
from ..cache_segments import message_segments, prefix_segments, segments_tokens
from ..cachesim import Profile, get_profile
from ..traces.model import Session
from .method import Message, Method, MethodSession, Rendered, Stateless
from .oracle_chain import (
    NONE,
    Call,
    Chain,
    Unit,
    assign_deaths,
    message_tokens_at,
    stub_message,
    units_of,
)
from .retention import NeedIndex, Visibility

__all__ = [
    "NONE",
    "Call",
    "Chain",
    "CostModel",
    "HindsightOracle",
    "Unit",
    "assign_deaths",
    "best_schedule",
    "build_chain",
    "units_of",
]


# ---------------------------------------------------------------------------
# the closed-form cost and the exact search
# ---------------------------------------------------------------------------
@dataclass(slots=True)
class CostModel:
    """The price of each call of a chain given the eviction point it is rendered under
    and the one the call before it was rendered under."""

    chain: Chain
    profile: Profile
    prices: Prices
    _dead: dict[int, list[int]] = field(default_factory=dict)
    _dead_sets: dict[int, frozenset[int]] = field(default_factory=dict)
    _tokens: dict[tuple[int, int], int] = field(default_factory=dict)
    _base_diff: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        calls = self.chain.calls
        self._base_diff = [0] + [_first_difference(calls[c - 1], calls[c]) for c in range(1, len(calls))]

    def dead(self, e: int) -> list[int]:
        d = self._dead.get(e)
        if d is None:
            d = self._dead[e] = self.chain.dead_at(e)
        return d

    def tokens(self, c: int, e: int) -> int:
        """Prompt tokens of call c rendered under eviction point e."""
        key = (c, e)
        n = self._tokens.get(key)
        if n is None:
            n = self._tokens[key] = self.chain.calls[c].tokens - sum(
                self.chain.saving(c, u) for u in self.dead(e)
            )
        return n

    def _before(self, c: int, e: int, m: int) -> int:
        """Tokens of call c's request under point e before base position m."""
        call = self.chain.calls[c]
        n = call.prefix_tokens + call.cum[m]
        for u in self.dead(e):
            pos = self.chain.position(c, u)
            if pos is not None and pos[1] <= m:
                n -= self.chain.saving(c, u)
        return n

    def call_cost(self, c: int, e: int, prev: int) -> float:
        """Dollars for call c's prompt under point e, the call before it under `prev`."""
        prof, prices = self.profile, self.prices
        total = self.tokens(c, e)
        hit = 0
        if c > 0:
            call, before = self.chain.calls[c], self.chain.calls[c - 1]
            m = self._base_diff[c]
            if e != prev:
                for u in self.dead(e):
                    if u in self._dead_set(prev):
                        continue
                    pos = self.chain.position(c, u)
                    if pos is not None and self.chain.position(c - 1, u) is not None:
                        m = min(m, pos[0])
            extends = m >= len(before.messages)
            if m < 0:
                hit = 0
            elif extends and not (prof.breakpoints and _added_segments(before, call) > prof.lookback):
                hit = self.tokens(c - 1, prev)
            elif prof.breakpoints:
                hit = self._before(c, e, min(m, call.static_end))
            else:
                hit = self._before(c, e, m)
            ttl = call.ttl_s if call.ttl_s is not None else prof.ttl_s
            if (
                ttl is not None
                and call.timestamp is not None
                and before.timestamp is not None
                and call.timestamp - before.timestamp > ttl
            ):
                hit = 0
            hit = min(hit, total)
            if hit < prof.min_tokens:
                hit = 0
            elif prof.granularity > 1:
                hit -= hit % prof.granularity
        write = total - hit if prof.breakpoints and total >= prof.min_tokens else 0
        miss = total - hit - write
        return (hit * prices.hit + miss * prices.miss + write * prices.write_price(prof.name)) / 1e6

    def _dead_set(self, e: int) -> frozenset[int]:
        d = self._dead_sets.get(e)
        if d is None:
            d = self._dead_sets[e] = frozenset(self.dead(e))
        return d

    def schedule_cost(self, points: Sequence[int]) -> float:
        """The closed-form price of a schedule (sorted call indices that evict)."""
        wanted = set(points)
        total, pt, prev = 0.0, NONE, NONE
        for c in range(len(self.chain.calls)):
            if c in wanted:
                pt = c
            total += self.call_cost(c, pt, prev)
            prev = pt
        return total


def best_schedule(model: CostModel, every: int = 1) -> tuple[list[int], float]:
    """The cheapest set of eviction points under `model`, by an exact DP; `every`: only
    calls k·every may evict (a batched estimator's cadence).

    best[e]: the least cost of calls 0..e with an eviction at e (call e included); the
    call after a point costs what it costs under that point and the one before it, so
    best[e] = min over the previous point p of best[p] + calls p+1..e-1 under p + call
    e under e after p. O(n²) prices per chain.
    """
    n = len(model.chain.calls)
    if n == 0:
        return [], 0.0
    run: dict[int, list[float]] = {}  # run[p][k]: calls p+1..p+k under p, summed

    def under(p: int, upto: int) -> float:
        """Calls p+1 .. upto-1 rendered under point p (p's own call excluded)."""
        acc = run.setdefault(p, [0.0])
        while len(acc) < upto - p:
            c = p + len(acc)
            acc.append(acc[-1] + model.call_cost(c, p, p))
        return acc[upto - p - 1]

    best: dict[int, tuple[float, int]] = {NONE: (0.0, NONE)}
    allowed = [c for c in range(n) if c % every == 0]
    for e in allowed:
        options = []
        for p in [NONE, *(c for c in allowed if c < e)]:
            base = best[p][0] + under(p, e) + model.call_cost(e, e, p)
            options.append((base, p))
        best[e] = min(options)
    finals = [(best[p][0] + under(p, n), p) for p in [NONE, *allowed]]
    total, last = min(finals)
    points = []
    while last != NONE:
        points.append(last)
        last = best[last][1]
    return sorted(points), total


def _first_difference(before: Call, after: Call) -> int:
    """The first position where two base requests differ (-1: before the messages)."""
    if before.prefix_key != after.prefix_key:
        return -1
    for p, key in enumerate(before.keys):
        if p >= len(after.keys) or after.keys[p] != key:
            return p
    return len(before.keys)


def _added_segments(before: Call, after: Call) -> int:
    return sum(len(k) for k in after.keys[len(before.keys) :])


# ---------------------------------------------------------------------------
# the bench method
# ---------------------------------------------------------------------------
def build_chain(
    session: Session, jobs: Sequence[Any], renders: Sequence[Rendered], needs: NeedIndex
) -> Chain:
    """A chain from one method session's jobs and their base renders."""
    calls = []
    for job, r in zip(jobs, renders, strict=True):
        segs = prefix_segments(
            r.tools, hidden_prefix_tokens=session.hidden_prefix_tokens, hidden_id=session.fmt
        )
        msgs = r.messages
        offset = job.call.end - len(msgs)
        first = max(0, job.window_start - offset)
        keys, cum = [], [0]
        for p, m in enumerate(msgs):
            ms = message_segments(dict(m), p)
            keys.append(tuple(s.key for s in ms))
            cum.append(cum[-1] + segments_tokens(ms))
        usage = job.call.usage
        static_end = 1 if msgs and msgs[0].get("role") in ("system", "developer") else 0
        calls.append(
            Call(
                messages=msgs,
                tools=r.tools,
                offset=offset,
                first=max(first, static_end),
                prefix_tokens=segments_tokens(segs),
                prefix_key=tuple(s.key for s in segs),
                keys=keys,
                cum=cum,
                timestamp=job.call.timestamp,
                ttl_s=float(usage.cache_ttl_s) if usage and usage.cache_ttl_s else None,
                needs=needs.needs(job.call.end, session.output(job.call), job.window_start, any_source=True),
                static_end=static_end,
            )
        )
    units = units_of(session.messages)
    stubs = [message_tokens_at(stub_message(u), 1) for u in units]
    chain = Chain(calls, units, stubs)
    assign_deaths(chain)
    return chain


def keep_what_is_needed(
    session: Session, jobs: Sequence[Any], renders: Sequence[Rendered], needs: NeedIndex
) -> list[Rendered]:
    """The base renders with each message whose ingestion hid something a later call needs
    shown as the agent sent it, in every call from its arrival on (hindsight at ingestion:
    the form is chosen once, so the prefix stays stable).

    A reduction (a truncated output, a cut tool-call argument) can drop what a later
    answer uses; no eviction schedule can show it again. Deciding the form with the
    recording in hand keeps the oracle's retention whole under both rules (needs first
    seen in a tool output, and in any message) while every other reduction stays."""
    calls = [job.call for job in jobs]
    after: list[set[str]] = [set() for _ in calls]  # needs (any source) of calls c.. on
    acc: set[str] = set()
    for c in range(len(calls) - 1, -1, -1):
        acc = acc | needs.needs(calls[c].end, session.output(calls[c]), jobs[c].window_start, any_source=True)
        after[c] = acc
    vis = Visibility()
    raw_for: dict[int, bool] = {}  # session index -> show the agent's own form
    out: list[Rendered] = []
    for c, (job, r) in enumerate(zip(jobs, renders, strict=True)):
        msgs, raw = r.messages, job.prompt
        if len(raw) != len(msgs) or not after[c]:
            out.append(r)
            continue
        offset = job.call.end - len(msgs)
        static_end = 1 if msgs and msgs[0].get("role") in ("system", "developer") else 0
        first = max(0, job.window_start - offset, static_end)
        patched: list[Message] | None = None
        shown: set[str] | None = None  # what the reduced request shows (a folded copy points at another)
        for p in range(first, len(msgs)):
            i = p + offset
            use_raw = raw_for.get(i)
            if use_raw is None:
                wanted = vis.of([raw[p]]) & after[c] if raw[p] is not msgs[p] else set()
                if wanted:
                    shown = vis.of(msgs) if shown is None else shown
                use_raw = raw_for[i] = bool(wanted - shown) if wanted else False
            if use_raw:
                patched = list(msgs) if patched is None else patched
                patched[p] = raw[p]
        out.append(r if patched is None else Rendered(patched, r.tools, r.stable, r.artifact_ids))
    return out


def render_under(chain: Chain, c: int, e: int, dead: Sequence[int]) -> list[Message]:
    """Call c's base messages with the turns dead at point e replaced by stubs."""
    call = chain.calls[c]
    starts: dict[int, int] = {}
    for u in dead:
        pos = chain.position(c, u)
        if pos is not None:
            starts[pos[0]] = u
    out: list[Message] = []
    p = 0
    while p < len(call.messages):
        u = starts.get(p)
        if u is None:
            out.append(call.messages[p])
            p += 1
        else:
            out.append(stub_message(chain.units[u]))
            p += chain.units[u].end - chain.units[u].start
    return out


@dataclass(frozen=True, slots=True)
class HindsightOracle:
    """The best eviction schedule over what `base` renders: `oracle` over TokenPilot's
    ingestion (`tokenpilot_global`), `oracle_raw` over the agent's own prompt (`vanilla`);
    `methods.oracle_methods` builds both.

    A method with hindsight: the bench hands it every session before the replay
    (`hindsight`), and it renders from the schedule it planned."""

    base: Method
    """The ingestion it evicts from: a method that never evicts."""
    name: str = "oracle"
    every: int = 1
    """Only every this many calls may evict (1: any call; 3: TokenPilot's batch cadence)."""
    lag: int = 0
    """A turn leaves no earlier than this many calls after the last call that needs it."""
    kind: ClassVar[str] = "oracle"

    def session(self, session_id: str) -> MethodSession:
        raise TypeError("the oracle plans from the whole recording: replay it through `hindsight` first")

    def hindsight(
        self, sessions: Sequence[Session], mode: str, profile: str | Profile, prices: Prices
    ) -> Method:
        from .replay import ordered_jobs  # the replay imports this module's callers, not this module

        prof = get_profile(profile)
        for_profile = getattr(self.base, "for_profile", None)
        base: Method = for_profile(prof.name) if for_profile is not None else self.base
        by_session: dict[str, list[Any]] = {}
        for job in ordered_jobs(sessions, mode):
            by_session.setdefault(job.method_session, []).append(job)
        plans: dict[str, list[Rendered]] = {}
        schedules: dict[str, list[int]] = {}
        for sid, chain_jobs in by_session.items():
            session = chain_jobs[0].session
            ms = base.session(sid)
            try:
                renders = [ms.render(j.prompt, session.tools, j.call.timestamp) for j in chain_jobs]
            finally:
                ms.close()
            index = NeedIndex(session.messages)
            renders = keep_what_is_needed(session, chain_jobs, renders, index)
            chain = build_chain(session, chain_jobs, renders, index)
            chain.lag = self.lag
            points, _ = best_schedule(CostModel(chain, prof, prices), self.every)
            schedules[sid] = points
            plans[sid] = _planned_renders(chain, points)
        return _Planned(self.name, plans, schedules)


def _planned_renders(chain: Chain, points: Sequence[int]) -> list[Rendered]:
    out = []
    wanted = set(points)
    pt = NONE
    dead: list[int] = []
    for c, call in enumerate(chain.calls):
        if c in wanted:
            pt = c
            dead = chain.dead_at(pt)
        msgs = render_under(chain, c, pt, dead)
        out.append(Rendered(msgs, call.tools, len(msgs)))
    return out


@dataclass(slots=True)
class _Planned:
    """The oracle after planning: each session renders its calls in replay order."""

    name: str
    plans: dict[str, list[Rendered]]
    schedules: dict[str, list[int]]
    kind: ClassVar[str] = "oracle"

    def session(self, session_id: str) -> MethodSession:
        return _PlannedSession(list(self.plans.get(session_id, [])))


class _PlannedSession(Stateless):
    def __init__(self, renders: list[Rendered]) -> None:
        self.renders = renders
        self.next = 0

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        r = self.renders[self.next]
        self.next += 1
        return r
