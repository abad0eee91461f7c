"""Segment-level lifecycle: tool bundles inside a task whose content nothing needs any more.

A coding session is one long task that never finishes, so task-level eviction has
nothing to remove. Inside it, most tool output has a short useful life: a file read
is replaced by the next read of that file, a test run by the next run of the same
command, a search by the reads of its hits, and a large output the agent stopped
talking about is dead weight that every later call re-reads.

A *bundle* is one turn with tool calls (the assistant's call(s) plus their results),
the unit `evict.plan_eviction` removes whole. `bundle_record` describes one from the
frozen history (pure, memoisable); `evictable_bundles` applies the rules below to
the records and says which bundles may go, and why:

- **superseded read**: a read of a file, later read again (the same range, or the
  whole file) or written whole; optionally also a later edit of it.
- **superseded write**: a whole write of a file whose content is the agent's own
  arguments (a write tool, a heredoc, `echo`), later written whole again or read whole:
  the file's content as it now stands is in that later turn. An append (`>> f`) writes
  nothing whole; a program's output sent to a file (`run > f`) is not in the arguments,
  and what the run printed may matter, so it is left to the other rules.
- **superseded command**: a command (any tool call) later run again with the very
  same arguments.
- **consumed listing**: a search or listing whose hits were all opened later or
  never named again.
- **stale output**: a large result whose identifiers the agent has not used for
  `stale_after_turns` turns, once the agent has changed a file since it arrived
  (`stale_after_action`). A whole read of a file is used while the agent names
  the file (a partial read of it does not take its place), until superseded.
- **window** (`WindowRule`, in `segment_window.py`): once the rendered history passes
  `trigger_tokens`, every bundle older than the last `keep_calls` calls goes in one
  pass. The next cut waits until the history grows past the trigger again, so a
  long tool loop costs one cache break per cut (a sawtooth), not one per call.

*Use* is what the agent and the user say and do: paths, file names and identifiers
in user text, assistant text and tool-call arguments (a use named in words counts).
A use is charged to the latest bundle whose results contain that reference, so a
name every output mentions keeps only its latest carrier alive. A bundle that a
later turn uses within the protection window is never evicted, nor one younger than
`min_age_turns`. A bundle whose turn opened with a user message goes without it:
the user's words always stay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._canonical import canonical_json
from ..estimator import FAILED_RE, extract_refs
from ..ingest.gate import DEDUP_NOTE
from ..ingest.reshown import RESHOWN_NOTE
from ..ingest.stabilize import is_recall_tool
from ..messages.call_kinds import (
    RANGE_KEYS,
    SHELL_TOOLS,
    authored_write,
    call_kind,
    norm_tool,
    path_of,
    shell_action,
    shell_command,
)
from ..messages.observations import closing_action, is_observation, text_call
from ..messages.turns import Turn, call_name_args, content_text, parsed_args, tool_calls_of
from ..tokens import message_tokens
from .segment_rules import SegmentRules as SegmentRules  # re-exported: the rules' settings
from .segment_window import WindowRule as WindowRule  # re-exported: the window is one of the rules
from .segment_window import window_bundles as window_bundles

Message = Mapping[str, Any]

_MAX_RESULT_SCAN = 200_000  # chars of one result scanned for references (linear, bounded)


@dataclass(frozen=True, slots=True)
class BundleRecord:
    """One turn, as the segment rules see it."""

    turn_id: str
    opens_with_user: bool
    has_calls: bool
    kind: str  # "read", "write", "edit", "search", "command", "none"
    paths: tuple[str, ...]  # files the calls named (read, written, edited or listed)
    whole_read: bool  # a read without a line range, or a write of the whole file (not an append)
    call_key: str  # tool names + canonical arguments (identical reruns share it)
    uses: frozenset[str]  # references in the turn's user text, assistant text and arguments
    said: frozenset[str]  # references in its user and assistant words only (no arguments, no results)
    provides: frozenset[str]  # references in its tool results
    hits: frozenset[str]  # file paths a search or listing returned
    failed: bool
    repeat: bool  # a result points at an earlier copy (dedup, re-shown lines): it supersedes nothing
    tokens: int
    closes: bool = False  # its action wraps the agent's work up (`observations.closing_action`)
    authored: bool = False  # a write whose content is its own arguments (a write tool, a heredoc, echo)


def bundle_record(messages: Sequence[Message], turn: Turn) -> BundleRecord:
    """The record of one turn (pure: the same messages give the same record)."""
    user_texts: list[str] = []
    intent: list[str] = []
    words: list[str] = []
    results: list[str] = []
    calls: list[tuple[str, Mapping[str, Any], str]] = []
    tokens = 0
    for k in range(turn.start, turn.end):
        m = messages[k]
        role = m.get("role")
        text = content_text(m.get("content"))
        tokens += message_tokens(m)
        if role == "assistant":
            intent.append(text)
            words.append(text)
            for c in tool_calls_of(m):
                name, raw = call_name_args(c)
                calls.append((name, parsed_args(raw), raw))
                intent.append(raw[:20_000])
        elif role == "tool" or (k > turn.start and is_observation(m, messages[k - 1])):
            results.append(text[:_MAX_RESULT_SCAN])
        else:
            user_texts.append(text)
    if not calls and results:  # a text action: the call is written in the assistant's words
        action = text_call(intent[-1] if intent else "")
        if action:
            raw = canonical_json(action[1])
            calls.append((action[0], action[1], raw))
            intent.append(raw)
    kinds = {call_kind(n, a) for n, a, _ in calls}
    kind = kinds.pop() if len(kinds) == 1 else ("command" if kinds else "none")
    paths_set: set[str] = set()
    whole = kind in ("read", "write")
    for n, a, _ in calls:
        command = shell_command(a) if norm_tool(n) in SHELL_TOOLS else None
        if command is not None:
            _, path, whole_cmd = shell_action(command)
            whole = whole and whole_cmd
        else:
            path = path_of(a)
            whole = whole and not any(a.get(key) for key in RANGE_KEYS)
        if path:
            paths_set.add(path)
    paths = tuple(sorted(paths_set))
    call_key = canonical_json([[norm_tool(n), a if a else raw] for n, a, raw in calls])
    result_text = "\n".join(results)
    # What the bundle introduced: the refs in its results and, for a read or a whole write,
    # the file itself (a later mention of it uses this bundle). An edit or a search that
    # names the file must not take over as the carrier its later mentions are charged to.
    named = (
        {x for p in paths for x in (p, p.rstrip("/").rsplit("/", 1)[-1]) if x}
        if kind in ("read", "write")
        else set()
    )
    if calls and all(is_recall_tool(n) for n, _, _ in calls):
        # a copy of what the archive holds: its names stay charged to their source
        provides: frozenset[str] = frozenset()
    else:
        provides = frozenset(extract_refs(result_text) | named) if results else frozenset(named)
    hits = frozenset(extract_refs(result_text, identifiers=False)) if kind == "search" else frozenset()
    return BundleRecord(
        turn_id=turn.turn_id,
        opens_with_user=turn.opens_with_user or any(t.strip() for t in user_texts),
        has_calls=bool(calls),
        kind=kind,
        paths=paths,
        whole_read=whole,
        call_key=call_key,
        uses=frozenset(extract_refs("\n".join(user_texts + intent))),
        said=frozenset(extract_refs("\n".join(user_texts + words))),
        provides=provides,
        hits=hits,
        failed=any(FAILED_RE.match(r) for r in results),
        repeat=any(DEDUP_NOTE in r or RESHOWN_NOTE in r for r in results),
        tokens=tokens,
        closes=any(closing_action(norm_tool(n), _command_of(a, raw)) for n, a, raw in calls),
        authored=kind == "write" and all(authored_write(n, a) for n, a, _ in calls),
    )


def _command_of(args: Mapping[str, Any], raw: str) -> str:
    """The command a call runs (a shell's command line), else its raw arguments."""
    command = shell_command(args)
    return command if command is not None else raw


def closing(records: Sequence[BundleRecord]) -> bool:
    """The agent is wrapping its work up: it exported its change or submitted
    (`observations.CLOSING_MARKERS`) and has not changed a file since, nor has the
    person asked for anything since (either starts a new stretch of work)."""
    for r in reversed(records):
        if r.closes:
            return True
        if r.opens_with_user or r.kind in ("write", "edit"):
            return False
    return False


RULES = (
    "superseded read",
    "superseded write",
    "superseded command",
    "consumed listing",
    "stale output",
    "window",
    "tail",
)


def rule_of(reason: str) -> str:
    """The rule (one of `RULES`) a reason from `evictable_bundles` names."""
    return next((r for r in RULES if reason.startswith(r)), reason)


def keeps_its_call(record: BundleRecord, reason: str, rules: SegmentRules) -> bool:
    """Whether a retired bundle keeps its call and loses only its output
    (`keep_written_calls`). A bundle that wrote or edited a file holds the agent's own
    text of that file in its call (a heredoc, a write's content, an edit's new lines),
    which it quotes when it edits the file again: only the output goes
    (`evict.plan_eviction(keep_calls=…)`). A superseded one goes whole: the later turn
    holds that text as it now stands."""
    return (
        rules.keep_written_calls and record.kind in ("write", "edit") and not reason.startswith("superseded")
    )


def _same_file(a: str, b: str) -> bool:
    """Two spellings of one path: equal, or one ends with the other at a '/'."""
    if a == b:
        return True
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return long.endswith("/" + short.lstrip("./"))


def last_uses(records: Sequence[BundleRecord]) -> list[int]:
    """Per bundle, the last turn that used a reference it provided (itself when none did).

    Each use is charged to the latest earlier bundle that provided the reference, so a
    name every output mentions keeps only its latest carrier alive. A file's name is
    also charged to the standing whole read of that file: a later partial read (`sed -n`,
    a line range) of it carries its name without holding the rest of its text, so the
    whole read stays in use while the agent works on the file, until a later whole read
    or whole write supersedes it. (Charged to the partial read alone, the whole read went
    stale under the agent's feet: on mini-swe-agent `django-13321` 86.7% retention.)
    """
    last_use = list(range(len(records)))
    carrier: dict[str, int] = {}
    whole: dict[str, int] = {}  # file name -> its standing whole read
    for j, r in enumerate(records):
        for ref in r.uses:
            for i in (carrier.get(ref), whole.get(ref)):
                if i is not None and i < j:
                    last_use[i] = j
        for ref in r.provides:
            carrier[ref] = j
        if r.paths and not r.failed and not r.repeat:
            if r.kind == "write":
                for ref in _file_names(r.paths):
                    whole.pop(ref, None)
            elif r.kind == "read" and r.whole_read:
                for ref in _file_names(r.paths):
                    whole[ref] = j
    return last_use


def _file_names(paths: Sequence[str]) -> set[str]:
    """A file as words name it: its path as written and its base name."""
    return {x for p in paths for x in (p, p.rstrip("/").rsplit("/", 1)[-1]) if x}


def named_in_words(records: Sequence[BundleRecord]) -> set[int]:
    """Turns whose file a later user or assistant text names (invariant I6, structurally).

    A read introduces its file's content; a later read or whole write of the same file
    supersedes it as the carrier (a write's content is the agent's own arguments: naming
    the file it wrote, as its report does, keeps no read alive). A name in later words
    (not in tool arguments or results, which every output repeats) keeps its carrier:
    the read that last put that file's content in the history. Such a turn must stay,
    or come back if evicted.
    """
    carrier: dict[str, int] = {}
    named: set[int] = set()
    for j, r in enumerate(records):
        # A turn that reads the file its own words name ("re-read plan.md") uses its own read.
        if r.kind in ("read", "write") and r.paths and not r.failed and not r.repeat:
            for ref in _file_names(r.paths):
                carrier[ref] = j
        for ref in r.said:
            i = carrier.get(ref)
            if i is None and "/" in ref:  # a full path names the file a base name introduced
                i = carrier.get(ref.rstrip("/").rsplit("/", 1)[-1])
            if i is not None and i < j and records[i].kind == "read":
                named.add(i)
    return named


def evictable_bundles(
    records: Sequence[BundleRecord],
    rules: SegmentRules,
    *,
    upto: int | None = None,
    last_use: Sequence[int] | None = None,
) -> dict[int, str]:
    """Turn index -> reason, for bundles the rules retire as of turn `upto` (default: all).

    Only turns before `upto` are read, so the answer for a batch never depends on
    what comes after it (the same history prefix gives the same plan, I2).

    One pass from the last turn back, with what the later turns did indexed as it goes
    (by file name, `_file_key`), so a batch costs about the turns it reads rather than
    their square: a session of thousands of turns is planned as cheaply per turn as a
    short one. `last_use`: `last_uses(records)` when the caller has it already (used only
    when every record is read).
    """
    n = len(records) if upto is None else min(upto, len(records))
    if not rules.enabled or n == 0:
        return {}
    recs = records[:n]
    if last_use is None or n != len(records):
        last_use = last_uses(recs)
    later = _Later()
    out: dict[int, str] = {}
    changed = False  # a turn after the one judged changed a file
    answered = False  # ... or answered the person, or the person asked for more
    for i in range(n - 1, -1, -1):
        r = recs[i]
        if r.has_calls and n - 1 - i >= rules.min_age_turns:
            reason = None
            if rules.superseded_reads and r.kind == "read" and r.paths:
                reason = later.supersedes_read(r, rules)
            if rules.superseded_writes and r.kind == "write" and r.whole_read and r.authored and r.paths:
                reason = later.supersedes_write(r)
            if reason is None and rules.superseded_commands and r.kind in ("command", "search"):
                if r.call_key in later.calls:
                    reason = "superseded command: the same call ran again later"
            if reason is None and rules.consumed_listings and r.kind == "search" and r.hits:
                reason = later.consumes(r, i, last_use)
            # A file's text is acted on by changing a file; anything else gathered, also
            # by answering (`SegmentRules.answer_is_action`).
            acted = changed or (answered and rules.answer_is_action and r.kind != "read")
            if reason is None and (acted or not rules.stale_after_action):
                reason = stale(r, n - 1 - last_use[i], rules)
            if reason is not None:
                out[i] = reason
        later.add(r)
        changed = changed or (r.kind in ("write", "edit") and not r.failed)
        answered = answered or not r.has_calls or r.opens_with_user
    return dict(sorted(out.items()))


def stale(r: BundleRecord, unused_turns: int, rules: SegmentRules) -> str | None:
    """The stale-output rule: a result large enough, unused for `stale_after_turns` turns
    (a file the agent wrote from its own text: `stale_written_after_turns`)."""
    after = rules.stale_after_turns
    if r.authored and rules.stale_written_after_turns is not None and after is not None:
        after = max(after, rules.stale_written_after_turns)
    if after is None or r.tokens < rules.stale_min_tokens:
        return None
    if unused_turns < after:
        return None
    return f"stale output: not used for {unused_turns} turns"


def _file_key(path: str) -> str:
    """A key two spellings of one file share (`_same_file(a, b)` implies equal keys): the
    last component, with the leading dots and slashes `_same_file` strips."""
    return path.rsplit("/", 1)[-1].lstrip("./")


class _Later:
    """What the turns after the one being judged did, indexed for the segment rules."""

    __slots__ = ("any_opened", "calls", "files", "named", "opened")

    def __init__(self) -> None:
        self.calls: set[str] = set()  # call keys of later turns that point at no earlier copy
        # file key -> (path, kind, whole read, call key) of the later reads, writes and
        # edits that neither failed nor repeat an earlier copy: what may supersede a read
        self.files: dict[str, set[tuple[str, str, bool, str]]] = {}
        self.opened: dict[str, set[str]] = {}  # file key -> paths later reads, edits, writes named
        self.any_opened = False
        self.named: set[str] = set()  # references the later turns used

    def add(self, o: BundleRecord) -> None:
        if not o.repeat:
            self.calls.add(o.call_key)
        if o.kind in ("read", "edit", "write"):
            for p in o.paths:
                key = _file_key(p)
                self.opened.setdefault(key, set()).add(p)
                self.any_opened = True
                if not o.failed and not o.repeat:
                    self.files.setdefault(key, set()).add((p, o.kind, o.whole_read, o.call_key))
        self.named.update(o.uses)

    def supersedes_read(self, r: BundleRecord, rules: SegmentRules) -> str | None:
        for path in r.paths:
            for p, kind, whole, call_key in self.files.get(_file_key(path), ()):
                if not _same_file(path, p):
                    continue
                if kind == "read" and (whole or call_key == r.call_key):
                    break
                if (kind == "write" and whole) or (kind == "edit" and rules.edit_supersedes_read):
                    break
            else:
                return None  # this path is not read or written again: the read still stands
        return "superseded read: the file was read or written again later"

    def supersedes_write(self, r: BundleRecord) -> str | None:
        """A whole write is superseded by a later whole write or whole read of its file."""
        for path in r.paths:
            if not any(
                whole and kind in ("read", "write") and _same_file(path, p)
                for p, kind, whole, _ in self.files.get(_file_key(path), ())
            ):
                return None  # this file's content as written still stands
        return "superseded write: the file was written whole or read whole again later"

    def consumes(self, r: BundleRecord, i: int, last_use: Sequence[int]) -> str | None:
        """Every hit the agent named later was opened later (its content lives there now)."""
        for hit in r.hits:
            if any(_same_file(hit, p) for p in self.opened.get(_file_key(hit), ())):
                continue
            if hit in self.named:
                return None  # named later but never opened: the listing is still the source
        if last_use[i] > i and not self.any_opened:
            return None
        return "consumed listing: its hits were opened later or never named again"
