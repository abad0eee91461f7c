"""Hypothesis strategies: random agent sessions in OpenAI chat format."""

from __future__ import annotations

import json

from hypothesis import strategies as st

TOOL_NAMES = ["bash", "read", "grep", "web_fetch", "mcp__srv__lookup", "write"]

TOOLS = [
    {
        "type": "function",
        "function": {"name": n, "description": f"{n} tool", "parameters": {"type": "object"}},
    }
    for n in TOOL_NAMES
]

_WORDS = ["alpha", "beta", "gamma", "delta", "error", "ok", "value", "path/to/file.py", "42", "ÿ", "日本"]


@st.composite
def tool_output(draw) -> str | list:
    kind = draw(
        st.sampled_from(
            ["small", "big", "html", "json", "ansi", "binary", "numbered", "parts", "surrogate", "image"]
        )
    )
    words = draw(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=8))
    reps = draw(st.integers(1, 120))
    line = " ".join(words)
    if kind == "small":
        return line
    if kind == "big":
        return "\n".join(f"{i} {line}" for i in range(reps * 3))
    if kind == "html":
        body = "".join(f"<p>{line} {i}</p>" for i in range(reps))
        return (
            f"<!doctype html><html><head><script>x()</script></head><body><nav>menu</nav>{body}</body></html>"
        )
    if kind == "json":
        return json.dumps({"items": [{"id": i, "name": line, "tags": words} for i in range(reps)]}, indent=2)
    if kind == "ansi":
        return "\n".join(f"\x1b[32m{line}\x1b[0m step {i}" for i in range(reps * 2))
    if kind == "binary":
        return "\x00\x01\x02PK\x03\x04" * reps * 20
    if kind == "numbered":
        return "\n".join(f"{i:6}\t{line}" for i in range(1, reps * 3))
    if kind == "surrogate":
        return ("bad \udcff bytes " + line + "\n") * reps
    if kind == "image":  # a screenshot tool: a caption and a small PNG
        return [{"type": "text", "text": line}, {"type": "image_url", "image_url": {"url": TINY_PNG}}]
    return [{"type": "text", "text": line * reps}, {"type": "text", "text": "tail"}]


# A 1x1 PNG as a data URL (valid, so the image pass leaves it as it is).
TINY_PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@st.composite
def session(draw, recalls: bool = False) -> list[dict]:
    """A system prompt, then turns: user request, assistant tool calls (parallel), results.
    `recalls`: some steps are a `recall_artifact` call whose result repeats an earlier output."""
    date = draw(st.sampled_from(["2026-12-02", "2027-01-15"]))
    msgs: list[dict] = [
        {
            "role": "system",
            "content": f"You are an agent.\nCurrent date: {date}\nWorking directory: /home/u/ws\n",
        }
    ]
    outputs_pool: list = []
    n_turns = draw(st.integers(1, 6))
    cid = 0
    for t in range(n_turns):
        msgs.append(
            {
                "role": "user",
                "content": f"task {t}: " + " ".join(draw(st.lists(st.sampled_from(_WORDS), max_size=5))),
            }
        )
        for _step in range(draw(st.integers(0, 3))):
            copies = [o for o in outputs_pool if isinstance(o, str)]
            if recalls and copies and draw(st.booleans()):
                cid += 1
                call = {"artifact_id": "art_" + f"{cid:024x}"}
                msgs.append(
                    {
                        "role": "assistant",
                        "content": draw(st.sampled_from([None, "", "Let me read it again."])),
                        "tool_calls": [
                            {
                                "id": f"call_{cid}",
                                "type": "function",
                                "function": {"name": "recall_artifact", "arguments": json.dumps(call)},
                            }
                        ],
                    }
                )
                msgs.append(
                    {"role": "tool", "tool_call_id": f"call_{cid}", "content": draw(st.sampled_from(copies))}
                )
                continue
            n_calls = draw(st.integers(1, 3))
            calls, results = [], []
            for _ in range(n_calls):
                cid += 1
                name = draw(st.sampled_from(TOOL_NAMES))
                args = {"path": draw(st.sampled_from(["a.txt", "b.txt", "/home/u/ws/c.py"]))}
                if draw(st.booleans()) and name == "write":
                    args["content"] = "x" * draw(st.integers(0, 9000))
                calls.append(
                    {
                        "id": f"call_{cid}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                )
                if outputs_pool and draw(st.booleans()):
                    out = draw(st.sampled_from(outputs_pool))  # repeated read
                else:
                    out = draw(tool_output())
                    outputs_pool.append(out)
                results.append({"role": "tool", "tool_call_id": f"call_{cid}", "content": out})
            msgs.append(
                {
                    "role": "assistant",
                    "content": draw(st.sampled_from([None, "Let me look."])),
                    "tool_calls": calls,
                }
            )
            msgs.extend(results)
        msgs.append({"role": "assistant", "content": f"Done with task {t}."})
    return msgs


def call_points(messages: list[dict]) -> list[int]:
    """Prefix lengths at which an agent would call the model: before each assistant message."""
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"] + [len(messages)]
