"""Calibrate the cache simulator against recorded provider usage.

Each session is replayed as recorded: call i's request is the hidden prefix (synthetic),
the tool schemas, the system message and `messages[start:end]`, sent at the call's
timestamp. Calls of all sessions of a profile go through one shared simulator in time
order, so cross-session warm starts (a system prompt cached by an earlier simulation)
happen as they did. The simulated hit tokens are compared with the recorded cached
tokens, call by call.

Token counts: we count with an offline tokenizer (cl100k), the provider with its own,
and the record lacks some content (system prompt and tool schemas, modelled as the
hidden prefix; thinking blocks; a proxy's rewrites). So every call is scaled onto its
recorded `prompt_tokens`, per segment: a segment gets a provider-token size the first
time a call sends it, and keeps it. The segments new in a call share what its recorded
prompt adds over the sizes already known: (recorded − known) / our count of them. Our
count of each call's prompt then equals the recorded one, and a prefix measures the
same in every call that reuses it, so "call i reads call i−1's whole prompt" comes out
exactly. (A plain per-call ratio, recorded/ours applied to the whole call, was tried
first: it stretches the reused prefix by the ratio of whatever the call added; a binary
PDF read that we count at 1.6× what the provider saw made OpenAI miss 2 of 19 calls.) Where that
factor is implausible (outside `FACTOR_RANGE`: a rewritten or shrunken record), new
segments take the call's overall ratio and the call is stretched onto its record.
Minimum and granularity then apply in provider tokens. Calls run per model namespace:
providers never share cache entries across models.

Warm start (`prewarm`): a session whose first recorded call already reads from the cache
was preceded by calls the record does not hold (another session, a warm-up). Before
such a session's first call, its fixed prefix (hidden prefix, tools, system message) is
written to the simulator; only the fact that the recorded read was non-zero is used,
never its size.

A call is "within 5%" when |simulated − recorded| ≤ 0.05 · max(recorded, 1), or both are
at most one cache unit (the profile's granularity).

Run: `python -m tokenpilot.measure.calibrate ../shared/traces`.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tokenpilot.measure.cache_segments import Segment, message_segments, prefix_segments, segment_tokens
from tokenpilot.measure.cachesim import CacheSimulator, get_profile
from tokenpilot.measure.traces.model import Session, Usage

TOLERANCE = 0.05
# Plausible provider/ours token ratios for new content; outside it the record is not append-only.
FACTOR_RANGE = (0.25, 4.0)
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def profile_for(session: Session) -> str | None:
    """The cache profile a session's recorded usage comes from; None if it records no cache."""
    if not any(c.usage is not None and c.usage.cache_reported for c in session.calls):
        return None
    models = " ".join(str(c.model or "") for c in session.calls).lower()
    models += " " + str(session.meta.get("model") or "").lower()
    if session.fmt == "claude_code" or "claude" in models or "anthropic" in models:
        return "anthropic"
    if "deepseek" in models:
        return "deepseek"
    if session.fmt == "gemini_cli" or "gemini" in models:
        return "gemini"
    return "openai"


@dataclass(frozen=True, slots=True)
class CallComparison:
    session_id: str
    source: str
    call_index: int
    timestamp: float | None
    prompt_tokens: int
    recorded: int
    simulated: int
    cause: str | None
    within: bool

    @property
    def abs_error(self) -> int:
        return abs(self.simulated - self.recorded)


@dataclass(slots=True)
class CalibrationReport:
    """Simulated vs recorded cache reads for one profile."""

    profile: str
    comparisons: list[CallComparison] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.comparisons)

    @property
    def within(self) -> int:
        return sum(c.within for c in self.comparisons)

    @property
    def share_within(self) -> float:
        return self.within / self.calls if self.calls else 0.0

    @property
    def median_abs_error(self) -> float:
        return statistics.median(c.abs_error for c in self.comparisons) if self.comparisons else 0.0

    def quantiles(self, relative: bool = False) -> dict[str, float]:
        """Quantiles of the absolute error (tokens) or of the error relative to the recorded read."""
        if not self.comparisons:
            return {}
        errs = sorted(
            c.abs_error / max(c.recorded, 1) if relative else float(c.abs_error) for c in self.comparisons
        )
        return {
            f"p{round(q * 100)}": errs[min(len(errs) - 1, int(q * (len(errs) - 1) + 0.5))] for q in QUANTILES
        }

    def by_source(self) -> dict[str, tuple[int, int]]:
        out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for c in self.comparisons:
            out[c.source][0] += 1
            out[c.source][1] += c.within
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}

    def worst(self, n: int = 10) -> list[CallComparison]:
        return sorted(self.comparisons, key=lambda c: -c.abs_error)[:n]

    def summary(self) -> str:
        lines = [
            f"profile {self.profile}: {self.calls} calls, {self.share_within:.1%} within 5% "
            f"({self.within}/{self.calls}), median abs error {self.median_abs_error:.0f} tokens",
            "  abs error quantiles: " + ", ".join(f"{k}={v:.0f}" for k, v in self.quantiles().items()),
            "  rel error quantiles: " + ", ".join(f"{k}={v:.3f}" for k, v in self.quantiles(True).items()),
        ]
        for src, (n, ok) in self.by_source().items():
            lines.append(f"  {ok}/{n} ({ok / n:.1%}) {src}")
        misses = [c for c in self.comparisons if not c.within]
        causes: dict[str, int] = defaultdict(int)
        for c in misses:
            causes[(c.cause or "none").split(":")[0].split(" (")[0]] += 1
        if causes:
            lines.append(
                "  misses by simulated cause: " + ", ".join(f"{k} {v}" for k, v in sorted(causes.items()))
            )
        return "\n".join(lines)


@dataclass(slots=True)
class _Replay:
    """Per-session state: segments built once per message and reused by every call."""

    session: Session
    prefix: list[Segment]
    per_message: list[list[Segment]]
    scale: float = 1.0  # provider/ours ratio of this session's latest new content
    ttl: float | None = None
    started: bool = False


def _replay(session: Session, breakpoints: bool) -> _Replay:
    prefix = prefix_segments(
        session.tools,
        hidden_prefix_tokens=session.hidden_prefix_tokens,
        hidden_id=session.fmt,
        breakpoint=breakpoints,
    )
    per_message = [message_segments(m, i, breakpoint=breakpoints) for i, m in enumerate(session.messages)]
    return _Replay(session, prefix, per_message)


def calibrate(
    sessions: Iterable[Session],
    profile: str,
    *,
    prewarm: bool = True,
    simulator: CacheSimulator | None = None,
) -> CalibrationReport:
    """Replay `sessions` through `profile` and compare with their recorded cache reads."""
    prof = get_profile(profile)
    sim = simulator or CacheSimulator(prof)
    replays = [_replay(s, prof.breakpoints) for s in sessions]
    events: list[tuple[float, int, int]] = []
    timed = all(c.timestamp is not None for r in replays for c in r.session.calls)
    for k, r in enumerate(replays):
        for j, c in enumerate(r.session.calls):
            events.append(((c.timestamp or 0.0) if timed else float(k), k, j))
    events.sort()

    report = CalibrationReport(prof.name)
    sizes: dict[str, float] = {}  # provider-token size of each segment, fixed when first seen
    for _, k, j in events:
        r = replays[k]
        s = r.session
        call = s.calls[j]
        segs = list(r.prefix)
        for i in s.prompt_indices(call):
            segs.extend(r.per_message[i])
        output = r.per_message[call.end] if call.end < len(r.per_message) else []
        usage = call.usage
        scale = _size_new_segments(r, segs, usage, sizes)
        for seg in output:
            sizes.setdefault(seg.key, segment_tokens(seg) * r.scale)
        if usage is not None and usage.cache_ttl_s:
            r.ttl = float(usage.cache_ttl_s)
        when = call.timestamp if timed else None
        if not r.started:
            r.started = True
            if prewarm and usage is not None and usage.cached_tokens > 0:
                fixed = list(r.prefix) + (r.per_message[0] if s.system is not None else [])
                if fixed:
                    sim.prewarm(
                        fixed,
                        when - 1.0 if when is not None else None,
                        sizes=sizes,
                        ttl_s=r.ttl,
                        namespace=call.model or "",
                    )
        res = sim.simulate(
            segs, when, output=output, sizes=sizes, scale=scale, ttl_s=r.ttl, namespace=call.model or ""
        )
        if usage is None or not usage.cache_reported:
            continue
        g = prof.granularity
        ok = abs(res.hit_tokens - usage.cached_tokens) <= TOLERANCE * max(usage.cached_tokens, 1) or (
            res.hit_tokens <= g and usage.cached_tokens <= g
        )
        report.comparisons.append(
            CallComparison(
                s.id,
                s.source,
                j,
                call.timestamp,
                usage.prompt_tokens,
                usage.cached_tokens,
                res.hit_tokens,
                res.cause,
                ok,
            )
        )
    return report


def _size_new_segments(
    r: _Replay, segs: list[Segment], usage: Usage | None, sizes: dict[str, float]
) -> float:
    """Give never-seen segments a provider-token size so this call's prompt equals the record.

    Segments seen before keep their size, so a cached prefix measures the same in every
    call that reuses it (call i's read of call i-1's prompt is exactly that prompt).
    New segments share what the recorded prompt adds: (recorded - known) / our count of
    them. When that factor is implausible (a proxy rewrote old content, the record
    shrank) new segments take the call's overall ratio and the returned scale stretches
    the whole call onto the recorded prompt instead.
    """
    ours = [segment_tokens(x) for x in segs]
    known = [sizes.get(x.key) for x in segs]
    if usage is None or usage.prompt_tokens <= 0:
        for x, o, kn in zip(segs, ours, known):
            if kn is None:
                sizes[x.key] = o * r.scale
        return 1.0
    recorded = usage.prompt_tokens
    old = sum(kn for kn in known if kn is not None)
    new_ours = sum(o for o, kn in zip(ours, known) if kn is None)
    factor = (recorded - old) / new_ours if new_ours else 0.0
    scale = 1.0
    if not (FACTOR_RANGE[0] <= factor <= FACTOR_RANGE[1]):
        total = sum(ours)
        factor = recorded / total if total else 1.0
    for x, o, kn in zip(segs, ours, known):
        if kn is None:
            sizes[x.key] = o * factor
    total_sized = sum(sizes[x.key] for x in segs)
    if total_sized > 0:
        scale = recorded / total_sized
    r.scale = factor
    return scale


def calibrate_all(sessions: Sequence[Session], *, prewarm: bool = True) -> dict[str, CalibrationReport]:
    """One report per profile, each session under the profile its usage comes from."""
    groups: dict[str, list[Session]] = defaultdict(list)
    for s in sessions:
        prof = profile_for(s)
        if prof is not None:
            groups[prof].append(s)
    return {p: calibrate(ss, p, prewarm=prewarm) for p, ss in sorted(groups.items())}


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from tokenpilot.measure.traces import load

    ap = argparse.ArgumentParser(
        prog="python -m tokenpilot.measure.calibrate", description=__doc__.split("\n")[0]
    )
    ap.add_argument("paths", nargs="+", help="trace files or folders")
    ap.add_argument("--no-prewarm", action="store_true", help="do not model warm starts")
    ap.add_argument("--worst", type=int, default=0, help="also list the N largest mismatches per profile")
    args = ap.parse_args(argv)
    sessions = [s for p in args.paths for s in load(p)]
    for report in calibrate_all(sessions, prewarm=not args.no_prewarm).values():
        print(report.summary())
        for c in report.worst(args.worst):
            print(
                f"    {c.session_id} call {c.call_index}: recorded {c.recorded}, simulated {c.simulated}, "
                f"prompt {c.prompt_tokens}, cause {c.cause}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
