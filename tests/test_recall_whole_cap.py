"""A whole-artifact recall of a huge original: its first part, and the way to the rest.

The answer to `recall_artifact` enters the model's context whole. An original of 5 MB
recalled whole would overflow any window, so past `Config.hard_limit_chars` (the limit no
tool output passes either) the answer is the original's leading lines with a note naming
the range to ask for next; asking range by range gives the original back byte for byte.
"""

from __future__ import annotations

import json
import re

from tokenpilot import Config, TokenPilot

LINE = "row {i:06d}: " + "x" * 90 + "\n"


def _session(tp: TokenPilot, text: str) -> str:
    messages = [
        {"role": "user", "content": "dump the table"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]
    prepared = tp.prepare(messages, session_id="big")
    (aid,) = prepared.stats.artifacts
    return aid


def test_a_whole_recall_over_the_limit_gives_the_first_part_and_the_next_range():
    original = "".join(LINE.format(i=i) for i in range(50_000))  # 5.1 MB
    tp = TokenPilot(lifecycle=False)
    aid = _session(tp, original)
    answer = tp.execute_recall(json.dumps({"artifact_id": aid}), session_id="big")
    note, _, shown = answer.partition("\n")
    limit = Config().hard_limit_chars
    assert len(shown) <= limit and original.startswith(shown) and shown.endswith("\n")
    assert "over the 200,000-char limit of one recall" in note
    n = int(re.search(r"lines 1-(\d+) of 50000", note).group(1))
    assert f"start_line={n + 1}" in note

    # range by range, the rest comes back exact: nothing is lost
    parts = [shown]
    start = n + 1
    while start <= 50_000:
        end = min(start + n - 1, 50_000)
        got = tp.execute_recall(
            json.dumps({"artifact_id": aid, "start_line": start, "end_line": end}), session_id="big"
        )
        parts.append(got.partition("\n")[2])
        start = end + 1
    assert "".join(parts) == original


def test_a_whole_recall_under_the_limit_is_the_original():
    original = "".join(LINE.format(i=i) for i in range(1_000))  # 102 KB: reduced, recalled whole
    tp = TokenPilot(lifecycle=False)
    aid = _session(tp, original)
    answer = tp.execute_recall(json.dumps({"artifact_id": aid}), session_id="big")
    note, _, text = answer.partition("\n")
    assert text == original and "all 1000 lines" in note
