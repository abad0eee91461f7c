"""Eviction planning: which turns leave the model's view, and what stands in their place.

`plan_eviction` is pure apart from `archive(text) -> artifact_id`, which stores the
exact messages of each evicted segment (canonical JSON of the list) so that the
stub's `recall_artifact` id gives them back byte-exact (invariant I3).

Conservative by construction (I4, I6): only whole turns go (a tool call never
loses its result), only turns whose every owner is evictable, never the last turn,
never a turn in the current batch, never an incomplete turn; turns linked by
tool-call ids go together or not at all, and so do the turns of one task.

The cost gate that decides whether a plan is worth its cache break is `gate.py`'s
(`should_evict`, re-exported here).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._canonical import artifact_id_for, canonical_json
from ..ingest.reshown import OutputsBefore
from ..messages.pairing import validate_pairing
from ..messages.turns import Turn, same_objects, tool_calls_of
from ..pricing import Prices
from ..registry import TaskRegistry
from .gate import (
    Decision,
    expected_remaining_calls,
    recall_risk_usd,
    should_evict,
)
from .plan_tokens import held_values
from .stubs import (
    archived,
    assistant_index,
    cut_marker,
    describe_call,
    describe_turn,
    output_indices,
    results_with_calls,
    segment_stub_text,
    stub_text,
    worth_cutting,
)

__all__ = [
    "Decision",
    "EvictionPlan",
    "Prices",
    "recall_risk_usd",
    "Segment",
    "ArchiveMemo",
    "content_ids",
    "expected_remaining_calls",
    "plan_eviction",
    "render",
    "should_evict",
    "validate_pairing",
]

Message = Mapping[str, Any]
_PREAMBLE = frozenset({"system", "developer"})


@dataclass(frozen=True, slots=True)
class Segment:
    """Messages [start, end) evicted together, and the stub that replaces them.

    `cuts` (offset from `start`, text): a segment cut in place. Its messages stay, so the
    agent's calls and words stay as written, and the message at `start + offset` (a tool
    output) shows `text`, a marker naming the recall of what it held, instead of its
    content. No stub then."""

    start: int
    end: int
    turn_ids: tuple[str, ...]
    task_ids: tuple[str, ...]
    artifact_id: str
    stub: dict[str, Any] | None
    reasons: tuple[str, ...] = ()  # per turn, for bundles retired by a segment rule; empty for tasks
    cuts: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {
            "start": self.start,
            "end": self.end,
            "turnIds": list(self.turn_ids),
            "taskIds": list(self.task_ids),
            "artifactId": self.artifact_id,
            "stub": self.stub,
            "reasons": list(self.reasons),
        }
        if self.cuts:
            out["cuts"] = [[offset, text] for offset, text in self.cuts]
        return out

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
            tuple((int(offset), str(text)) for offset, text in d.get("cuts", ())),
        )


def plan_index(
    segments: Sequence[Segment],
) -> tuple[set[int], dict[int, tuple[dict[str, Any], ...]], dict[int, str]]:
    """What a plan's segments do to the history: the indices dropped, the stubs by the
    index they stand before, and the outputs shown as a marker (index -> text)."""
    drop: set[int] = set()
    stubs: dict[int, tuple[dict[str, Any], ...]] = {}
    replace: dict[int, str] = {}
    for s in segments:
        if s.cuts:
            replace.update((s.start + offset, text) for offset, text in s.cuts)
            continue
        drop.update(range(s.start, s.end))
        if s.stub is not None:
            stubs[s.start] = (s.stub,)
    return drop, stubs, replace


def render(
    messages: Sequence[Message],
    drop: Collection[int],
    stubs: Mapping[int, Sequence[Message]],
    replace: Mapping[int, str] | None = None,
) -> list[dict[str, Any]]:
    """Messages minus `drop`; `stubs[i]` (messages) go right before index i's place;
    `replace[i]` is shown as message i's content."""
    out: list[dict[str, Any]] = []
    cut = replace or {}
    for i, m in enumerate(messages):
        for stub in stubs.get(i, ()):
            out.append(dict(stub))
        if i in drop:
            continue
        if i in cut:
            out.append({**m, "content": cut[i]})
        else:
            out.append(m if isinstance(m, dict) else dict(m))
    return out


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    """Indices to drop and, per evicted segment, its stub (or none); outputs cut in place."""

    evicted: frozenset[int]
    segments: tuple[Segment, ...]

    @property
    def stubs(self) -> dict[int, tuple[dict[str, Any], ...]]:
        """Segment start -> the messages that stand in for the segment (one stub)."""
        return {s.start: (s.stub,) for s in self.segments if s.stub is not None}

    @property
    def replaced(self) -> dict[int, str]:
        """Index -> the marker shown as that output's content (segments cut in place)."""
        return {s.start + offset: text for s in self.segments for offset, text in s.cuts}

    @property
    def covered(self) -> frozenset[int]:
        """Every index a segment of the plan holds, dropped or cut in place."""
        return frozenset(k for s in self.segments for k in range(s.start, s.end))

    def apply(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        return render(messages, self.evicted, self.stubs, self.replaced)


def content_ids(texts: dict[str, str]) -> Callable[[str], str]:
    """An archive that only names: each text's content id, the text kept in `texts`."""

    def name(text: str) -> str:
        aid = artifact_id_for(text)
        texts.setdefault(aid, text)
        return aid

    return name


class ArchiveMemo:
    """What a plan computes per message and per turn, kept for the next plan: the canonical
    JSON of each message as an eviction archives it, and each turn's description in a stub.
    The cost gate weighs the same retired bundles batch after batch while it defers them,
    and each weighing names their archives (a walk and an encoding of every message).

    Valid while the history is the one it was made from, extended: `begin` compares the
    history's message objects with those of the last plan (the managed history keeps its
    objects from call to call) and forgets everything when one differs; a remembered text
    is used only while its messages hold the values they held (`plan_tokens.held_values`).
    What a plan did not use again is forgotten at the next, so it holds one plan's worth.
    A plan made with it is byte for byte the plan made without it (`canonical_json` of a
    list is its items' joined)."""

    __slots__ = ("_last", "_new", "_old")

    def __init__(self) -> None:
        self._last: list[Message] = []
        self._new: dict[Any, tuple[tuple[Any, ...], str]] = {}
        self._old: dict[Any, tuple[tuple[Any, ...], str]] = {}

    def begin(self, messages: Sequence[Message]) -> None:
        self._old, self._new = (self._new if same_objects(self._last, messages) else {}), {}
        self._last = list(messages)

    def _get(self, key: Any, held: tuple[Any, ...], make: Callable[[], str]) -> str:
        hit = self._new.get(key) or self._old.pop(key, None)
        text = hit[1] if hit is not None and hit[0] == held else make()
        self._new[key] = (held, text)
        return text

    def span(self, messages: Sequence[Message], start: int, end: int, shown: OutputsBefore) -> str:
        """`canonical_json(archived(messages, start, end, shown))`."""
        parts = []
        for k in range(start, end):
            make = functools.partial(_archived_json, messages, shown, k)
            parts.append(self._get(k, held_values(messages[k]), make))
        return "[" + ",".join(parts) + "]"

    def described(self, messages: Sequence[Message], turn: Turn) -> str:
        """`describe_turn(messages, turn)`."""
        held = tuple(held_values(messages[k]) for k in range(turn.start, turn.end))
        return self._get(turn, held, lambda: describe_turn(messages, turn))


def _archived_json(messages: Sequence[Message], shown: OutputsBefore, k: int) -> str:
    return canonical_json(archived(messages, k, k + 1, shown)[0])


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


def plan_eviction(
    messages: Sequence[Message],
    turns: Sequence[Turn],
    registry: TaskRegistry,
    *,
    stub: bool = True,
    archive: Callable[[str], str],
    keep_from: int | None = None,
    already_evicted: Collection[int] = frozenset(),
    hidden: Collection[int] | None = None,
    bundles: Mapping[int, str] | None = None,
    from_index: int = 0,
    protected: Collection[int] = frozenset(),
    keep_calls: Collection[int] = frozenset(),
    memo: ArchiveMemo | None = None,
) -> EvictionPlan:
    """Plan the eviction of every turn whose owners are all evictable, and of the
    tool bundles (turn index -> reason) a segment rule retired.

    `keep_from`: messages at or after this index are the current batch and stay.
    `from_index`: only turns starting at or after this message go (the cost gate's cut).
    `protected`: turn indices whose task stays whatever its state (a later turn names
    what they introduced); the task stays whole. Segment rules judge use on their own.
    `hidden`: the indices of `already_evicted` the request no longer shows (default: all;
    a segment cut in place keeps its messages, so its calls still open the history).
    `already_evicted`: indices gone in an earlier plan; they are neither planned
    again nor counted as kept, and new segments never merge with old ones (an old
    stub keeps its bytes).
    `keep_calls`: turn indices among `bundles` whose calls stay as the agent wrote them
    (a file it wrote or edited: its own text, which it may edit again): only their
    outputs go, each cut in place to a marker (`Segment.cuts`).
    `memo`: what the last plan computed per message and turn (`ArchiveMemo`).
    """
    memo = memo or ArchiveMemo()
    memo.begin(messages)
    if not turns:
        return EvictionPlan(frozenset(), ())
    gone = frozenset(already_evicted)
    shown = OutputsBefore(messages)  # one walk of the history for every fold archived
    owners = registry.turn_owners()
    tasks = {t.task_id: t for t in registry.tasks}
    limit = len(messages) if keep_from is None else min(keep_from, len(messages))
    last = len(turns) - 1

    retired = bundles or {}
    keep_calls = {  # with no output worth cutting, a bundle goes whole like any other
        t
        for t in keep_calls
        if t in retired
        and any(worth_cutting(messages, k, retired[t], shown) for k in output_indices(messages, turns[t]))
    }

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
    shown_gone = gone if hidden is None else frozenset(hidden)  # what the request no longer shows
    while True:  # both steps only un-choose turns, so this ends
        blocked = {groups[t] for t in range(len(turns)) if not chosen[t] and not fully_gone[t]}
        narrowed = [c and groups[t] not in blocked for t, c in enumerate(chosen)]
        if not stub:
            # Without a stub the first message after the preamble could become an
            # assistant message, which Anthropic rejects: keep the leading run then.
            narrowed = _keep_user_first(messages, turns, narrowed, shown_gone)
        if narrowed == chosen:
            break
        chosen = narrowed

    segments: list[Segment] = []
    run: list[int] = []

    def owner_key(t: int) -> tuple[Any, ...]:
        return (by_rule[t], tuple(owners.get(turns[t].turn_id, [])), by_rule[t] and t in keep_calls)

    def span_start(t: int) -> int:
        # A bundle retired by a rule goes without the messages that opened its turn:
        # the user's words stay; the assistant's call and its results go together.
        return assistant_index(messages, turns[t]) if by_rule[t] else turns[t].start

    def flush() -> None:
        if not run:
            return
        start, end = span_start(run[0]), turns[run[-1]].end
        rule, task_ids, in_place = owner_key(run[0])
        reasons = tuple(retired[t] for t in run) if rule else ()
        turn_ids = tuple(turns[t].turn_id for t in run)
        aid = archive(memo.span(messages, start, end, shown))
        if in_place:
            cuts = tuple(
                (k - start, cut_marker(messages, k, retired[t], archive, shown))
                for t in run
                for k in output_indices(messages, turns[t])
                if worth_cutting(messages, k, retired[t], shown)
            )
            segments.append(Segment(start, end, turn_ids, task_ids, aid, None, reasons, cuts))
            run.clear()
            return
        stub_msg = None
        if stub and rule:
            items: list[tuple[str, str]] = []  # (reason, what the bundle was)
            for t in run:
                results = results_with_calls(messages, turns[t])
                if len(results) > 1:  # each result on its own: a recall brings back only the one needed
                    what = ", ".join(
                        f"{describe_call(call)} = {archive(memo.span(messages, k, k + 1, shown))}"
                        for k, call in results
                    )
                else:
                    what = memo.described(messages, turns[t])
                    if (
                        len(run) > 1
                    ):  # each bundle also on its own, so a recall brings back only what is needed
                        what += f" = {archive(memo.span(messages, span_start(t), turns[t].end, shown))}"
                items.append((retired[t], what))
            count = sum(len(output_indices(messages, turns[t])) for t in run)
            stub_msg = {"role": "user", "content": segment_stub_text(items, start, end, aid, count)}
        elif stub:
            task = tasks[task_ids[0]]
            outcome = "; ".join(task.completion_evidence) or task.lifecycle
            stub_msg = {"role": "user", "content": stub_text(task.title, outcome, start, end, aid)}
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
    return EvictionPlan(frozenset(plan_index(segments)[0]), tuple(segments))


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
