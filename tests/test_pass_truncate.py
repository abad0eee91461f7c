"""Truncation: per-tool-family limits, head/tail preview, never raises."""

from __future__ import annotations

import time

import pytest

from tokenpilot.passes.base import PassContext, ReductionPass, preview, recall_hint
from tokenpilot.passes.truncate import DEFAULT_LIMITS, Truncation, tool_family


def ctx(tool: str = "bash", artifact_id: str = "art-1") -> PassContext:
    return PassContext(tool_name=tool, artifact_id=artifact_id)


def log(n: int) -> str:
    """A shell-like output of about n chars with a distinct start and end."""
    body = "".join(f"line {i}: compiling module_{i}.c\n" for i in range(n // 20 + 1))
    return ("START\n" + body)[: n - 4] + "END\n"


@pytest.mark.parametrize(
    ("tool", "limit"),
    [
        ("bash", 30_000),
        ("Bash", 30_000),
        ("functions.bash", 30_000),
        ("mcp__ci__bash", 30_000),
        ("PowerShell", 30_000),
        ("run-command", 30_000),
        ("terminal", 30_000),
        ("grep", 20_000),
        ("functions.rg", 20_000),
        ("Search_Files", 20_000),
        ("mcp_auth", 10_000),
        ("mcp__github__mcp_auth", 10_000),
        ("apply_patch", 100_000),
        ("Glob", 100_000),
        ("Read", None),
        ("functions.read_file", None),
        ("mcp__fs__view", None),
        ("cat", None),
        ("mcp__server__tool", 50_000),
        ("unknown_tool", 50_000),
        ("", 50_000),
    ],
)
def test_limit_for_matches_families(tool: str, limit: int | None) -> None:
    assert Truncation().limit_for(tool) == limit


def test_tool_family_takes_last_segment() -> None:
    assert tool_family("mcp__gh__Search-Files") == "search_files"
    assert tool_family("functions.Bash") == "bash"
    assert tool_family("server/tool") == "tool"
    assert tool_family("") == ""


def test_is_a_reduction_pass() -> None:
    assert isinstance(Truncation(), ReductionPass)
    assert Truncation.name == "truncate"


def test_under_and_at_limit_return_the_same_object() -> None:
    p = Truncation()
    for n in (0, 100, 30_000):
        text = log(n) if n else ""
        assert p.apply(text, ctx("bash")) is text


def test_over_limit_is_the_preview() -> None:
    text = log(30_001)
    out = Truncation().apply(text, ctx("bash", "art-9"))
    assert out == preview(
        text, head=600, tail=400, artifact_id="art-9", what="output truncated", line_range=True
    )
    assert 'of the original: recall_artifact(artifact_id="art-9", start_line=' in out
    assert out.startswith(text[:600]) and out.endswith(text[-400:])
    assert "output truncated" in out and recall_hint("art-9") in out
    assert len(out) < 1_300


def test_read_is_never_truncated() -> None:
    text = "x" * 5_000_000
    assert Truncation().apply(text, ctx("Read")) is text


# -- every setting changes behaviour ----------------------------------------------------


def test_setting_limits() -> None:
    text = log(2_000)
    assert Truncation().apply(text, ctx("bash")) is text
    assert Truncation(limits={"bash": 1_000}).apply(text, ctx("bash")) != text
    # an exact (namespaced) name wins over its family
    p = Truncation(limits={**DEFAULT_LIMITS, "mcp__ci__bash": None})
    big = log(40_000)
    assert p.apply(big, ctx("mcp__ci__bash")) is big
    assert p.apply(big, ctx("mcp__other__bash")) != big


def test_setting_default_limit() -> None:
    text = log(60_000)
    assert Truncation().apply(text, ctx("some_tool")) != text
    assert Truncation(default_limit=100_000).apply(text, ctx("some_tool")) is text
    assert Truncation(default_limit=100_000).apply(text, ctx("bash")) != text  # families unaffected


def test_setting_head() -> None:
    text = log(40_000)
    out = Truncation(head=50).apply(text, ctx())
    assert out.startswith(text[:50]) and not out.startswith(text[:51])
    assert out.endswith(text[-400:])


def test_setting_tail() -> None:
    text = log(40_000)
    out = Truncation(tail=10).apply(text, ctx())
    assert out.endswith(text[-10:]) and not out.endswith(text[-11:])
    assert out.startswith(text[:600])


# -- purity and bad input ---------------------------------------------------------------


def test_pure_and_deterministic() -> None:
    text = log(50_000)
    p = Truncation()
    first = p.apply(text, ctx())
    assert p.apply(text, ctx()) == first
    assert Truncation().apply(text, ctx()) == first


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\udcff" * 40_000,
        "a\x00b" * 20_000,
        bytes(range(256)).decode("latin-1") * 200,
        "\ud800\udc00" * 20_000,
    ],
)
def test_bad_input_does_not_raise(text: str) -> None:
    out = Truncation().apply(text, ctx())
    assert isinstance(out, str)
    assert Truncation().apply(text, ctx()) == out


def test_fifty_megabytes_is_fast() -> None:
    text = "\x00\udcff" + "y" * 50_000_000
    t0 = time.perf_counter()
    out = Truncation().apply(text, ctx("bash"))
    assert time.perf_counter() - t0 < 2.0
    assert len(out) < 1_300 and out.startswith("\x00\udcff")
    assert "50,000,002 chars" in out


def test_odd_arguments_do_not_raise() -> None:
    p = Truncation(limits={"bash": 10})
    assert p.apply(None, ctx()) is None  # type: ignore[arg-type]
    assert p.limit_for(None) == 50_000  # type: ignore[arg-type]
    assert Truncation(head=-5, tail=-5).apply("z" * 60_000, ctx("x")) != "z" * 60_000
    broken = Truncation(limits=None)  # type: ignore[arg-type]
    assert broken.limit_for("bash") == 50_000


@pytest.mark.parametrize(
    ("tool", "args", "cut"),
    [
        ("bash", {"command": "cat docs/SKILL.md"}, False),  # a shell's read of a file is a read
        ("exec_command", {"cmd": "sed -n '1,900p' notes.md"}, False),  # Codex CLI's spelling
        ("bash", {"command": "ps -ef | rg chrome"}, True),  # a command's output keeps the shell's limit
        ("exec_command", {"cmd": "make test"}, True),
    ],
)
def test_a_file_read_through_the_shell_is_never_cut(tool, args, cut):
    text = log(45_000)
    out = Truncation().apply(text, PassContext(tool_name=tool, artifact_id="art-1", arguments=args))
    assert (out is not text) == cut
