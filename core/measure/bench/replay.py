"""Teacher-forced replay: each recorded call re-issued through a method.

The output of every call is the recorded assistant message; what changes is the
prompt the method sends, which the prefix-cache simulator prices. Modes: continuous
(tasks share one session, as recorded) and isolated (the context resets at each task;
the provider cache is still shared, so warm starts count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from ..._canonical import canonical_json, sha256_hex
from ...pricing import Prices, cost
from ...tokens import count_tokens
from ..cache_segments import Segment, message_segments, prefix_segments
from ..cachesim import CacheSimulator, get_profile
from ..traces.model import RecordedCall, Session
from .method import Method, MethodSession, Rendered, SideCall
from .recalled import Recalls, recall_messages
from .retention import NeedIndex, Visibility, recalled_identifiers

MODES = ("continuous", "isolated")


@dataclass(slots=True)
class CallResult:
    session_id: str
    task: int
    prompt_tokens: int
    hit_tokens: int
    miss_tokens: int
    write_tokens: int
    output_tokens: int
    cost_usd: float
    cause: str | None
    needs: int
    visible: int
    recoverable: int
    prefix_break: bool
    recall_charged: bool = False  # one extra round trip was priced for hidden needs
    side_calls: int = 0  # calls the method made on its own (a summariser's), priced in cost_usd
    recall_usd: float = 0.0  # the recall round trip's price (in cost_usd)
    needs_all: int = 0  # needs first seen in any earlier message, the agent's own included
    visible_all: int = 0
    recoverable_all: int = 0


@dataclass(slots=True)
class RunResult:
    """One method × mode × profile over one trace set."""

    trace_set: str
    method: str
    mode: str
    cache_profile: str
    kind: str = "method"  # vanilla, tokenpilot, peer (another product's code) or sketch
    calls: list[CallResult] = field(default_factory=list)
    digests: list[str] = field(default_factory=list, repr=False)  # each request's bytes, hashed
    deterministic: bool | None = None  # a fresh run rendered the same bytes (None: not checked)
    notes: list[str] = field(default_factory=list)  # a peer's own account: what ran, what could not
    recalls: Recalls = field(default_factory=Recalls, repr=False)  # what the agent recalled, and where

    def record(self) -> dict[str, Any]:
        """The JSON record (schema in the README)."""
        c = self.calls
        hit = sum(x.hit_tokens for x in c)
        miss = sum(x.miss_tokens for x in c)
        write = sum(x.write_tokens for x in c)
        needs = sum(x.needs for x in c)
        return {
            "trace_set": self.trace_set,
            "method": self.method,
            "kind": self.kind,
            "mode": self.mode,
            "cache_profile": self.cache_profile,
            "calls": len(c),
            "hit_tokens": hit,
            "miss_tokens": miss,
            "write_tokens": write,
            "output_tokens": sum(x.output_tokens for x in c),
            "cost_usd": round(sum(x.cost_usd for x in c), 6),
            "cache_hit_rate": round(hit / (hit + miss + write), 4) if hit + miss + write else 0.0,
            "retention": round(sum(x.visible for x in c) / needs, 4) if needs else 1.0,
            "retention_all": _share(sum(x.visible_all for x in c), sum(x.needs_all for x in c)),
            "recall_usd": round(sum(x.recall_usd for x in c), 6),
            "recoverable": round(sum(x.recoverable for x in c) / needs, 4) if needs else 1.0,
            "recoverable_all": _share(sum(x.recoverable_all for x in c), sum(x.needs_all for x in c)),
            "peak_context_tokens": max((x.prompt_tokens for x in c), default=0),
            "prefix_breaks": sum(x.prefix_break for x in c),
            "recalls_charged": sum(x.recall_charged for x in c),
            "side_calls": sum(x.side_calls for x in c),
            **({} if self.deterministic is None else {"deterministic": self.deterministic}),
            **({"notes": list(self.notes)} if self.notes else {}),
        }


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 1.0


@dataclass(frozen=True, slots=True)
class _Job:
    """One prompt to render: which session/task it belongs to and its recorded call."""

    method_session: str
    task: int
    session: Session
    call: RecordedCall
    prompt: list[dict[str, Any]]
    window_start: int  # index in session.messages where the prompt's history begins


def _task_of(task_starts: Sequence[int], index: int) -> int:
    k = 0
    for i, s in enumerate(task_starts):
        if s <= index:
            k = i
    return k


def jobs(session: Session, mode: str) -> Iterator[_Job]:
    """The prompts of a session's calls in a mode (isolated: history starts at the task)."""
    starts = session.task_starts or [0]
    for call in session.calls:
        task = _task_of(starts, call.end)
        prompt = session.prompt(call)
        sid = session.id
        window = call.start
        if mode == "isolated":
            sid = f"{session.id}#task{task}"
            first = starts[task]
            if call.start < first:
                system = [prompt[0]] if prompt and prompt[0].get("role") in ("system", "developer") else []
                prompt = system + session.sent_slice(call, first, call.end)
                window = first
        yield _Job(sid, task, session, call, prompt, window)


class _Segments:
    """Segments per message, memoised by the identity of every value the message holds
    (requests share most message objects, so this skips re-serialising them).

    The key names each value by `id`, so the memo keeps every one of them alive and
    checks each with `is` on a hit: an id is only reused once its object is freed,
    and a kept object is never freed. (Keying on `content` alone let a method whose
    renders are fresh objects, a proxy's parsed bodies, be handed the segments of
    another message whose freed `tool_calls` list had the same id.) Values are
    taken as unchanged while held: a method must not mutate a message it rendered.
    """

    MAX_ENTRIES = 200_000  # past it the memo starts over (a miss only re-serialises)

    def __init__(self, breakpoints: bool) -> None:
        self.breakpoints = breakpoints
        self._cache: dict[tuple[Any, ...], tuple[tuple[Any, ...], list[Segment]]] = {}

    def of(self, msg: Mapping[str, Any], index: int) -> list[Segment]:
        items = tuple(msg.items())
        key = (index == 0, tuple((k, id(v)) for k, v in items))
        hit = self._cache.get(key)
        if hit is not None and all(kept is v for kept, (_, v) in zip(hit[0], items, strict=True)):
            return hit[1]
        segs = message_segments(dict(msg), index, breakpoint=self.breakpoints)
        if len(self._cache) >= self.MAX_ENTRIES:
            self._cache.clear()
        self._cache[key] = (tuple(v for _, v in items), segs)  # held: no id here is reused
        return segs


RECALL_CALL_TOKENS = 40  # the model's recall_artifact call: name, id, a little JSON


def _recall_round_trip(
    sim: CacheSimulator,
    segs: list[Segment],
    n_messages: int,
    extra_msgs: Sequence[dict[str, Any]],
    out_msg: dict[str, Any],
    job: _Job,
    profile: str,
    prices: Prices,
    segcache: _Segments,
) -> float:
    """The price of the extra call an agent makes to get back what it needed but could
    not see: the same prompt again (cached as the simulator says, right after the call
    that sent it) plus the recall's messages (`recalled.recall_messages`), which are new
    and stay in the history after it, before the recorded answer. Every method with a
    recall tool pays it the same way; one whose needs are visible never does."""
    more = list(segs)
    for n, m in enumerate(extra_msgs):
        more.extend(segcache.of(m, n_messages + n))
    res = sim.simulate(
        more,
        job.call.timestamp,
        output=segcache.of(out_msg, n_messages + len(extra_msgs)),
        namespace=job.call.model or "",
    )
    return cost(res.hit_tokens, res.miss_tokens, res.write_tokens, RECALL_CALL_TOKENS, prices, profile)


def _side_call_cost(
    sim: CacheSimulator, call: SideCall, job: _Job, profile: str, prices: Prices, segcache: _Segments
) -> float:
    """A method's own model call (a summariser's): its prompt priced through the simulator
    in its own namespace (a summariser's fixed instructions do get cached), plus its output."""
    segs = [seg for i, m in enumerate(call.messages) for seg in segcache.of(m, i)]
    res = sim.simulate(segs, job.call.timestamp, namespace=call.namespace)
    return cost(res.hit_tokens, res.miss_tokens, res.write_tokens, call.output_tokens, prices, profile)


def ordered_jobs(sessions: Sequence[Session], mode: str) -> list[_Job]:
    """Every call of every session, in time order (the order a shared provider cache sees)."""
    all_jobs: list[tuple[float, int, int, _Job]] = []
    for k, s in enumerate(sessions):
        for j, job in enumerate(jobs(s, mode)):
            when = job.call.timestamp
            all_jobs.append((when if when is not None else float(k) * 1e6 + j, k, j, job))
    all_jobs.sort(key=lambda x: (x[0], x[1], x[2]))
    return [job for *_, job in all_jobs]


def _request_segments(rendered: Rendered, job: _Job, breakpoints: bool, segcache: _Segments) -> list[Segment]:
    segs = list(
        prefix_segments(
            rendered.tools,
            hidden_prefix_tokens=job.session.hidden_prefix_tokens,
            hidden_id=job.session.fmt,
            breakpoint=breakpoints,
        )
    )
    for i, m in enumerate(rendered.messages):
        segs.extend(segcache.of(m, i))
    return segs


def _digest(segs: Sequence[Segment]) -> str:
    return sha256_hex("\n".join(seg.key for seg in segs))


def render_digests(
    sessions: Sequence[Session],
    method: Method,
    *,
    mode: str,
    profile: str,
    on_call: Callable[[], None] | None = None,
    recalls: Recalls | None = None,
) -> list[str]:
    """The hashed bytes of every request `method` renders for `sessions`, in replay order,
    without pricing: a second run of a fresh method must give the same list. `recalls`:
    the ones a priced run made (`RunResult.recalls`), put in the histories as it did."""
    prof = get_profile(profile)
    segcache = _Segments(prof.breakpoints)
    out = []
    planned = _prepared(method, sessions, mode, prof.name, Prices())
    with closing(_renders(sessions, planned, mode, recalls)) as renders:
        for job, _ms, rendered in renders:
            out.append(_digest(_request_segments(rendered, job, prof.breakpoints, segcache)))
            if on_call is not None:
                on_call()
    return out


def _for_profile(method: Method, profile: str) -> Method:
    """The method as configured for the profile's cache, when its decisions depend on it."""
    for_profile = getattr(method, "for_profile", None)
    return for_profile(profile) if for_profile is not None else method


def _prepared(method: Method, sessions: Sequence[Session], mode: str, profile: str, prices: Prices) -> Method:
    """The method for this replay: set for the profile, and a method with hindsight (the
    oracle) given the whole recording to plan from before it renders anything."""
    method = _for_profile(method, profile)
    hindsight = getattr(method, "hindsight", None)
    return hindsight(sessions, mode, profile, prices) if hindsight is not None else method


def _renders(
    sessions: Sequence[Session], method: Method, mode: str, recalls: Recalls | None = None
) -> Iterator[tuple[_Job, MethodSession, Rendered]]:
    """Each call's job, the method's session for it and what that renders, in replay
    order (with the recalls made so far in its history); every method session is closed
    at the end."""
    live: dict[str, MethodSession] = {}
    try:
        for n, job in enumerate(ordered_jobs(sessions, mode)):
            ms = live.get(job.method_session)
            if ms is None:
                # a peer with one adapter per agent (LightMem2) opens its session by the trace's format
                by_fmt = getattr(method, "session_for", None)
                opened = (
                    by_fmt(job.method_session, job.session.fmt)
                    if by_fmt
                    else method.session(job.method_session)
                )
                ms = live[job.method_session] = opened
            prompt = job.prompt
            if recalls is not None:
                prompt = recalls.into(job.method_session, n, prompt, job.window_start, job.call.end)
            yield job, ms, ms.render(prompt, job.session.tools, job.call.timestamp)
    finally:
        for ms in live.values():
            ms.close()


def replay(
    sessions: Sequence[Session],
    method: Method,
    *,
    mode: str = "continuous",
    profile: str = "openai",
    prices: Prices | None = None,
    trace_set: str = "all",
    simulator: CacheSimulator | None = None,
    on_call: Callable[[], None] | None = None,
) -> RunResult:
    """Replay every recorded call of `sessions` through `method`; one shared simulator."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    prices = prices or Prices()
    prof = get_profile(profile)
    method = _prepared(method, sessions, mode, prof.name, prices)
    sim = simulator or CacheSimulator(prof)
    segcache = _Segments(prof.breakpoints)
    vis = Visibility()
    result = RunResult(trace_set, method.name, mode, prof.name, getattr(method, "kind", "method"))
    needs_index = {s.id: NeedIndex(s.messages) for s in sessions}
    last_stable: dict[str, list[str]] = {}
    # per method session and artifact id: a method's ids need not be unique across its
    # sessions (LightMem2's name positions, the same in every session)
    recall_cache: dict[tuple[str, str], frozenset[str]] = {}
    recall_size: dict[tuple[str, str], int] = {}  # smallest recall first: an agent asks for what it needs
    recalls = result.recalls
    with closing(_renders(sessions, method, mode, recalls)) as renders:
        for n, (job, ms, rendered) in enumerate(renders):
            segs = _request_segments(rendered, job, prof.breakpoints, segcache)
            result.digests.append(_digest(segs))
            out_msg = job.session.output(job.call)
            ttl = float(job.call.usage.cache_ttl_s) if job.call.usage and job.call.usage.cache_ttl_s else None
            res = sim.simulate(
                segs,
                job.call.timestamp,
                output=segcache.of(out_msg, len(rendered.messages)),
                ttl_s=ttl,
                namespace=job.call.model or "",
            )
            usage = job.call.usage
            out_tokens = (
                usage.output_tokens
                if usage and usage.output_tokens
                else count_tokens(canonical_json(out_msg))
            )

            # fidelity: what the recorded output used that an earlier message showed first
            # (`needs`: a tool output, the rule recalls are charged by; `needs_all`: any
            # message, the agent's own included, reported beside it)
            needs, needs_all = needs_index[job.session.id].both(job.call.end, out_msg, job.window_start)
            seen = vis.of(rendered.messages) if needs_all else set()
            recalled: list[str] = []
            found: set[str] = set()
            found_all: set[str] = set()
            missing = needs_all - seen
            if missing and rendered.artifact_ids:
                owner = job.method_session
                for aid in rendered.artifact_ids:
                    if (owner, aid) not in recall_cache:
                        text = ms.recall_text(aid) or ""
                        recall_cache[owner, aid] = frozenset(recalled_identifiers(text))
                        recall_size[owner, aid] = len(text)
                for aid in sorted(rendered.artifact_ids, key=lambda a: (recall_size[owner, a], a)):
                    ids = recall_cache[owner, aid]
                    if ((missing & needs) - found) & ids:
                        recalled.append(aid)  # the agent would have to ask for this one
                        found |= missing & needs & ids
                    found_all |= missing & ids
            visible = needs & seen
            recoverable = len(visible) + len(found)
            extra = sum(
                _side_call_cost(sim, sc, job, prof.name, prices, segcache) for sc in rendered.side_calls
            )
            recall_usd = 0.0
            if recalled:
                sid = job.method_session
                texts = [(aid, ms.recall_text(aid) or "") for aid in recalled]
                extra_msgs = recall_messages(str(recalls.count(sid)), texts)
                recall_usd = _recall_round_trip(
                    sim, segs, len(rendered.messages), extra_msgs, out_msg, job, prof.name, prices, segcache
                )
                recalls.add(sid, n, job.call.end, extra_msgs)

            stable_keys = [
                seg.key
                for i, m in enumerate(rendered.messages[: rendered.stable])
                for seg in segcache.of(m, i)
            ]
            prev = last_stable.get(job.method_session)
            broke = prev is not None and stable_keys[: len(prev)] != prev
            last_stable[job.method_session] = stable_keys
            result.calls.append(
                CallResult(
                    job.method_session,
                    job.task,
                    res.prompt_tokens,
                    res.hit_tokens,
                    res.miss_tokens,
                    res.write_tokens,
                    out_tokens,
                    cost(res.hit_tokens, res.miss_tokens, res.write_tokens, out_tokens, prices, prof.name)
                    + extra
                    + recall_usd,
                    res.cause,
                    len(needs),
                    len(visible),
                    recoverable,
                    broke,
                    bool(recalled),
                    len(rendered.side_calls),
                    recall_usd,
                    len(needs_all),
                    len(needs_all & seen),
                    len(needs_all & (seen | found_all)),
                )
            )
            if on_call is not None:
                on_call()
    return result
