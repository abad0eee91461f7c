"""`canonical_json` reuses one encoder: it must write exactly `json.dumps`'s canonical text
(message digests and artifact ids stored by earlier versions depend on it)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot._canonical import canonical_json

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_canonical_json_is_json_dumps_sorted_compact_and_unescaped(value) -> None:
    assert canonical_json(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
