"""A history entry's export is built once and sealed; the journal reuses what it cut a
sealed dict into. The head and chunks must be those of the same state made of plain
dicts, at the first save and at every later one."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot import TokenPilot
from tokenpilot.store import journal
from tokenpilot.store.journal import STR_MIN, Sealed

_keys = st.sampled_from(["role", "content", "frozen", "ids", "\x00odd", "tokens", "x"])
_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.text(max_size=40),
    st.text(alphabet="ab\x00\u00e9\n", min_size=STR_MIN, max_size=STR_MIN + 300),  # a chunk of its own
)
_json = st.recursive(
    _leaf,
    lambda kids: st.one_of(st.lists(kids, max_size=6), st.dictionaries(_keys, kids, max_size=5)),
    max_leaves=25,
)
_entry = st.dictionaries(_keys, _json, min_size=1, max_size=6)


def _parts(data: dict) -> tuple[str, dict[str, str]]:
    got = journal.split(data)
    return got.body, got.chunks


@settings(max_examples=150, deadline=None)
@given(st.lists(_entry, max_size=70), st.integers(0, 3))
def test_sealed_entries_split_as_plain_dicts_at_every_save(entries: list[dict], more: int) -> None:
    sealed = [Sealed(e) for e in entries]
    for _ in range(2):  # the second save answers from the memo
        assert _parts({"id": "s", "entries": sealed}) == _parts({"id": "s", "entries": entries})
    # a session that grows: the old sealed objects again, new ones after them
    grown = entries + entries[:more]
    assert _parts({"id": "s", "entries": sealed + [Sealed(e) for e in entries[:more]]}) == _parts(
        {"id": "s", "entries": grown}
    )


def test_a_sealed_dict_reads_back_as_its_items() -> None:
    entry = Sealed(frozen={"role": "tool", "content": "z" * (STR_MIN * 3)}, tokens=7)
    chunks: dict[str, str] = {}
    for _ in range(2):
        got = journal.split({"entries": [entry] * 60})
        chunks.update(got.chunks)
        state, _ = journal.join(json.loads(got.head()), lambda ds: {d: chunks[d] for d in ds})
        assert state == {"entries": [dict(entry)] * 60}


def _history(n: int) -> list[dict]:
    out: list[dict] = [{"role": "system", "content": "You help."}, {"role": "user", "content": "go"}]
    for i in range(n):
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{i}", "type": "function", "function": {"name": "exec", "arguments": "{}"}}
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i}\n" * (400 + i)})
    return out


def test_an_entry_is_exported_once_and_its_export_is_what_it_was(tmp_path) -> None:
    tp = TokenPilot(store=str(tmp_path))
    tp.prepare(_history(3), session_id="s")
    first = tp.export_session("s")
    tp.prepare(_history(5), session_id="s")
    second = tp.export_session("s")
    assert all(a is b for a, b in zip(first["entries"], second["entries"]))  # the same sealed objects
    assert all(type(e) is Sealed for e in second["entries"])
    # and equal to what a fresh process exports after importing it
    again = TokenPilot(store=str(tmp_path))
    again.import_session(json.loads(json.dumps(second)))
    assert json.dumps(again.export_session("s"), sort_keys=True) == json.dumps(second, sort_keys=True)


def _tool(name: str, doc: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": doc, "parameters": {}}}


def test_tools_are_sealed_once_and_a_changed_tool_is_sealed_again(tmp_path) -> None:
    tp = TokenPilot(store=str(tmp_path))
    tools = [_tool("exec", "run a command"), _tool("read", "read a file")]
    tp.prepare(_history(1), tools, session_id="s")
    first = tp.export_session("s")["tools"]
    tp.prepare(_history(2), tools, session_id="s")
    second = tp.export_session("s")["tools"]
    assert all(type(t) is Sealed for t in second)
    assert [a is b for a, b in zip(first, second)] == [True] * len(first)
    changed = [_tool("exec", "run a shell command"), tools[1]]
    tp.prepare(_history(3), changed, session_id="s")
    third = tp.export_session("s")["tools"]
    names = [t["function"]["name"] for t in third]
    assert third[names.index("exec")]["function"]["description"] == "run a shell command"
    assert third[names.index("read")] is second[[t["function"]["name"] for t in second].index("read")]
    assert json.dumps(third) == json.dumps(tp._sessions["s"].tools)
