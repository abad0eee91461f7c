"""What the proxy needs of a non-chat API (Anthropic Messages, OpenAI Responses).

Each API module translates its request to the core's chat messages and back, and
answers the model's `recall_artifact` calls inside the proxy: clients such as Claude
Code and Codex have no TokenPilot plugin to run them, so the proxy runs the recall,
appends the call and its result to the upstream request, and asks again (at most
`MAX_RECALL_ROUNDS` times). The client sees one answer: the model's words before the
recall and its final turn. The recall exchange is not in the client's history, so the
next request's prefix is still the one the provider cached up to that turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from aiohttp import web

from tokenpilot import Prepared
from tokenpilot_proxy import wire

RECALL_TOOL_NAME = "recall_artifact"
MAX_RECALL_ROUNDS = 4
# Tool calls the model made next to a recall: not run (the client never saw them).
DEFERRED = (
    "[tokenpilot: not run, because it was requested together with recall_artifact, which "
    "the proxy answered first; call this tool again if it is still needed]"
)


class StreamRelay(Protocol):
    """Upstream events in, client events out, across the turns of one client answer."""

    ended: bool
    failed: bool

    def feed(self, event: bytes) -> list[bytes]: ...

    def recall_turn(self) -> dict[str, Any] | None:
        """The ended turn as a whole response when it asks for recall (else None)."""

    def flush(self) -> list[bytes]:
        """The events held back at the turn's first tool call (no recall came)."""

    def next_turn(self) -> None: ...

    def usage(self) -> dict[str, Any] | None:
        """The ended turn's usage, as the provider reported it."""

    def error_event(self, message: str, code: str) -> bytes: ...


class Api(Protocol):
    """One API's translation; see the module docstring."""

    name: str
    path: str

    def parse(self, raw: bytes) -> dict[str, Any]: ...

    def streams(self, body: Mapping[str, Any]) -> bool:
        """Whether the client asked for a stream (a body flag, or Gemini's method)."""

    def session_hint(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None: ...

    def to_core(
        self, body: Mapping[str, Any]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]: ...

    def managed(self, body: Mapping[str, Any]) -> bool: ...

    def upstream_body(
        self, body: Mapping[str, Any], prepared: Prepared | None, session_id: str | None
    ) -> dict[str, Any]: ...

    def headers(
        self, base: dict[str, str], incoming: Mapping[str, str], api_key: str | None
    ) -> dict[str, str]: ...

    def recall_calls(self, response: Mapping[str, Any]) -> list[tuple[str, str, str]] | None:
        """(call id, tool name, arguments) of the turn's tool calls when one is a recall."""

    def continue_body(
        self, out: Mapping[str, Any], response: Mapping[str, Any], results: Mapping[str, str]
    ) -> dict[str, Any]: ...

    def visible(self, response: Mapping[str, Any]) -> list[Any]:
        """What of a recall turn the client sees: its output before the first tool call."""

    def merge(self, shown: list[Any], response: Mapping[str, Any]) -> dict[str, Any]: ...

    def relay(self) -> StreamRelay: ...


def keyed_headers(
    base: dict[str, str], incoming: Mapping[str, str], api_key: str | None, key_header: str,
    forward: tuple[str, ...],
) -> dict[str, str]:  # fmt: skip
    """The upstream's headers for an API whose key rides in a header of its own (Anthropic's
    `x-api-key`, Gemini's `x-goog-api-key`): the proxy's key, else the client's; a client's
    OAuth `Authorization` is passed on, and the API's own headers in `forward`."""
    out = dict(base)
    if api_key:
        out.pop("Authorization", None)
        out[key_header] = api_key
    elif incoming.get(key_header):
        out[key_header] = incoming[key_header]
    for name in forward:
        if incoming.get(name):
            out[name] = incoming[name]
    return out


class RecallTurns:
    """The recall calls of one client request, run by the proxy, and the one answer it gets."""

    def __init__(self, recall: Callable[[str, str], Awaitable[str]], api: Api, session_id: str) -> None:
        self.recall = recall  # (arguments, session id) -> the tool result (on the recall pool)
        self.api = api
        self.session_id = session_id
        self.shown: list[Any] = []  # what the client gets of earlier (recall) turns

    async def after(self, whole: web.Response, out: Mapping[str, Any]) -> dict[str, Any] | None:
        """The next request when this whole answer asks for recall, else None."""
        if whole.status != 200 or not isinstance(whole.body, bytes):
            return None
        turn = wire.loads_bounded(whole.body, wire.MAX_UPSTREAM_JSON_DEPTH)  # read once already
        if not isinstance(turn, dict) or self.api.recall_calls(turn) is None:
            return None
        self.shown += self.api.visible(turn)
        return await self.continued(out, turn)

    async def continued(self, out: Mapping[str, Any], turn: Mapping[str, Any]) -> dict[str, Any]:
        """`out` with the recall turn and its results (other calls of that turn: `DEFERRED`)."""
        results: dict[str, str] = {}
        for call_id, name, arguments in self.api.recall_calls(turn) or []:
            if name == RECALL_TOOL_NAME:
                results[call_id] = await self.recall(arguments, self.session_id)
        return self.api.continue_body(out, turn, results)

    def answer(self, whole: web.Response) -> web.Response:
        """The final whole answer, with what earlier turns showed put first."""
        if not self.shown or whole.status != 200 or not isinstance(whole.body, bytes):
            return whole
        final = wire.loads_bounded(whole.body, wire.MAX_UPSTREAM_JSON_DEPTH)  # read once already
        if not isinstance(final, dict):  # not an answer the proxy can add to: relayed as it came
            return whole
        merged = self.api.merge(self.shown, final)
        headers = {k: v for k, v in whole.headers.items() if k.lower() != "content-length"}
        return web.Response(status=200, body=wire.encode(merged), headers=headers)
