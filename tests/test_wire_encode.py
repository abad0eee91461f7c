"""The proxy writes bodies with orjson (`wire.encode`, issue #49): the bytes `json.dumps`
wrote before, for every value a body can hold, but for floats under 1e-4 (another form of
the same number). What orjson cannot write as `json` did (a lone surrogate, NaN or
Infinity as the client spelled them, an integer past 64 bits) goes through `json`."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot_proxy import wire

_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _before(body: Any) -> bytes:
    """`wire.encode` as it was: compact `json.dumps`, a lone surrogate as its escape."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


_floats = st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f == 0 or 1e-4 <= abs(f))
_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _floats | st.text()
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_encode_writes_what_json_dumps_wrote(value: Any) -> None:
    assert wire.encode({"model": "m", "messages": [{"role": "user", "content": value}]}) == _before(
        {"model": "m", "messages": [{"role": "user", "content": value}]}
    )


def test_a_body_leaves_with_the_constants_huge_integers_and_lone_surrogates_it_came_with() -> None:
    for raw in (
        b'{"a":NaN,"b":-Infinity,"c":Infinity}',  # orjson alone would write null
        b'{"d":18446744073709551616,"e":-9223372036854775809}',
        b'{"f":"\\ud800"}',
    ):
        assert wire.encode(wire.parse_body(raw)) == raw
