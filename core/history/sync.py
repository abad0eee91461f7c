"""A session's history kept in step with the caller's: which leading messages are
already ingested (`match`), where the caller rewrote it (`truncate`), messages to
ingest again once the store takes their originals (`retry_unstored`), and ingestion of
new messages (`ingest_new`: reduced once, frozen; I7). Also one tool output reduced on
its own (`reduce_output`, for hosts that cut outputs before they are stored).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from .._canonical import canonical_json, sha256_hex
from ..config import BULKY_TOOL_FAMILIES, Config
from ..errors import MessageError
from ..ingest.elision import elides
from ..ingest.gate import (
    Ingested,
    IngestState,
    Pipeline,
    ToolCallInfo,
    hard_limited,
    ingest_assistant,
    ingest_tool_result,
    ingest_user,
)
from ..ingest.reshown import ShownLines, shown_label
from ..ingest.stabilize import tool_name
from ..ingest.unstored import store_reason, unstored_form
from ..messages.limits import nesting_exceeds
from ..messages.model import check_message, content_text
from ..messages.observations import OBSERVATION_TOOL, is_observation, named_tool
from ..passes.truncate import tool_family
from ..pricing import Prices
from ..store.protocol import Artifacts
from .fingerprint import Digest, keep, keep_calls, same, same_calls
from .session import Entry, Session, msg_tokens

log = logging.getLogger("tokenpilot")

_CHARS_PER_TOKEN = 4  # to weigh a token price against a reduction measured in chars


class History:
    """Ingestion and matching for the sessions of one `TokenPilot` (its config,
    pipeline and store). Callers hold the session's lock."""

    def __init__(self, config: Config, pipeline: Pipeline, store: Artifacts) -> None:
        self.config = config
        self.pipeline = pipeline
        self.store = store

    def ingest_new(
        self,
        s: Session,
        history: list[Any],
        n: int,
        k: int,
        stored: list[str],
        store_errors: list[OSError],
        warnings: list[str],
    ) -> tuple[int, int]:
        """Ingest `history[n:]` (messages not seen before) into the session's entries, in
        order; `k` is where the history starts in the caller's list. Returns (reduced,
        malformed). A malformed message passes through capped, or raises in strict mode."""
        cfg = self.config
        malformed = 0
        reduced = 0
        # The agent's first tool calls tell whether its outputs run large; a tool added
        # on a later call re-sends the whole cached prefix, so then it waits for
        # something to recall (an artifact worth that, or an eviction).
        judge_calls = not s.recallable and not any(e.calls for e in s.entries[:n])
        shown = self.shown(s)
        if shown is not None:  # a re-shown run may point only at what the model sees now
            dropped = getattr(s.lifecycle, "dropped", None)
            shown.hidden = dropped() if callable(dropped) else frozenset()
        for i in range(n, len(history)):
            msg = history[i]
            try:
                check_message(msg, k + i)
            except MessageError as exc:
                if cfg.strict:
                    raise
                malformed += 1
                warnings.append(str(exc))
                s.entries.append(self._capped(s, self._passthrough_entry(msg), stored, store_errors))
                self._noted(s)
                continue
            if cfg.recall_tool_from == "auto" and judge_calls and not s.recallable:
                s.recallable = _bulky_call(msg, history[i - 1] if i else None)
            entry = self._ingest(s, msg, stored, store_errors)
            if entry.artifact_id:
                reduced += 1
            s.entries.append(entry)
            self._noted(s)
        return reduced, malformed

    def match(self, s: Session, history: list[Any]) -> int:
        """How many leading messages are already ingested, unchanged (ids may differ).

        Every call walks the whole history here, so the usual message (a plain dict whose
        fields the entry holds as they are, not as digests) is compared inline, field by
        field as `same` does; anything else goes through `same`."""
        n = 0
        for entry, msg in zip(s.entries, history):
            if entry.live and type(msg) is dict:
                content = entry.content
                if type(content) is not Digest:
                    if entry.role != msg.get("role") or entry.name != msg.get("name"):
                        break
                    got = msg.get("content")
                    try:
                        if got is not content and not content == got:
                            break
                    except RecursionError:
                        break
                    calls = entry.calls
                    if calls is None:
                        if msg.get("tool_calls"):
                            break
                    elif not same_calls(calls, sig_calls(msg)):
                        break
                    n += 1
                    continue
            if not self.same(entry, msg):
                break
            n += 1
        return n

    def same(self, entry: Entry, msg: Any) -> bool:
        """Is `msg` the message `entry` ingested (ids may differ)?"""
        if not isinstance(msg, Mapping):
            return entry.frozen is msg or entry.frozen == msg
        if entry.live:
            return (
                entry.role == msg.get("role")
                and entry.name == msg.get("name")
                and same_calls(entry.calls, sig_calls(msg))
                and same(entry.content, msg.get("content"))
            )
        if nesting_exceeds(msg, self.config.max_depth) or not hashable(msg):
            return False  # refused by the depth check, or passed through as malformed
        if entry.raw_hash == raw_hash(msg):
            entry.role, entry.name = msg.get("role"), msg.get("name")
            entry.content, entry.calls = kept_fields(msg, entry.frozen)
            entry.live = True
            return True
        return False

    def hold_elisions(self, s: Session, history: list[Any], n: int) -> int:
        """Where ingestion resumes when the caller's only rewrite is its own rolling
        elision of old environment output (`tokenpilot.ingest.elision`): past the held messages,
        which keep their frozen form until the next batch boundary; `n` otherwise."""
        held = s.elisions
        end = len(s.entries)
        if n >= end or len(history) < end:
            held.clear()
            return n
        count = 0
        for i in range(n, end):
            msg, entry = history[i], s.entries[i]
            if self.same(entry, msg):
                continue
            prev = s.entries[i - 1].role if i else None
            if not isinstance(msg, Mapping) or not elides(entry, msg, call_ids(msg), msg_tokens(msg), prev):
                held.clear()  # a rewrite of another kind: the new history is the base now
                return n
            count += 1
        if held.due(s.calls_prepared):
            held.apply(count)
            return n
        held.hold(count, s.calls_prepared)
        return end

    def truncate(self, s: Session, n: int, *, keep_updates: bool = False) -> None:
        """The caller rewrote history from message n: forget later entries, rebuild state."""
        s.entries = s.entries[:n]
        s.shown = None  # rebuilt from the entries kept
        if not keep_updates:
            s.updates = [(pos, m) for pos, m in s.updates if pos <= n]
        recalls = s.state.recall_counts
        s.state = IngestState(recall_counts=recalls)
        s.calls = {}
        for e in s.entries:
            for cid, info in e.call_infos:
                s.calls[cid] = info
            if e.effect:
                aid, tool, call_key, source = e.effect
                s.state.artifact_sources.setdefault(aid, source)
                s.state.seen_outputs.setdefault(aid, tool)
                if call_key:
                    s.state.window.append((call_key, aid))
                    while len(s.state.window) > self.config.call_window:
                        s.state.window.popleft()

    def retry_unstored(self, s: Session, n: int, errors: list[OSError]) -> tuple[int, list[Entry]]:
        """Where ingestion resumes, and the entries it replaces: from the first message the
        store refused, once the store takes that original now.

        Later messages are ingested again too, in order, so the session's state is what
        a clean ingestion gives. While the store still refuses, nothing is redone.
        """
        first = next((i for i in range(n) if s.entries[i].unstored is not None), None)
        if first is None:
            return n, []
        probe = s.entries[first].unstored
        if probe:
            try:
                self.store.put(s.id, probe)
            except OSError as exc:
                errors.append(exc)
                return n, []
        before = s.entries[first:n]
        self.truncate(s, first, keep_updates=True)  # same messages again: update notes stay
        return first, before

    def _passthrough_entry(self, msg: Any) -> Entry:
        if isinstance(msg, Mapping):
            return Entry(
                msg.get("role"),
                msg.get("content"),
                msg.get("name"),
                sig_calls(msg),
                raw_hash(msg) if hashable(msg) else "",
                call_ids(msg),
                dict(msg),
                0,
                0,
            )
        return Entry(None, None, None, None, "", None, msg, 0, 0)

    def _capped(self, s: Session, entry: Entry, stored: list[str], store_errors: list[OSError]) -> Entry:
        """A malformed tool message passed through: untouched, except that it never exceeds
        the hard limit (cut with a recall handle; with no handle when the store refuses)."""
        msg = entry.frozen
        if not isinstance(msg, Mapping) or msg.get("role") != "tool":
            return entry
        refused: list[str] = []
        try:
            capped = hard_limited(msg, self.config, self.putter(s, stored, refused))
        except OSError as exc:  # retried at the next call, as any unstored output
            store_errors.append(exc)
            capped = Ingested(unstored_form(msg, self.config.hard_limit_chars, store_reason(exc)))
        except (TypeError, ValueError):  # content no JSON can hold: nothing to measure it by
            return entry
        entry.frozen, entry.artifact_id = capped.message, capped.artifact_id
        entry.unstored = refused[0] if refused else None
        return entry

    def _ingest(
        self, s: Session, msg: Mapping[str, Any], stored: list[str], store_errors: list[OSError]
    ) -> Entry:
        refused: list[str] = []
        put = self.putter(s, stored, refused)
        role = msg.get("role")
        effect = None
        call_infos: tuple[tuple[str, ToolCallInfo], ...] = ()
        try:
            if role == "tool":
                call = s.calls.get(msg.get("tool_call_id", ""))
                result = ingest_tool_result(
                    msg,
                    call,
                    state=s.state,
                    pipeline=self.pipeline,
                    put=put,
                    min_saved_chars=self._first_artifact_threshold(s),
                    shown=self.shown(s),
                )
                original = msg.get("content")
                aid = result.artifact_id or aid_of(original)
                effect = (
                    aid,
                    call.name if call else str(msg.get("name") or ""),
                    call.call_key if call and self.config.call_cap else "",
                    call.source_key if call else "",
                )
            elif role == "assistant":
                result = ingest_assistant(msg, pipeline=self.pipeline, put=put)
                infos = []
                for c in msg.get("tool_calls") or []:
                    fn = c.get("function") or {}
                    info = ToolCallInfo(str(fn.get("name", "")), str(fn.get("arguments", "")))
                    infos.append((c.get("id"), info))
                    s.calls[c.get("id")] = info
                call_infos = tuple(infos)
            elif role == "user" and s.entries and is_observation(msg, {"role": s.entries[-1].role}):
                # a text-action agent's tool output (I5): it answers the assistant's action
                result = self._ingest_observation(s, msg, put)
            elif role == "user":
                result = ingest_user(msg, pipeline=self.pipeline, put=put)
            else:
                result = Ingested(dict(msg))
        except Exception as exc:
            if refused and isinstance(exc, OSError):  # no original: nothing may point at one
                store_errors.append(exc)
                cut = unstored_form(msg, self.config.hard_limit_chars, store_reason(exc))
                result = Ingested(cut)
            else:  # never lose the agent's turn to a bug in a pass; the hard limit still holds
                log.warning("tokenpilot: ingestion failed for a %s message, kept unreduced: %s", role, exc)
                try:
                    result = hard_limited(msg, self.config, put)
                except OSError as store_exc:  # no original: cut with no handle, retried next call
                    store_errors.append(store_exc)
                    result = Ingested(
                        unstored_form(msg, self.config.hard_limit_chars, store_reason(store_exc))
                    )
        frozen = result.message
        tokens = msg_tokens(frozen)
        content, calls = kept_fields(msg, frozen)
        return Entry(
            role,
            content,
            msg.get("name"),
            calls,
            raw_hash(msg),
            call_ids(msg),
            frozen,
            msg_tokens(msg, estimate=True) if result.artifact_id or refused or result.passes else tokens,
            tokens,
            result.artifact_id,
            effect,
            call_infos,
            unstored=refused[0] if refused else None,
        )

    def shown(self, s: Session) -> ShownLines | None:
        """The lines the session's outputs show so far (built from its entries on first use,
        so a session loaded in another process indexes the same lines)."""
        if not self.config.reshown:
            return None
        if s.shown is None:
            s.shown = ShownLines()
            for i, e in enumerate(s.entries):
                self._note_shown(s, s.shown, e, i)
        return s.shown

    def _noted(self, s: Session) -> None:
        """Index the entry just appended, when the index is built (else it is built from all)."""
        if s.shown is not None:
            self._note_shown(s, s.shown, s.entries[-1], len(s.entries) - 1)

    def _note_shown(self, s: Session, shown: ShownLines, e: Entry, i: int) -> None:
        frozen = e.frozen
        tid = frozen.get("tool_call_id") if isinstance(frozen, Mapping) else None
        call = s.calls.get(tid) if isinstance(tid, str) else None  # a malformed id names no call
        label = shown_label(
            frozen, s.entries[i - 1].frozen if i else None, (call.name, call.parsed) if call else None
        )
        if label is not None:
            shown.add(frozen["content"], label, i)

    def _ingest_observation(self, s: Session, msg: Mapping[str, Any], put: Callable[[str], str]) -> Ingested:
        """Reduce an observation as the shell tool's output it is; it stays a user message."""
        as_tool = {
            "role": "tool",
            "tool_call_id": "",
            "name": OBSERVATION_TOOL,
            "content": msg.get("content"),
        }
        result = ingest_tool_result(
            as_tool,
            None,
            state=s.state,
            pipeline=self.pipeline,
            put=put,
            min_saved_chars=self._first_artifact_threshold(s),
            shown=self.shown(s),
        )
        return dataclasses.replace(result, message={**msg, "content": result.message.get("content")})

    def _first_artifact_threshold(self, s: Session) -> int:
        """Chars a reduction must save when it would be the session's first artifact after
        its first call: `recall_artifact` then joins the tools, which come first, so the
        whole cached prefix is sent again uncached. Worth it only when what the reduction
        saves, on this call and (cached) on as many more calls as the session has had,
        outweighs that re-prefill; else the output passes as it came (never above vanilla).
        0 when the tool is there already, or joins on the first call."""
        cfg = self.config
        if (
            s.calls_prepared == 0
            or s.recallable
            or cfg.recall_tool_from != "auto"
            or not cfg.register_recall_tool
        ):
            return 0
        prefix = s.system.tokens + s.tools_tokens + sum(e.tokens for e in s.entries)
        p = Prices()
        tokens = prefix * (p.miss - p.hit) / (p.miss + p.hit * s.calls_prepared)
        return int(tokens * _CHARS_PER_TOKEN)

    def putter(self, s: Session, stored: list[str], refused: list[str]) -> Callable[[str], str]:
        def put(text: str) -> str:
            try:
                aid = self.store.put(s.id, text)
            except OSError:
                refused.append(text)
                raise
            stored.append(aid)
            return aid

        return put

    def reduce_output(
        self, s: Session, text: str, tool_name: str, arguments: str
    ) -> tuple[str, str | None, tuple[str, ...]]:
        """One tool output reduced as ingestion would, with no dedup or loop state; its
        original stored for the session. (text to keep, artifact id or None, passes)."""
        stored: list[str] = []
        put = self.putter(s, stored, [])
        msg = {"role": "tool", "tool_call_id": "reduce", "content": text}
        got = ingest_tool_result(
            msg,
            ToolCallInfo(tool_name, arguments),
            state=IngestState(),
            pipeline=self.pipeline,
            put=put,
        )
        content = got.message.get("content")
        # cut (with an artifact), or JSON re-encoded with nothing lost (`small_json`, no artifact)
        reduced = isinstance(content, str) and (got.artifact_id is not None or got.note == "small_json")
        if got.artifact_id is not None and reduced:
            with s.lock:
                s.recallable = True
        return (content if reduced else text), (got.artifact_id if reduced else None), got.passes


def _bulky_call(msg: Mapping[str, Any], previous: Any) -> bool:
    """Does it show a call to a bulky tool: its tool calls, or the first result of a call
    named in text (`<function=NAME>`; a fenced command names none: docs/frontier.md)."""
    if msg.get("tool_calls"):
        return bulky(msg["tool_calls"])
    seen = msg.get("role") == "user" and isinstance(previous, Mapping) and is_observation(msg, previous)
    name = named_tool(content_text(previous.get("content"))) if seen else None
    return name is not None and tool_family(name) in BULKY_TOOL_FAMILIES


def bulky(tools: Any) -> bool:
    """Is one of these tool definitions or calls (both carry `function.name`) a tool whose
    output is often large?"""
    items = tools if isinstance(tools, list | tuple) else ()
    return any(isinstance(t, Mapping) and tool_family(tool_name(t)) in BULKY_TOOL_FAMILIES for t in items)


def aid_of(content: Any) -> str:
    from .._canonical import artifact_id_for

    return artifact_id_for(
        content if isinstance(content, str) else canonical_json(content) if content is not None else ""
    )


# How a history message is recognised at the next call.
def sig_calls(msg: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """(name, arguments) of each tool call, to recognise the message again; a malformed
    `tool_calls` (lenient mode passes it through) is kept as it is, for comparison."""
    calls = msg.get("tool_calls")
    if not calls:
        return None
    if not isinstance(calls, list | tuple):
        return (("?", calls),)
    out = []
    for c in calls:
        fn = c.get("function") if isinstance(c, Mapping) else None
        out.append((fn.get("name"), fn.get("arguments")) if isinstance(fn, Mapping) else ("?", c))
    return tuple(out)


def call_ids(msg: Mapping[str, Any]) -> Any:
    """The tool-call id(s) a message carries: a string, a tuple (None where one is not a
    string), or None. Always hashable: render keys are built from them."""
    if msg.get("role") == "tool":
        tid = msg.get("tool_call_id")
        return tid if isinstance(tid, str) else None
    calls = msg.get("tool_calls")
    if not calls or not isinstance(calls, list | tuple):
        return None
    return tuple(
        c.get("id") if isinstance(c, Mapping) and isinstance(c.get("id"), str) else None for c in calls
    )


def raw_hash(msg: Mapping[str, Any]) -> str:
    return sha256_hex(canonical_json([msg.get("role"), msg.get("content"), msg.get("name"), sig_calls(msg)]))


def hashable(msg: Mapping[str, Any]) -> bool:
    try:
        raw_hash(msg)
        return True
    except (TypeError, ValueError):  # not JSON: int and str keys mixed, bytes, sets...
        return False


def kept_fields(msg: Mapping[str, Any], frozen: Any) -> tuple[Any, Any]:
    """(content, calls) of `msg` as an entry keeps them to recognise it (`fingerprint.keep`)."""
    fcontent = frozen.get("content") if isinstance(frozen, Mapping) else None
    return keep(msg.get("content"), fcontent), keep_calls(sig_calls(msg), frozen)
