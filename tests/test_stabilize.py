"""Prefix stabilisation: volatile fields become placeholders, the rest is untouched."""

from __future__ import annotations

from conftest import shared_path

from tokenpilot.ingest.stabilize import (
    RECALL_TOOL,
    VolatilePattern,
    merge_tools,
    stabilize_text,
)
from tokenpilot.tokens import count_tokens


def test_dates_times_ids_paths_become_placeholders():
    text = (
        "You are helpful.\nCurrent date: 2026-12-02\nCurrent time: 09:17 UTC\n"
        "Session started [Wed 2026-12-02 09:17 UTC]\n"
        "Request id: 123e4567-e89b-12d3-a456-426614174000\n"
        "session_id=abc123 | agent=main | host=vm-7\n"
        "Working directory: /home/alice/ws\nRead /home/alice/ws/AGENTS.md first.\n"
        "hostname: box.internal\nLast login Wed, 02 Dec 2026 09:17:33 +0000\n"
    )
    st = stabilize_text(text)
    for value in ("2026-12-02", "09:17", "123e4567", "abc123", "/home/alice", "box.internal"):
        assert value not in st.text, value
    assert "You are helpful." in st.text
    # the file name under the workspace stays visible: only the root is a placeholder
    assert "{{TP_PATH_1}}/AGENTS.md" in st.text
    values = st.values
    assert values["{{TP_PATH_1}}"] == "/home/alice/ws"
    assert any(v == "2026-12-02" for v in values.values())


def test_dates_are_per_call_and_paths_session_constant():
    st = stabilize_text("Current date: 2026-12-02\nWorking directory: /tmp/run-42")
    assert [v for _, v in st.call_values] == ["2026-12-02"]
    assert [v for _, v in st.session_values] == ["/tmp/run-42"]


def test_same_text_modulo_volatile_values_is_identical():
    a = stabilize_text("Today: 2026-12-02. Workspace /home/alice/proj. sessionId=e2e-5")
    b = stabilize_text("Today: 2027-01-15. Workspace /home/bob/proj. sessionId=zz-9")
    assert a.text == b.text
    assert a.values != b.values


def test_pure_and_deterministic():
    text = "Current date: 2026-12-02\n/home/u/x and /home/u/x/y"
    assert stabilize_text(text) == stabilize_text(text)


def test_text_without_volatile_fields_is_unchanged():
    text = "You are a careful assistant. Use tools when needed. Version 3 of 7."
    st = stabilize_text(text)
    assert st.text == text and st.values == {}


def test_user_declared_pattern():
    text = "Build: nightly-8842 ready"
    assert stabilize_text(text).text == text
    st = stabilize_text(text, (VolatilePattern("BUILD", r"nightly-\d+"),))
    assert st.text == "Build: {{TP_BUILD_1}} ready"
    st2 = stabilize_text(text, (VolatilePattern("BUILD", r"nightly-\d+", per_call=True),))
    assert st2.call_values == (("{{TP_BUILD_1}}", "nightly-8842"),)


def test_openclaw_runtime_line():
    line = "Runtime: agent=main | session=agent:main:explicit:e2e-5 | sessionId=e2e-5 | host=vm | repo=/home/alice/ws"
    st = stabilize_text("Intro\n" + line + "\nOutro")
    assert st.text == "Intro\nRuntime: {{TP_RUNTIME_1}}\nOutro"


def _vary(text: str) -> str:
    return (
        text.replace("2026-12-02", "2027-03-14")
        .replace("/home/alice/ws", "/home/bob/work/other")
        .replace("e2e-5", "sess-77")
        .replace("tpproxy/fake-model", "tpproxy/other-model")
    )


def test_real_openclaw_prompts_share_95_percent_of_tokens():
    prompt = shared_path("openclaw", "run1_system_prompt.txt").read_text()
    other = _vary(prompt)
    assert other != prompt
    a, b = stabilize_text(prompt).text, stabilize_text(other).text
    common = 0
    for x, y in zip(a, b):
        if x != y:
            break
        common += 1
    assert a == b, f"stabilised prompts differ at char {common}: {a[common - 40 : common + 40]!r}"
    coverage = count_tokens(a[:common]) / count_tokens(prompt)
    assert coverage >= 0.95, coverage


def test_tools_canonical_sorted_and_append_only():
    def t(name: str) -> dict:
        return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}

    tools, changed = merge_tools([], [t("zeta"), t("alpha")], include_recall=True)
    names = [x["function"]["name"] for x in tools]
    assert names == ["alpha", "recall_artifact", "zeta"] and changed
    # a request without a tool keeps it listed, bytes unchanged
    again, changed = merge_tools(tools, [t("alpha")], include_recall=True)
    assert again == tools and not changed
    # new tools are appended after the known ones
    more, changed = merge_tools(tools, [t("beta"), t("alpha")], include_recall=True)
    assert [x["function"]["name"] for x in more] == names + ["beta"] and changed
    # without recall registration, it is not added
    plain, _ = merge_tools([], [t("a")], include_recall=False)
    assert [x["function"]["name"] for x in plain] == ["a"]
    assert RECALL_TOOL["function"]["name"] == "recall_artifact"


def test_a_time_value_stops_at_the_end_of_its_line():
    """The optional time zone must not swallow the next line's first word."""
    st = stabilize_text("Current time: 09:17\nFor exact seconds use the clock tool.\nCurrent time: 10:05 UTC")
    assert (
        st.text
        == "Current time: {{TP_TIME_1}}\nFor exact seconds use the clock tool.\nCurrent time: {{TP_TIME_2}}"
    )
    assert st.values == {"{{TP_TIME_1}}": "09:17", "{{TP_TIME_2}}": "10:05 UTC"}
