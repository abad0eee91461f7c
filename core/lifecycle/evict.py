"""Eviction planning: which turns leave the model's view, and what stands in their place.

`plan_eviction` is pure apart from `archive(text) -> artifact_id`, which stores the
exact messages of each evicted segment (canonical JSON of the list) so that the
stub's `recall_artifact` id gives them back byte-exact (invariant I3).

Conservative by construction (I4, I6): only whole turns go (a tool call never
loses its result), only turns whose every owner is evictable, never the last turn,
never a turn in the current batch, never an incomplete turn; turns linked by
tool-call ids go together or not at all, and so do the turns of one task.

`should_evict` is the cost gate: eviction breaks the provider's prefix cache once,
so it only pays when the tokens it removes, read on every later call, cost more
than re-prefilling everything after the cut once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._canonical import canonical_json
from ..ingest.reshown import RESHOWN_NOTE, expand_in_context
from ..messages.observations import text_action
from ..messages.pairing import validate_pairing
from ..messages.turns import Turn, call_name_args, content_text, parsed_args, tool_calls_of
from ..pricing import Prices
from ..registry import TaskRegistry

__all__ = [
    "Decision",
    "EvictionPlan",
    "Prices",
    "recall_risk_usd",
    "Segment",
    "expected_remaining_calls",
    "plan_eviction",
    "render",
    "should_evict",
    "validate_pairing",
]

Message = Mapping[str, Any]
_PREAMBLE = frozenset({"system", "developer"})
_DESCRIBE_KEYS = ("file_path", "path", "command", "cmd", "pattern", "url", "query", "filepath", "file")


@dataclass(frozen=True, slots=True)
class Segment:
    """Messages [start, end) evicted together, and the stub that replaces them."""

    start: int
    end: int
    turn_ids: tuple[str, ...]
    task_ids: tuple[str, ...]
    artifact_id: str
    stub: dict[str, Any] | None
    reasons: tuple[str, ...] = ()  # per turn, for bundles retired by a segment rule; empty for tasks

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "turnIds": list(self.turn_ids),
            "taskIds": list(self.task_ids),
            "artifactId": self.artifact_id,
            "stub": self.stub,
            "reasons": list(self.reasons),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Segment:
        return cls(
            int(d["start"]),
            int(d["end"]),
            tuple(d["turnIds"]),
            tuple(d["taskIds"]),
            str(d["artifactId"]),
            dict(d["stub"]) if d.get("stub") else None,
            tuple(d.get("reasons", ())),
        )


def render(
    messages: Sequence[Message], drop: Collection[int], stubs: Mapping[int, Sequence[Message]]
) -> list[dict[str, Any]]:
    """Messages minus `drop`; `stubs[i]` (messages) go right before index i's place."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        for stub in stubs.get(i, ()):
            out.append(dict(stub))
        if i not in drop:
            out.append(m if isinstance(m, dict) else dict(m))
    return out


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    """Indices to drop and, per evicted segment, its stub (or none)."""

    evicted: frozenset[int]
    segments: tuple[Segment, ...]

    @property
    def stubs(self) -> dict[int, tuple[dict[str, Any], ...]]:
        """Segment start -> the messages that stand in for the segment (one stub)."""
        return {s.start: (s.stub,) for s in self.segments if s.stub is not None}

    def apply(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        return render(messages, self.evicted, self.stubs)


def _clean(text: str, limit: int) -> str:
    text = " ".join(text.replace('"', "'").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def stub_text(title: str, outcome: str, start: int, end: int, artifact_id: str) -> str:
    """The one line the model sees instead of an evicted segment."""
    return (
        f'[tokenpilot: evicted task "{_clean(title, 80)}" ({_clean(outcome, 100)}), '
        f'messages {start}..{end - 1}; recall_artifact(artifact_id="{artifact_id}") returns them]'
    )


def _describe_one(call: Mapping[str, Any]) -> str:
    """`Read core/x.py`, `Bash "pytest -q"`: what one tool call asked for, in a few words."""
    name, raw = call_name_args(call)
    args = parsed_args(raw)
    what = next((args[k] for k in _DESCRIBE_KEYS if isinstance(args.get(k), str) and args[k].strip()), "")
    return f"{name} {_clean(what, 60)}".strip() if what else name


def _describe_call(messages: Sequence[Message], turn: Turn) -> str:
    """What a bundle asked for, in a few words: each of its calls (`_describe_one`)."""
    parts = [_describe_one(c) for k in range(turn.start, turn.end) for c in tool_calls_of(messages[k])]
    if not parts:  # a text-action agent: the command is in the assistant's words
        k = assistant_index(messages, turn)
        action = text_action(content_text(messages[k].get("content"))) if k < turn.end else None
        if action:
            parts.append(f"`{_clean(action, 60)}`")
    return ", ".join(parts) or "turn"


def segment_stub_text(
    items: Sequence[str], start: int, end: int, artifact_id: str, why: str = "no longer needed"
) -> str:
    """The one line that stands in for tool bundles a segment rule retired."""
    shown = "; ".join(items)
    return (
        f"[tokenpilot: evicted {len(items)} tool result(s) {why}: {shown}. "
        f'Messages {start}..{end - 1}; recall_artifact(artifact_id="{artifact_id}") returns them all]'
    )


def _is_window(reason: str) -> bool:
    return reason.startswith("window")


def _linked_groups(messages: Sequence[Message], turns: Sequence[Turn]) -> list[int]:
    """Union-find over turns: turns sharing a tool-call id must be evicted together."""
    parent = list(range(len(turns)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner_of_id: dict[str, int] = {}
    for t, turn in enumerate(turns):
        for k in range(turn.start, turn.end):
            m = messages[k]
            ids = [c.get("id") for c in tool_calls_of(m)]
            if m.get("role") == "tool":
                ids.append(m.get("tool_call_id"))
            for cid in ids:
                if not isinstance(cid, str):
                    continue
                if cid in owner_of_id:
                    parent[find(t)] = find(owner_of_id[cid])
                else:
                    owner_of_id[cid] = t
    return [find(t) for t in range(len(turns))]


def archived(messages: Sequence[Message], start: int, end: int) -> list[dict[str, Any]]:
    """`messages[start:end]` as an eviction archives them: an output folded against an
    earlier one (`reshown`) holds its lines again, so its recall stands on its own."""
    out = []
    for k in range(start, end):
        m = dict(messages[k])
        if isinstance(m.get("content"), str) and RESHOWN_NOTE in m["content"]:
            try:
                m["content"] = expand_in_context(messages, k)
            except ValueError:  # a marker whose lines are gone: archived as it was shown
                pass
        out.append(m)
    return out


def plan_eviction(
    messages: Sequence[Message],
    turns: Sequence[Turn],
    registry: TaskRegistry,
    *,
    stub: bool = True,
    archive: Callable[[str], str],
    keep_from: int | None = None,
    already_evicted: Collection[int] = frozenset(),
    bundles: Mapping[int, str] | None = None,
    from_index: int = 0,
    protected: Collection[int] = frozenset(),
) -> EvictionPlan:
    """Plan the eviction of every turn whose owners are all evictable, and of the
    tool bundles (turn index -> reason) a segment rule retired.

    `keep_from`: messages at or after this index are the current batch and stay.
    `from_index`: only turns starting at or after this message go (the cost gate's cut).
    `protected`: turn indices whose task stays whatever its state (a later turn names
    what they introduced); the task stays whole. Segment rules judge use on their own.
    `already_evicted`: indices gone in an earlier plan; they are neither planned
    again nor counted as kept, and new segments never merge with old ones (an old
    stub keeps its bytes).
    """
    if not turns:
        return EvictionPlan(frozenset(), ())
    gone = frozenset(already_evicted)
    owners = registry.turn_owners()
    tasks = {t.task_id: t for t in registry.tasks}
    limit = len(messages) if keep_from is None else min(keep_from, len(messages))
    last = len(turns) - 1

    retired = bundles or {}

    def movable(t: int) -> bool:
        turn = turns[t]
        return (
            t != last
            and turn.complete
            and turn.end <= limit
            and turn.start >= from_index
            and not any(k in gone for k in range(turn.start, turn.end))
        )

    def task_done(t: int) -> bool:
        own = owners.get(turns[t].turn_id, [])
        return bool(own) and all(tasks[o].lifecycle == "evictable" for o in own)

    by_task = [movable(t) and task_done(t) and t not in protected for t in range(len(turns))]
    # A task goes in one piece: if one of its turns must stay (current batch, last
    # turn), its other turns wait too, so one task never costs two cache breaks.
    held = {
        o
        for t, turn in enumerate(turns)
        if t == last or t in protected or not turn.complete or turn.end > limit
        for o in owners.get(turn.turn_id, [])
    }
    by_task = [c and not held.intersection(owners.get(turns[t].turn_id, [])) for t, c in enumerate(by_task)]
    by_rule = [not by_task[t] and t in retired and movable(t) for t in range(len(turns))]
    chosen = [a or b for a, b in zip(by_task, by_rule)]
    groups = _linked_groups(messages, turns)
    fully_gone = [all(k in gone for k in range(t.start, t.end)) for t in turns]
    while True:  # both steps only un-choose turns, so this ends
        blocked = {groups[t] for t in range(len(turns)) if not chosen[t] and not fully_gone[t]}
        narrowed = [c and groups[t] not in blocked for t, c in enumerate(chosen)]
        if not stub:
            # Without a stub the first message after the preamble could become an
            # assistant message, which Anthropic rejects: keep the leading run then.
            narrowed = _keep_user_first(messages, turns, narrowed, gone)
        if narrowed == chosen:
            break
        chosen = narrowed

    segments: list[Segment] = []
    run: list[int] = []

    def owner_key(t: int) -> tuple[Any, ...]:
        return (by_rule[t], tuple(owners.get(turns[t].turn_id, [])))

    def span_start(t: int) -> int:
        # A bundle retired by a rule goes without the messages that opened its turn:
        # the user's words stay; the assistant's call and its results go together.
        return assistant_index(messages, turns[t]) if by_rule[t] else turns[t].start

    def flush() -> None:
        if not run:
            return
        start, end = span_start(run[0]), turns[run[-1]].end
        rule, task_ids = owner_key(run[0])
        aid = archive(canonical_json(archived(messages, start, end)))
        reasons = tuple(retired[t] for t in run) if rule else ()
        stub_msg = None
        if stub and rule:
            items = []
            windowed = [_is_window(retired[t]) for t in run]
            for t, win in zip(run, windowed):
                # The window's reason is the same for every bundle: said once, in the header.
                why_one = "" if win else f" ({retired[t]})"
                results = _results_with_calls(messages, turns[t])
                if len(results) > 1:  # each result on its own: a recall brings back only the one needed
                    each = [
                        f"{_describe_one(call)} = {archive(canonical_json(archived(messages, k, k + 1)))}"
                        for k, call in results
                    ]
                    items.append(", ".join(each) + why_one)
                    continue
                what = _describe_call(messages, turns[t]) + why_one
                if len(run) > 1:  # each bundle also on its own, so a recall brings back only what is needed
                    one = archive(canonical_json(archived(messages, span_start(t), turns[t].end)))
                    what += f" = {one}"
                items.append(what)
            why = "no longer needed"
            if all(windowed):
                why = retired[run[0]].replace("window: ", "from ", 1)
            elif any(windowed):
                why = f"no longer needed or {retired[run[windowed.index(True)]].replace('window: ', '', 1)}"
            stub_msg = {"role": "user", "content": segment_stub_text(items, start, end, aid, why)}
        elif stub:
            task = tasks[task_ids[0]]
            outcome = "; ".join(task.completion_evidence) or task.lifecycle
            stub_msg = {"role": "user", "content": stub_text(task.title, outcome, start, end, aid)}
        turn_ids = tuple(turns[t].turn_id for t in run)
        segments.append(Segment(start, end, turn_ids, task_ids, aid, stub_msg, reasons))
        run.clear()

    for t in range(len(turns)):
        if not chosen[t]:
            flush()
            continue
        if run and (turns[run[-1]].end != span_start(t) or owner_key(run[-1]) != owner_key(t)):
            flush()
        run.append(t)
    flush()
    evicted = frozenset(k for s in segments for k in range(s.start, s.end))
    return EvictionPlan(evicted, tuple(segments))


def _results_with_calls(messages: Sequence[Message], turn: Turn) -> list[tuple[int, Mapping[str, Any]]]:
    """(index, its call) of each tool result of a turn that answers one of its calls."""
    calls = {c.get("id"): c for k in range(turn.start, turn.end) for c in tool_calls_of(messages[k])}
    return [
        (k, calls[m.get("tool_call_id")])
        for k in range(turn.start, turn.end)
        if (m := messages[k]).get("role") == "tool" and m.get("tool_call_id") in calls
    ]


def assistant_index(messages: Sequence[Message], turn: Turn) -> int:
    """Where a turn's assistant message is (after the messages that opened the turn)."""
    for k in range(turn.start, turn.end):
        if messages[k].get("role") == "assistant":
            return k
    return turn.start


def _keep_user_first(
    messages: Sequence[Message], turns: Sequence[Turn], chosen: list[bool], gone: frozenset[int]
) -> list[bool]:
    first = next((i for i, m in enumerate(messages) if m.get("role") not in _PREAMBLE), None)
    if first is None or messages[first].get("role") != "user":
        return chosen
    drop = set(gone)
    for t, c in enumerate(chosen):
        if c:
            drop.update(range(turns[t].start, turns[t].end))
    kept = next((i for i in range(first, len(messages)) if i not in drop), None)
    if kept is None or messages[kept].get("role") == "user":
        return chosen
    out = list(chosen)
    for t in range(len(turns)):
        if turns[t].start >= kept:
            break
        out[t] = False
    return out


# ---------------------------------------------------------------------------
# Cost gate.
# ---------------------------------------------------------------------------
MIN_EXPECTED_CALLS = 3
EXPECTED_CALLS_RATIO = 0.2


def expected_remaining_calls(
    calls_so_far: int, minimum: int = MIN_EXPECTED_CALLS, ratio: float = EXPECTED_CALLS_RATIO
) -> int:
    """A fifth of the calls so far, at least `minimum`. The Lindy estimate (as many
    again) proved optimistic on short conversations (tau-bench: sessions end once the
    task is done), where evictions then cost more re-prefill than they saved; half the
    calls still evicted too eagerly on Claude Code (0.821x at 96.6% retention against
    0.803x at 97.5% with a fifth: fewer breaks, fewer recalls)."""
    return max(int(calls_so_far * ratio), minimum)


@dataclass(frozen=True, slots=True)
class Decision:
    """One gate decision and the numbers it was made from."""

    evict: bool
    evicted_tokens: int
    tokens_after_cut: int
    expected_remaining_calls: int
    p_hit: float
    p_miss: float
    saving_usd: float
    cost_usd: float
    reason: str
    risk_usd: float = 0.0  # expected price of recalls of what goes (`recall_risk_usd`)

    def to_dict(self) -> dict[str, Any]:
        return {
            "evict": self.evict,
            "evictedTokens": self.evicted_tokens,
            "tokensAfterCut": self.tokens_after_cut,
            "expectedRemainingCalls": self.expected_remaining_calls,
            "pHit": self.p_hit,
            "pMiss": self.p_miss,
            "savingUsd": self.saving_usd,
            "costUsd": self.cost_usd,
            "riskUsd": self.risk_usd,
            "reason": self.reason,
        }


def should_evict(
    evicted_tokens: int,
    tokens_after_cut: int,
    expected_remaining_calls: int,
    prices: Prices | None = None,
    profile: str = "openai",
    min_tokens: int = 0,
    risk_usd: float = 0.0,
) -> Decision:
    """Evict only when evicted × p_hit × calls > after_cut × (p_write − p_hit) + risk.

    Left: what later calls save by not reading the evicted tokens from the cache.
    Right: the one-time price of re-prefilling everything after the cut, which
    would otherwise have been a cache hit; the provider charges it as a cache write
    (`profile`: Anthropic 1.25× an uncached token, OpenAI 1×). At most `min_tokens`
    evicted is never worth a break: a small saving is the likeliest to be needed back.
    """
    p = prices or Prices()
    saving = evicted_tokens * p.hit * expected_remaining_calls / 1e6
    cost = tokens_after_cut * (p.write_price(profile) - p.hit) / 1e6
    evict = evicted_tokens > max(min_tokens, 0) and saving > cost + risk_usd
    if evicted_tokens <= 0:
        reason = "nothing to evict"
    elif evicted_tokens <= min_tokens:
        reason = f"{evicted_tokens} tokens are not worth a cache break (minimum {min_tokens})"
    elif evict:
        reason = f"saves ${saving:.6f} over {expected_remaining_calls} calls > re-prefill ${cost:.6f}"
    else:
        reason = f"re-prefill ${cost:.6f} >= saving ${saving:.6f} over {expected_remaining_calls} calls"
    if risk_usd and evicted_tokens > max(min_tokens, 0):
        reason += f" (recall risk ${risk_usd:.6f})"
    return Decision(
        evict,
        evicted_tokens,
        tokens_after_cut,
        expected_remaining_calls,
        p.hit,
        p.miss,
        saving,
        cost,
        reason,
        risk_usd,
    )


RECALL_CALL_TOKENS = 40
"""Output tokens of the model's `recall_artifact` call: the name, an id, a little JSON."""


def recall_risk_usd(
    bundle_tokens: Sequence[int],
    prompt_tokens: int,
    reuse: float,
    prices: Prices | None = None,
    profile: str = "openai",
) -> float:
    """What the recalls of retired bundles are expected to cost: each bundle comes back
    with probability `reuse`, and a recall is one more round trip, the whole prompt again
    (from the cache) plus the bundle's text (new) plus the model's short call for it."""
    if reuse <= 0 or not bundle_tokens:
        return 0.0
    p = prices or Prices()
    trip = prompt_tokens * p.hit + RECALL_CALL_TOKENS * p.output
    return reuse * sum(trip + n * p.write_price(profile) for n in bundle_tokens) / 1e6
