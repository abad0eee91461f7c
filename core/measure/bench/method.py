"""What a bench method is: the interface every method implements (built-in ones in
`methods.py`, other products' in `peers/`), the request it renders, and helpers they
share. Apart from `methods.py`, which lists the peers, so a peer builds on this
interface without importing the module that imports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class SideCall:
    """A model call a method makes on its own (a summariser's), priced like the agent's:
    its prompt through the cache simulator under `namespace`, plus its output."""

    messages: tuple[Message, ...]
    output_tokens: int
    namespace: str


@dataclass(frozen=True, slots=True)
class Rendered:
    """A request as the method would send it. `messages[:stable]` is the cacheable part."""

    messages: list[Message]
    tools: list[dict[str, Any]]
    stable: int
    artifact_ids: frozenset[str] = frozenset()  # originals one recall away
    side_calls: tuple[SideCall, ...] = ()  # calls the method made to produce this request


class MethodSession(Protocol):
    def render(
        self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None
    ) -> Rendered: ...

    def recall_text(self, artifact_id: str) -> str | None: ...

    def close(self) -> None: ...


class Method(Protocol):
    name: str
    # "vanilla", "tokenpilot", "oracle" (hindsight: the most eviction could save), "peer"
    # (another product's own code) or "sketch" (our stand-in for an approach with no
    # code to run): the report says which
    kind: str

    def session(self, session_id: str) -> MethodSession: ...


def split_system(prompt: list[Message]) -> tuple[list[Message], list[Message]]:
    """(leading system or developer messages, the rest)."""
    k = 0
    while k < len(prompt) and prompt[k].get("role") in ("system", "developer"):
        k += 1
    return prompt[:k], prompt[k:]


class Stateless:
    """A method session that keeps no originals and holds nothing to release."""

    def recall_text(self, artifact_id: str) -> str | None:
        return None

    def close(self) -> None:
        return None
