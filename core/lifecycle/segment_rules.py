"""The segment rules' settings (`SegmentRules`): which rules run and their thresholds,
each with the reason for its value. The rules themselves are `segments.py`'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SegmentRules:
    """Which segment rules run, with their thresholds. Each one is measured in the README.

    `stale_after_turns`: a result unused for this many turns may go (None: never).
    `stale_min_tokens`: only results at least this large are worth a stale eviction.
    `min_age_turns`: no rule evicts a bundle younger than this many turns.
    `edit_supersedes_read`: a later edit of a file (not only a whole write) retires
    an earlier read of it; off by default: the agent quotes the unedited rest back.
    `superseded_writes`: a whole write of a file whose text is in its own arguments goes
    once the file is written whole or read whole again (last, so the fields before it
    keep their positions).
    `stale_after_action`: a result goes stale only once a later turn changed a file (a
    write or an edit that did not fail). Until the agent acts on what it gathered, what
    it gathered is its working material, however long it goes unnamed: an agent that
    reads, lists and runs commands without a word and then writes its plan or report
    quotes all of it at once (`claude_code_mclaude` `ff59cfd2`: ten ssh log commands,
    then a report quoting them; `claude_code_codemie` `196820da`: plan mode, three source
    reads, then the plan). A coding agent edits as it goes, so the rule still retires
    what it read before its last edit. No threshold of its own: one structural fact.
    `answer_is_action`: answering the person (a turn without calls) or being asked for
    more (a new user message) is acting on what was gathered too: the report is written,
    or the session moved on. Not for a file's text (a read): the agent may edit that file
    later with names it has not repeated, so a read waits for a change, as before. A session that never edits a file (system administration
    over ssh) then still sheds what it gathered for an earlier answer
    (`claude_code_mclaude` 0.783x -> 0.767x of vanilla, the other shared sets unchanged).
    `stale_after_turns`: 4. Of the turns still needed after the call that saw them, most
    are needed again 20-41 calls later, not within a few (`../shared/FRONTIER.md` §2):
    between 4 and 8 unnamed turns little changes in what will be needed, while a dead
    output is kept twice as long. Measured against 8 on every shared set: as cheap or
    cheaper, at 95% retention or more under both rules (docs/frontier.md).
    `stale_written_after_turns`: a file the agent wrote from its own text (a write
    tool, a heredoc, `echo`) goes stale after this many unnamed turns instead (at least
    `stale_after_turns`; None: the same). Its text is the agent's own, which the bench's
    second rule counts as a need: the agent writes its next script with the names of
    the last one. On mini-swe-agent, whose scripts are a fifth of the prompt, 8 turns
    kept 94.0% of those needs, 12 turns 95.6%, 16 turns 96.9% (0.784x, 0.805x, 0.834x
    of vanilla): 12 is the shortest that keeps 95%.
    `keep_written_calls`: a retired bundle that wrote or edited a file keeps its call
    (the agent's text) and loses only its output, cut in place (`keeps_its_call`). Off
    by default: the calls are large and the saving goes with them (mini-swe-agent
    0.805x -> 0.819x); on at the dial's "all".
    """

    superseded_reads: bool = True
    superseded_commands: bool = True
    consumed_listings: bool = True
    stale_after_turns: int | None = 4
    stale_min_tokens: int = 200
    min_age_turns: int = 3
    edit_supersedes_read: bool = False
    superseded_writes: bool = True
    stale_after_action: bool = True
    stale_written_after_turns: int | None = 12
    keep_written_calls: bool = False
    answer_is_action: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "superseded_reads": self.superseded_reads,
            "superseded_writes": self.superseded_writes,
            "superseded_commands": self.superseded_commands,
            "consumed_listings": self.consumed_listings,
            "stale_after_turns": self.stale_after_turns,
            "stale_min_tokens": self.stale_min_tokens,
            "min_age_turns": self.min_age_turns,
            "edit_supersedes_read": self.edit_supersedes_read,
            "stale_after_action": self.stale_after_action,
            "stale_written_after_turns": self.stale_written_after_turns,
            "keep_written_calls": self.keep_written_calls,
            "answer_is_action": self.answer_is_action,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SegmentRules:
        """Unknown keys are skipped: a state written by a newer replica of a fleet (a rule
        this one does not know) still loads, with that rule at this version's default."""
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in dict(d).items() if k in known})

    @property
    def enabled(self) -> bool:
        return (
            self.superseded_reads
            or self.superseded_writes
            or self.superseded_commands
            or self.consumed_listings
            or self.stale_after_turns is not None
        )
