"""Anthropic's server-side context editing (`clear_tool_uses_20250919`) as a bench method.

What a Claude user can switch on instead of TokenPilot: the Messages API's context
management strategy that clears old tool results. A sketch (no code of Anthropic's runs
here): it renders, per recorded call, the prompt the server would hand the model after
the edit, following the documentation as written.

Sources (quoted below by the letter):

[D] https://platform.claude.com/docs/en/build-with-claude/context-editing (current page:
    "Tool result clearing", "Configuration options for tool result clearing", "Context
    editing and prompt caching", "Token counting")
[O] https://docs.claude.com/en/docs/build-with-claude/context-editing (the page's first
    version, same behaviour, cache paragraph worded differently)

Documented behaviour followed
-----------------------------
* What is cleared, and in what order: "When activated, the API automatically clears the
  oldest tool results in chronological order. The API replaces each cleared result with
  placeholder text so Claude knows it was removed." [D] A cleared tool message keeps its
  `tool_call_id` (and any other key) and only its content changes, so every tool call
  still has its result and the history keeps its shape.
* Placeholder text: the docs give none ("placeholder text to let Claude know the tool
  result was removed" [O]), so `PLACEHOLDER` is ours, short, and says what happened.
* `trigger` (`trigger_tokens`): default "100,000 input tokens"; "Once the prompt exceeds
  this threshold, clearing will begin." [D] Strictly greater than the threshold. Only the
  `input_tokens` kind of trigger is modelled (not `tool_uses`).
* `keep` (`keep_tool_uses`): default "3 tool uses"; "Defines how many recent tool
  use/result pairs to keep after clearing occurs. The API removes the oldest tool
  interactions first, preserving the most recent ones." [D] So an activation clears every
  clearable tool use older than the last `keep` ones (not just enough to get back under
  the trigger: the docs say what is kept, not a target size). A tool use is one entry of
  an assistant message's `tool_calls` (parallel calls count one each).
* `clear_tool_inputs`: default `false`; "Controls whether the tool call parameters are
  cleared along with the tool results. By default, only the tool results are cleared
  while keeping Claude's original tool calls visible." [D] When true, a cleared use's
  `arguments` become `CLEARED_INPUT` ("{}": the docs give no text; an empty object is the
  smallest input that is still valid JSON); its id and tool name stay.
* `exclude_tools`: "List of tool names whose tool uses and results should never be
  cleared." [D] Excluded uses still count toward `keep` (an assumption: they are tool
  uses, and the docs do not say they are skipped when counting).
* `clear_at_least`: default "None"; "Ensures a minimum number of tokens is cleared each
  time the strategy activates. If the API can't clear at least the specified amount, the
  strategy will not be applied. This helps determine if context clearing is worth breaking
  your prompt cache." [D]
* Server-side, on the full history: "Context editing is applied server-side before the
  prompt reaches Claude. Your client application maintains the full, unmodified
  conversation history. You do not need to sync your client state with the edited
  version." [D] The replay sends the recorded (full) history on every call, and the
  method edits each request.
* Prompt caching: "Invalidates cached prompt prefixes when content is cleared. To account
  for this, clear enough tokens to make the cache invalidation worthwhile. [...] You'll
  incur cache write costs each time content is cleared, but subsequent requests can reuse
  the newly cached prefix." [D] Nothing special is done for it: a cleared message is a
  changed message in the rendered request, and the cache simulator charges from the first
  changed one.

Stateless, per request
----------------------
The edit is a function of the request alone: a Messages API request names no
conversation (it carries the history itself), the client keeps and resends the
unmodified history [D], and the token counting
endpoint lets you "preview how many tokens your prompt will use after context editing is
applied" [D] from a request alone, which only a per-request edit allows. So each request
is edited on its own: once the full history is past the trigger it stays past it (the
client keeps sending all of it), and every later request is cleared again: the same old
results (same bytes, so the cached prefix holds) plus, without `clear_at_least`, the one
or more uses that have just dropped out of the last `keep`. With keep = 3 each new tool
use therefore clears one more result, the one now fourth from the end: a cache break
near the end of the prompt on every call past the trigger.

`clear_at_least` on a stateless server: the docs are ambiguous
---------------------------------------------------------------
"The amount cleared" can be read two ways. (a) All that this request's edit removes
(what the response's `cleared_input_tokens` reports): then once the old results add up to
`clear_at_least`, every later request passes the test and the parameter never again
stops a cache break, contrary to its documented purpose ("worth breaking your prompt
cache"). (b) What this request clears beyond what the previous request already had
cleared: the amount that actually breaks the cache. A stateless server can apply (b):
every earlier request of the conversation ended where an assistant message begins in
the history it is sent, so it replays those requests' decisions, in order, from the
history alone (`cleared_tool_uses`). A clearing then advances only when it frees at
least `clear_at_least` more tokens; otherwise the strategy "will not be applied" to the
new uses and the request keeps the earlier clearing, whose bytes (and cached prefix)
are unchanged. We take (b): it is what the docs say the parameter is for, and it is the
reading more favourable to the user's bill (on claude_code_mclaude, cost against vanilla
with clear_at_least = 5,000: (a) -10.8% on the openai cache profile and -2.5% on the
anthropic one; (b) -11.4% and -10.2%).

Assumptions where the docs are silent
-------------------------------------
* Input tokens for the trigger and for `clear_at_least` are counted with the bench's
  tokenizer (`tokenpilot.tokens.message_tokens`, o200k/cl100k, not Claude's own), over the
  messages and the tool schemas, plus the session's hidden prefix (the system prompt and
  tool schemas a record leaves out, `Session.hidden_prefix_tokens`): the server counts
  its whole input, and Claude Code's records keep their tools and system prompt out of
  the messages. The bench passes the hidden prefix in through `hindsight`, which reads
  nothing else from the recording; without it (a bare `session()`) it counts as 0.
* The trigger looks at the request as sent (the full history), not at the edited one:
  the edit is decided from what arrives.
* A tool use whose result is not in the history is never "cleared" (there is no result
  to clear), and a tool result with no call is left alone.
* Tokens freed by clearing a use = its result's tokens minus the placeholder's (plus, with
  `clear_tool_inputs`, its call's tokens minus the emptied call's).

`context_editing_methods()` gives the default strategy and the same strategy with
`clear_at_least` = 5,000 input tokens, the value the docs' own "Advanced configuration"
example uses (`"clear_at_least": {"type": "input_tokens", "value": 5000}`, commented
"Optional: Clear at least this many tokens") [D]; the docs give no other number.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ..._canonical import canonical_json
from ...tokens import count_tokens, message_tokens
from ..traces.model import Session
from .method import Message, Method, MethodSession, Rendered, Stateless

PLACEHOLDER = "[tool result cleared by context editing]"
CLEARED_INPUT = "{}"
DOCUMENTED_CLEAR_AT_LEAST = 5_000  # [D], "Advanced configuration" example


@dataclass(frozen=True, slots=True)
class _Use:
    """One tool use of a request: its call id, tool name, the assistant message holding
    the call and the tool message holding its result (None: no result in the history)."""

    call_id: str
    tool: str
    call_at: int
    result_at: int | None


@dataclass(frozen=True, slots=True)
class AnthropicContextEditing:
    """The Messages API's `clear_tool_uses_20250919` context edit, as Anthropic documents
    it (see the module docstring for the quotes and the assumptions)."""

    trigger_tokens: int = 100_000
    keep_tool_uses: int = 3
    clear_at_least: int | None = None
    clear_tool_inputs: bool = False
    exclude_tools: tuple[str, ...] = ()
    name: str = "anthropic_context_editing"
    kind: ClassVar[str] = "sketch"
    # filled in by `hindsight`: each recorded session's hidden prefix (tokens the server
    # receives but the record leaves out), which counts toward the trigger
    hidden_prefix_tokens: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def hindsight(self, sessions: Sequence[Session], mode: str, profile: Any, prices: Any) -> Method:
        """The same method knowing each session's hidden prefix size; nothing else is read."""
        return replace(self, hidden_prefix_tokens={s.id: s.hidden_prefix_tokens for s in sessions})

    def session(self, session_id: str) -> MethodSession:
        base = session_id.split("#task", 1)[0]  # isolated mode's per-task sessions
        hidden = self.hidden_prefix_tokens.get(session_id, self.hidden_prefix_tokens.get(base, 0))
        return _EditingSession(self, hidden)

    # -- the edit: a function of one request -------------------------------------------
    def cleared_tool_uses(
        self,
        prompt: Sequence[Message],
        tools: Sequence[dict[str, Any]] = (),
        hidden_prefix_tokens: int = 0,
        tokens: Callable[[Message], int] = message_tokens,
    ) -> frozenset[str]:
        """The call ids whose results the server clears in this request (`tokens` counts
        one message of `prompt`: the session passes a memo of `message_tokens`).

        Every earlier request of the conversation ended where an assistant reply begins;
        their decisions are replayed in order (each over its own full input), and the
        clear point (in tool-use order) only moves forward. Without `clear_at_least` this
        is simply "every clearable use but the last `keep`" once the request is past the
        trigger; with it, the clear point advances only when that frees enough more.
        """
        uses = _tool_uses(prompt)
        if not uses:
            return frozenset()
        base = hidden_prefix_tokens + (message_tokens({"tools": list(tools)}) if tools else 0)
        excluded = set(self.exclude_tools)
        freed = [0] * (len(uses) + 1)  # prefix sums of what clearing each use frees
        for j, u in enumerate(uses):
            gain = 0
            if u.tool not in excluded and u.result_at is not None:
                result = prompt[u.result_at]
                gain = tokens(result) - message_tokens(_cleared_result(result))
                if self.clear_tool_inputs:
                    call = _find_call(prompt[u.call_at], u.call_id)
                    gain += count_tokens(canonical_json(call)) - count_tokens(
                        canonical_json(_cleared_call(call))
                    )
            freed[j + 1] = freed[j] + gain

        calls_in: dict[int, int] = {}  # message index -> tool uses it makes
        for u in uses:
            calls_in[u.call_at] = calls_in.get(u.call_at, 0) + 1

        clear_point = 0  # uses[:clear_point] are past the clear point
        total = base
        n_uses = 0  # tool uses before message i
        for i, m in enumerate(prompt):
            starts_reply = m.get("role") == "assistant" and (
                i == 0 or prompt[i - 1].get("role") != "assistant"
            )
            if starts_reply:  # an earlier request was prompt[:i]
                clear_point = self._advance(clear_point, n_uses, total, freed)
            total += tokens(m)
            n_uses += calls_in.get(i, 0)
        clear_point = self._advance(clear_point, n_uses, total, freed)  # this request
        return frozenset(
            u.call_id for u in uses[:clear_point] if u.tool not in excluded and u.result_at is not None
        )

    def _advance(self, clear_point: int, n_uses: int, input_tokens: int, freed: list[int]) -> int:
        """One request's decision: where the clear point stands after it."""
        if input_tokens <= self.trigger_tokens:
            return clear_point
        target = n_uses - self.keep_tool_uses
        if target <= clear_point:
            return clear_point
        newly = freed[target] - freed[clear_point]
        if self.clear_at_least is not None and newly < self.clear_at_least:
            return clear_point  # "the strategy will not be applied"
        return target

    def edit(
        self,
        prompt: Sequence[Message],
        tools: Sequence[dict[str, Any]] = (),
        hidden_prefix_tokens: int = 0,
    ) -> list[Message]:
        """The request as the model sees it after the edit (new dicts for changed messages)."""
        return _EditingSession(self, hidden_prefix_tokens).render(list(prompt), list(tools), None).messages


def context_editing_methods() -> list[Method]:
    """The strategy with Anthropic's defaults, and with the documented `clear_at_least`."""
    return [
        AnthropicContextEditing(),
        AnthropicContextEditing(clear_at_least=DOCUMENTED_CLEAR_AT_LEAST, name="anthropic_clear_at_least"),
    ]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _tool_uses(prompt: Sequence[Message]) -> list[_Use]:
    """Every tool use in order, with where its result is (the first tool message naming it)."""
    results: dict[str, int] = {}
    for i, m in enumerate(prompt):
        if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
            results.setdefault(m["tool_call_id"], i)
    uses: list[_Use] = []
    seen: set[str] = set()
    for i, m in enumerate(prompt):
        if m.get("role") != "assistant":
            continue
        for tc in m.get("tool_calls") or ():
            cid = tc.get("id") if isinstance(tc, dict) else None
            if not isinstance(cid, str) or cid in seen:
                continue
            seen.add(cid)
            fn = tc.get("function") or {}
            at = results.get(cid)
            uses.append(_Use(cid, str(fn.get("name") or ""), i, at if at is not None and at > i else None))
    return uses


def _find_call(message: Message, call_id: str) -> dict[str, Any]:
    for tc in message.get("tool_calls") or ():
        if isinstance(tc, dict) and tc.get("id") == call_id:
            return tc
    raise KeyError(call_id)


def _cleared_result(message: Message) -> Message:
    return {**message, "content": PLACEHOLDER}


def _cleared_call(call: dict[str, Any]) -> dict[str, Any]:
    fn = dict(call.get("function") or {})
    fn["arguments"] = CLEARED_INPUT
    return {**call, "function": fn}


class _EditingSession(Stateless):
    """Renders each request as edited. Holds no decision between calls (the edit is a
    function of the request); it only memoises token counts and the edited copies, so
    that unchanged messages are the agent's own objects and a cleared one is the same
    object on every call."""

    def __init__(self, method: AnthropicContextEditing, hidden_prefix_tokens: int) -> None:
        self.method = method
        self.hidden = hidden_prefix_tokens
        self._tokens: dict[int, tuple[Message, int]] = {}
        self._results: dict[int, tuple[Message, Message]] = {}
        self._calls: dict[tuple[int, frozenset[str]], tuple[Message, Message]] = {}

    def _count(self, m: Message) -> int:
        hit = self._tokens.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        n = message_tokens(m)
        self._tokens[id(m)] = (m, n)  # held, so the id is not reused while memoised
        return n

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        cleared = self.method.cleared_tool_uses(prompt, tools, self.hidden, self._count)
        if not cleared:
            return Rendered(prompt, tools, len(prompt))
        out: list[Message] = []
        for m in prompt:
            role = m.get("role")
            if role == "tool" and m.get("tool_call_id") in cleared:
                out.append(self._memo(self._results, id(m), m, lambda m=m: _cleared_result(m)))
            elif self.method.clear_tool_inputs and role == "assistant" and m.get("tool_calls"):
                mine = frozenset(
                    tc.get("id") for tc in m["tool_calls"] if isinstance(tc, dict) and tc.get("id") in cleared
                )
                if not mine:
                    out.append(m)
                    continue
                out.append(
                    self._memo(
                        self._calls,
                        (id(m), mine),
                        m,
                        lambda m=m, mine=mine: {
                            **m,
                            "tool_calls": [
                                _cleared_call(tc) if isinstance(tc, dict) and tc.get("id") in mine else tc
                                for tc in m["tool_calls"]
                            ],
                        },
                    )
                )
            else:
                out.append(m)
        return Rendered(out, tools, len(out))

    @staticmethod
    def _memo(store: dict[Any, tuple[Message, Message]], key: Any, original: Message, make: Any) -> Message:
        hit = store.get(key)
        if hit is not None and hit[0] is original:
            return hit[1]
        copy = make()
        store[key] = (original, copy)
        return copy
