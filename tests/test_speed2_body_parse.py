"""The proxy reads a body with `json.loads` first and checks the depth of what it got
(`wire.loads_bounded`, `wire.parse_body`): the same value or the same refusal as the
byte-level depth check run before `json.loads`, for any body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot_proxy import wire

# Small, so generated values cross it often; not below the byte check's collapse passes
# (8), under which it never calls a body too deep (the proxy's limits are 128 and 512).
LIMIT = 10


def _old_loads_bounded(raw: bytes | str, limit: int) -> Any:
    """The order before: the byte-level check on every body, then `json.loads`."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    if wire.json_depth_exceeds(data, limit):
        raise wire.TooDeep("deep")
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise wire.TooDeep("deep") from exc


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "value", fn(*args)
    except wire.TooDeep:
        return "too deep", None
    except wire.BadRequest as exc:
        return "bad request", exc.code
    except ValueError as exc:
        return "not json", type(exc).__name__


_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.text(alphabet='ab"\\[]{}\n', max_size=6))
_JSON = st.recursive(
    _SCALAR,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(alphabet='k"[\\', max_size=3), kids, max_size=3)
    ),
    max_leaves=30,
)


def _deep(depth: int, inner: Any) -> Any:
    for n in range(depth):
        inner = [inner] if n % 2 else {"k": inner}
    return inner


@settings(max_examples=400, deadline=None)
@given(_JSON, st.integers(0, 14), st.data(), st.sampled_from([None, 0, 3]))
def test_same_outcome_as_the_byte_check_first(
    value: Any, extra: int, data: st.DataObject, budget: int | None
) -> None:
    """`budget`: containers the walk may take on before the bytes decide (None: as set)."""
    text = json.dumps(_deep(extra, value))
    # sometimes break it: cut it short, or add a stray byte
    how = data.draw(st.sampled_from(["whole", "cut", "stray"]))
    if how == "cut" and text:
        text = text[: data.draw(st.integers(0, len(text) - 1))]
    elif how == "stray":
        at = data.draw(st.integers(0, len(text)))
        text = text[:at] + data.draw(st.sampled_from(["[", "]", "{", '"', ","])) + text[at:]
    with pytest.MonkeyPatch.context() as mp:
        if budget is not None:  # a body of more containers than the walk takes on
            mp.setattr(wire, "_WALK_BYTES_PER_CONTAINER", 10**12)
            mp.setattr(wire, "_WALK_MIN", budget)
        for raw in (text, text.encode("utf-8")):
            assert _outcome(wire.loads_bounded, raw, LIMIT) == _outcome(_old_loads_bounded, raw, LIMIT)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"[" * 129 + b"]" * 129, "json_too_deep"),
        (b"[" * 128 + b"]" * 128, None),
        (b"[" * 200, "json_too_deep"),  # broken and too deep: too deep, as before
        (b"[" * 100_000, "json_too_deep"),  # past the interpreter's recursion limit
        (b'{"a": [1, 2', "invalid_json"),
        (b'{"messages": "\\"[[[[' + b"[" * 300 + b'"}', None),  # brackets inside a string
    ],
)
def test_parse_body_codes(body: bytes, code: str | None) -> None:
    got = _outcome(wire.parse_body, body)
    if code is None:
        assert got[0] == "value"
        assert got[1] == json.loads(body)
    else:
        assert got == ("bad request", code)


def test_nesting_exceeds_counts_like_the_text() -> None:
    for depth in range(1, 24):
        value = _deep(depth, 1)
        for limit in range(wire._COLLAPSE_PASSES, 24):
            raw = json.dumps(value).encode()
            assert wire.nesting_exceeds(value, limit) == wire.json_depth_exceeds(raw, limit)


def test_the_walk_gives_up_past_its_budget() -> None:
    many = [[] for _ in range(50)]
    assert wire.nesting_exceeds(many, 5, budget=49) is None
    assert wire.nesting_exceeds(many, 5, budget=50) is False
    assert wire.nesting_exceeds(_deep(30, 1), 10, budget=100) is True
