"""OpenHands' text tool format, measured on recorded sessions rewritten into it.

OpenHands prompts a model without native tool calling for its tools in text
(`openhands/llm/fn_call_converter.py`): the model writes `<function=NAME>` with
`<parameter=KEY>VALUE</parameter>` lines, and each result comes back as a user message that
starts `EXECUTION RESULT of [NAME]:`. Many published OpenHands trajectories are stored that
way. No such recording is in the shared corpus, so this rewrites the mini-swe-agent
sessions (the same SWE-bench tasks, a shell as the one tool) into that format, message for
message, and replays both through the bench: what TokenPilot does with OpenHands' format
should be what it does with mini-swe-agent's.

    python benchmarks/bench_openhands_text.py [../shared/traces/mini_swe_agent]
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

from tokenpilot.measure.bench.methods import KeepLastN, TokenPilotMethod, Vanilla, oracle_methods
from tokenpilot.measure.bench.replay import replay
from tokenpilot.measure.traces import load
from tokenpilot.measure.traces.model import Session
from tokenpilot.messages.observations import is_observation

_FENCE = re.compile(r"```[a-zA-Z_]*\n(.*?)```", re.DOTALL)
_RETURNCODE = re.compile(r"\A\s*<returncode>(-?\d+)</returncode>\s*", re.DOTALL)
_TAG = re.compile(r"</?(?:output|output_head|output_tail|elided_chars|warning)>")


def to_openhands(text: str) -> str:
    """An assistant message whose last fenced block is the command, in OpenHands' text form."""
    blocks = list(_FENCE.finditer(text))
    if not blocks:
        return text
    last = blocks[-1]
    call = f"<function=execute_bash>\n<parameter=command>\n{last.group(1).strip()}\n</parameter>\n</function>"
    return (text[: last.start()].rstrip() + "\n\n" + call).lstrip()


def result_to_openhands(text: str) -> str:
    """A mini-swe-agent observation as OpenHands' execution result of its shell."""
    m = _RETURNCODE.match(text)
    code = m.group(1) if m else "0"
    body = _TAG.sub("", text[m.end() :] if m else text).strip("\n")
    return f"EXECUTION RESULT of [execute_bash]:\n{body}\n[Command finished with exit code {code}]"


OPENHANDS_NAMES = {"bash": "execute_bash"}  # mini-swe-agent's shell under OpenHands' name


def call_to_string(call: dict) -> str:
    """A tool call as OpenHands' converter writes it (`convert_tool_call_to_string`)."""
    fn = call.get("function") or {}
    name = OPENHANDS_NAMES.get(fn.get("name"), fn.get("name"))
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError:
        args = {}
    out = f"<function={name}>\n"
    for key, value in args.items() if isinstance(args, dict) else ():
        multi = isinstance(value, str) and "\n" in value
        shown = json.dumps(value) if isinstance(value, list | dict) else f"{value}"
        out += (
            f"<parameter={key}>"
            + ("\n" if multi else "")
            + shown
            + ("\n" if multi else "")
            + "</parameter>\n"
        )
    return out + "</function>"


def rewrite(session: Session) -> Session:
    """The session as OpenHands sends it to a model it prompts for tools in text: each
    call appended to the assistant's words, each result a user message with its prefix
    (`convert_fncall_messages_to_non_fncall_messages`); a text-action session's fenced
    commands and observations the same way."""
    out = copy.deepcopy(session)
    msgs = out.messages
    names: dict[str, str] = {}
    for i, m in enumerate(msgs):
        content = m.get("content") if isinstance(m.get("content"), str) else ""
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = m.pop("tool_calls")
            for c in calls:
                name = (c.get("function") or {}).get("name", "function")
                names[c.get("id")] = OPENHANDS_NAMES.get(name, name)
            m["content"] = (content + "\n\n" + "\n".join(call_to_string(c) for c in calls)).lstrip()
        elif m["role"] == "tool":
            name = names.get(m.get("tool_call_id"), m.get("name") or "function")
            msgs[i] = {"role": "user", "content": f"EXECUTION RESULT of [{name}]:\n{content}"}
        elif m["role"] == "user" and i > 0 and is_observation(m, msgs[i - 1]):
            m["content"] = result_to_openhands(content)
        elif m["role"] == "assistant":
            m["content"] = to_openhands(content)
    out.tools = []  # the tools are described in the system prompt's text
    out.id = session.id
    out.fmt = "openhands_text"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "mini_swe_agent"
    p.add_argument("path", nargs="?", default=str(default))
    args = p.parse_args()
    sessions = load(args.path)
    methods = [Vanilla(), oracle_methods()[0], KeepLastN(), TokenPilotMethod(name="tokenpilot")]
    print(f"{'format':<16}{'method':<14}{'cost $':>9}{'vs vanilla':>12}{'retention':>11}{'all':>8}")
    for name, ss in (("mini-swe-agent", sessions), ("openhands text", [rewrite(s) for s in sessions])):
        base = None
        for m in methods:
            r = replay(ss, m).record()
            base = base or r["cost_usd"]
            print(
                f"{name:<16}{m.name:<14}{r['cost_usd']:>9.4f}{r['cost_usd'] / base:>11.3f}x"
                f"{r['retention']:>11.3f}{r['retention_all']:>8.3f}"
            )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
