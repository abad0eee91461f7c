"""The arguments of a `recall_artifact` call, checked.

The model writes them, so anything can arrive: text that is not JSON, JSON nested far
beyond Python's recursion limit, ids that are numbers or lists. Each problem becomes
one `ValueError` whose text the model can act on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def recall_arguments(arguments: Any) -> tuple[str, int | None, int | None, str | None]:
    """(artifact_id, start_line, end_line, pattern) from a tool call's raw arguments."""
    if isinstance(arguments, bytes | bytearray):
        try:
            arguments = bytes(arguments).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"arguments are not UTF-8 ({exc})") from None
    if isinstance(arguments, str):
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except RecursionError:
            raise ValueError("the JSON is nested too deeply") from None
        except ValueError as exc:
            raise ValueError(f"not JSON ({exc})") from None
    else:
        args = arguments
    if not isinstance(args, Mapping):
        raise ValueError(f"arguments must be a JSON object, got {_kind(args)}")
    if "artifact_id" not in args:
        raise ValueError("'artifact_id' is missing")
    aid = args["artifact_id"]
    if not isinstance(aid, str):
        raise ValueError(f"'artifact_id' must be a string, got {_kind(aid)}")
    start, end, pattern = args.get("start_line"), args.get("end_line"), args.get("pattern")
    for name, value in (("start_line", start), ("end_line", end)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"'{name}' must be an integer, got {_kind(value)}")
    if pattern is not None and not isinstance(pattern, str):
        raise ValueError(f"'pattern' must be a string, got {_kind(pattern)}")
    return aid, start, end, pattern


def _kind(value: Any) -> str:
    """The JSON name of a value's type (what the model wrote), not Python's."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
