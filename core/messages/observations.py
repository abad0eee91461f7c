"""Observation messages of text-action agents: tool output carried by `user` messages.

SWE-agent's text formats and the older mini-swe-agent send what a command printed as a
`user` message. DESIGN.md I5: environment output is environment whatever role carries
it, when a declared, tested marker of that agent's format recognises it. The markers
are declared here, in one place, and tested on the shared recordings; every other user
message is the person's words and is never touched.

Recognised messages are reduced like a shell tool's output, and the turn machinery
attaches each one to the assistant action before it (as it does a tool result), so the
segment rules and the window can retire it with its action, recallable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OBSERVATION_TOOL = "bash"
"""The tool profile an observation is reduced with: what these agents run is a shell."""


@dataclass(frozen=True, slots=True)
class ObservationMarker:
    """One agent format's observation: `pattern` searched in the message's text."""

    agent: str
    name: str
    pattern: re.Pattern[str]


MARKERS: tuple[ObservationMarker, ...] = (
    # SWE-agent (default/xml/cursors text formats): every observation ends with the state
    # footer, then the `bash-$` prompt.
    ObservationMarker(
        "swe-agent",
        "state footer",
        re.compile(r"\(Open file: [^\n]*\)\n\(Current directory: [^\n]*\)\n?(?:bash-\$)?\s*\Z"),
    ),
    # SWE-agent's history processors: an elided observation, and the `OBSERVATION:` prefix.
    ObservationMarker(
        "swe-agent", "elided output", re.compile(r"\AOld environment output: \(\d+ lines omitted\)")
    ),
    ObservationMarker("swe-agent", "observation prefix", re.compile(r"\AOBSERVATION:\s")),
    # mini-swe-agent (text-action format, before tool calling): `<returncode>` then `<output>`.
    ObservationMarker(
        "mini-swe-agent",
        "returncode",
        re.compile(r"\A\s*<returncode>-?\d+</returncode>\s*(?:<output>|<warning>|<output_head>)"),
    ),
    # OpenHands with a model it prompts for tools in text (`fn_call_converter`): a tool's
    # result comes back as a user message that starts `EXECUTION RESULT of [<tool>]:`.
    ObservationMarker(
        "openhands", "execution result", re.compile(r"\AEXECUTION RESULT of \[[^\]\n]{1,80}\]:")
    ),
)

_MAX_SCAN = 400  # the markers sit at the start or the end: scan only there (linear, bounded)


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
        return "\n".join(str(p.get("text", "")) for p in content)
    return None


def observation_marker(msg: Mapping[str, Any]) -> ObservationMarker | None:
    """The marker that recognises this user message as an observation, or None."""
    if not isinstance(msg, Mapping) or msg.get("role") != "user":
        return None
    text = _text(msg.get("content"))
    if not text:
        return None
    probe = text if len(text) <= 2 * _MAX_SCAN else text[:_MAX_SCAN] + "\n" + text[-_MAX_SCAN:]
    for marker in MARKERS:
        if marker.pattern.search(probe):
            return marker
    return None


def is_observation(msg: Mapping[str, Any], previous: Mapping[str, Any] | None) -> bool:
    """A user-role message that is environment output of a known text-action format.

    Only right after an assistant message (the action it answers): SWE-agent's task
    prompt also ends with the state footer, and it is the person's request, not output.
    """
    if not isinstance(previous, Mapping) or previous.get("role") != "assistant":
        return False
    return observation_marker(msg) is not None


# What an agent does when it wraps its work up: it exports its change as a diff (the
# deliverable of a coding task), or submits. Not words: the action itself. The session
# is then in its last calls, so an eviction must pay back within the fewest calls the
# cost gate assumes (`segments.closing`). Declared here, with the formats' markers.
CLOSING_MARKERS: tuple[ObservationMarker, ...] = (
    ObservationMarker("coding agents", "exports its change", re.compile(r"\bgit\s+(?:diff|format-patch)\b")),
    ObservationMarker("mini-swe-agent", "submits", re.compile(r"\bCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\b")),
    ObservationMarker("swe-agent", "submits", re.compile(r"\A\s*submit\s*\Z")),
)
CLOSING_TOOLS = frozenset({"submit"})
"""Tools whose call ends the agent's work (SWE-agent's function-calling `submit`)."""


def closing_action(tool: str, command: str) -> bool:
    """Does this action wrap the agent's work up (see `CLOSING_MARKERS`)?"""
    if tool.lower() in CLOSING_TOOLS:
        return True
    probe = command[:4000]
    return any(marker.pattern.search(probe) for marker in CLOSING_MARKERS)


_FENCE = re.compile(r"```[a-zA-Z_]*\n(.*?)```", re.DOTALL)
# OpenHands' text form of a tool call: `<function=NAME>` then `<parameter=KEY>VALUE</parameter>`
# lines, then `</function>` (a model may stop before writing it: its converter adds it).
_FUNCTION = re.compile(r"<function=([^>\n]{1,80})>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER_OPEN = re.compile(r"<parameter=([^>\n]{1,80})>")
_PARAMETER_CLOSE = "</parameter>"
_SCAN = 20_000  # the action ends the message: read only its tail (bounded)


def text_action(text: str) -> str | None:
    """The command of a text action: the last fenced block of the assistant's message
    (SWE-agent's and mini-swe-agent's formats both end the thought with it)."""
    blocks = _FENCE.findall(text[-_SCAN:]) if text else []
    return blocks[-1].strip() or None if blocks else None


def _function_block(text: str) -> re.Match[str] | None:
    """The `<function=…>` block OpenHands' own parser reads: the first (it allows one call
    per message). One linear pass, however long the text."""
    return _FUNCTION.search(text) if text and "<function=" in text else None


def _parameters(text: str, block: re.Match[str]) -> list[tuple[str, int, int]]:
    """(name, start, end) of each closed `<parameter=…>` value of a block, in one pass (a
    value left open ends the list: searching each opening for a close that never comes
    would read the rest of the text once per opening)."""
    out: list[tuple[str, int, int]] = []
    i, end = block.start(2), block.end(2)
    while (m := _PARAMETER_OPEN.search(text, i, end)) is not None:
        close = text.find(_PARAMETER_CLOSE, m.end(), end)
        if close < 0:
            break
        out.append((m.group(1), m.end(), close))
        i = close + len(_PARAMETER_CLOSE)
    return out


def text_call_spans(text: str) -> list[tuple[int, int]]:
    """Where the parameter values of the message's OpenHands `<function=…>` block sit
    (start, end offsets), so that an oversized one can be cut as a tool call's argument is;
    empty when the text writes no such call."""
    block = _function_block(text)
    return [] if block is None else [(start, end) for _, start, end in _parameters(text, block)]


def named_tool(text: str) -> str | None:
    """The tool a text action names (OpenHands' `<function=NAME>`); None for a fenced
    command, which names none."""
    block = _function_block(text)
    return block.group(1).strip() if block is not None else None


def text_call(text: str) -> tuple[str, dict[str, str]] | None:
    """The tool call of a text action, as (tool, arguments): OpenHands' `<function=…>`
    block (its parameters, stripped as its converter strips them), else the last fenced
    block as a shell command (`OBSERVATION_TOOL`); None when there is none."""
    block = _function_block(text)
    if block is not None:
        params = {name.strip(): text[start:end].strip() for name, start, end in _parameters(text, block)}
        return block.group(1).strip(), params
    action = text_action(text)
    return (OBSERVATION_TOOL, {"command": action}) if action else None
