"""`limits.nesting_exceeds` tells dicts, lists and strings by their exact type first: the
same answer as the plain `isinstance` walk, for any value (mappings and sequences of
other types, subclasses, cycles)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.messages.limits import nesting_exceeds


def _reference(value: Any, limit: int) -> bool:
    """The walk before the fast path: `isinstance` on every node."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > limit:
            return True
        for child in children:
            if isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1))
    return False


class _Str(str):
    pass


class _List(list):  # type: ignore[type-arg]
    pass


_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.builds(_Str)
)


def _containers(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keyed = st.dictionaries(st.text(max_size=2), kids, max_size=3)
    return st.one_of(
        st.lists(kids, max_size=3),
        st.lists(kids, max_size=3).map(tuple),
        st.lists(kids, max_size=3).map(_List),
        keyed,
        keyed.map(OrderedDict),
        keyed.map(MappingProxyType),
        st.sets(st.integers(), max_size=2),  # not a container the check counts
    )


@settings(max_examples=500, deadline=None)
@given(st.recursive(_LEAF, _containers, max_leaves=40), st.integers(0, 8))
def test_same_answer_as_the_isinstance_walk(value: Any, limit: int) -> None:
    assert nesting_exceeds(value, limit) == _reference(value, limit)


def test_a_cycle_is_too_deep() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert nesting_exceeds(loop, 50) and _reference(loop, 50)
    d: dict[str, Any] = {}
    d["self"] = MappingProxyType(d)
    assert nesting_exceeds(d, 50)
