"""Shape limits on what `prepare` accepts: how many messages, how deeply nested.

Hashing, comparing and serialising a message recurse through its objects and arrays,
so a message nested 100k deep would end in `RecursionError` somewhere inside; a
million messages would hold the session lock for minutes. Both are refused up
front, with a `MessageError` naming the limit, before any session state changes.
The depth check is iterative, so it cannot overflow the stack itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import MessageError
from .model import check_tools


def check_request(messages: Any, tools: Any, max_messages: int, max_depth: int) -> list[Any]:
    """The first stage of `prepare`: the request's shape (the list, its length, the tools'
    nesting and schemas), checked before any session state changes; the messages as a list.
    Each message's own nesting is checked where it is new (`History.take`): an old one
    passed when it was."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise MessageError(None, f"expected a list of messages, got {type(messages).__name__}")
    check_count(messages, max_messages)
    if tools is not None:
        if not isinstance(tools, list | tuple):
            raise MessageError(None, f"'tools' must be a list, got {type(tools).__name__}")
        for j, t in enumerate(tools):
            check_depth(t, max_depth, None, f"tools[{j}]")
    check_tools(list(tools) if tools is not None else None)
    return list(messages)


def check_count(messages: Any, limit: int) -> None:
    """Raise `MessageError` when there are more than `limit` messages."""
    if len(messages) > limit:
        raise MessageError(
            None, f"{len(messages):,} messages are more than {limit:,} (limit max_messages={limit})"
        )


def check_depth(value: Any, limit: int, index: int | None, what: str = "") -> None:
    """Raise `MessageError` when `value` has more than `limit` levels of objects and arrays.

    The value itself is level 1 when it is an object or array. A cycle (not JSON, but
    possible in Python) counts as infinitely deep.
    """
    if nesting_exceeds(value, limit):
        subject = f"{what} is " if what else ""
        raise MessageError(
            index,
            f"{subject}nested deeper than {limit} levels of objects and arrays (limit max_depth={limit})",
        )


def nesting_exceeds(value: Any, limit: int, budget: int | None = None) -> bool | None:
    """Is `value` nested deeper than `limit` levels? Iterative; stops at the first level too deep.

    Parsed JSON is dicts, lists and strings: those are told by their exact type first, and
    only anything else goes through the `Mapping` check (an ABC check, the slowest part of
    walking a request's tools and messages on every call). With a `budget`, None (no
    answer) once the value holds more than that many containers below its top: the proxy
    then asks the byte-level check of its text instead (`wire.loads_bounded`)."""
    left = -1 if budget is None else budget  # containers it may still take on (-1: no bound)
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind is dict:
            children: Any = node.values()
        elif kind is list or kind is tuple:
            children = node
        elif kind is str:
            continue
        elif isinstance(node, Mapping):
            children = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > limit:
            return True
        for child in children:
            kind = type(child)
            if kind is str:
                continue
            if kind is dict or kind is list or kind is tuple or isinstance(child, Mapping | list | tuple):
                if left == 0:
                    return None
                left -= 1
                stack.append((child, depth + 1))
    return False
