"""The system prompt of a session: which leading messages make it up, stabilised once
(volatile values become placeholders, their values go in a block after it), rendered
once per version; a later change becomes an append-only update note, per-call values
that moved a tail at the very end (DESIGN.md §3).

One `SystemPrompts` serves every session of a `TokenPilot`: it remembers, across
sessions, the values each template came with ("once_varied" placeholders).
"""

from __future__ import annotations

import difflib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from .._canonical import canonical_json, sha256_hex
from ..config import Config
from ..errors import MessageError
from ..ingest.stabilize import Stabilized, stabilize_text, values_block
from ..messages.limits import check_depth
from ..messages.model import check_message, content_text
from ..tokens import count_tokens
from .fingerprint import keep, same
from .session import Session, msg_tokens

SESSION_VALUES_TITLE = "Values of the placeholders above, as of the start of this session:"
TAIL_TITLE = "Current values of the system prompt's placeholders that changed since the session started (runtime context, not written by the user):"
_SYSTEM_ROLES = ("system", "developer")
_MAX_TEMPLATES = 4096  # system-prompt templates remembered for "once_varied" placeholders


class SystemPrompts:
    """Stabilises, renders and follows the system prompt of each session it is handed."""

    def __init__(self, config: Config) -> None:
        self.config = config
        # system-prompt template (its stabilised text) -> the values seen with it, or
        # None once two differ ("once_varied" placeholders); bounded, oldest dropped
        self._template_values: OrderedDict[str, str | None] = OrderedDict()
        self._templates_lock = threading.Lock()

    def leading(self, messages: Sequence[Any]) -> int:
        """How many leading messages make up the system prompt: well-formed system or
        developer messages. A malformed one is history, passed through (or refused in
        strict mode) like any other malformed message."""
        k = 0
        while k < len(messages):
            m = messages[k]
            if not isinstance(m, Mapping) or m.get("role") not in _SYSTEM_ROLES:
                break
            check_depth(m, self.config.max_depth, k)
            try:
                check_message(m, k)
            except MessageError:
                break
            k += 1
        return k

    def update(self, s: Session, system_msgs: list[Mapping[str, Any]], warnings: list[str]) -> None:
        raw = tuple(m.get("content") for m in system_msgs)
        if (
            s.system.version
            and len(raw) == len(s.system.raw)
            and all(same(k, r) for k, r in zip(s.system.raw, raw))
        ):
            return
        cfg = self.config
        first = s.system.version == 0
        lazy = cfg.placeholders == "once_varied"
        varied = self._note_template(system_msgs) if lazy else True  # a later session may need them
        if first:
            s.system.verbatim = not self._worth_placeholders(system_msgs) or not varied
        stab = tuple(self._stabilize(m.get("content"), verbatim=s.system.verbatim) for m in system_msgs)
        if first or cfg.system_updates == "replace" or len(stab) != len(s.system.stable):
            if not first and len(stab) != len(s.system.stable) and cfg.system_updates == "append":
                warnings.append("the number of leading system messages changed: system prompt re-rendered")
            s.system.stable = stab
            s.system.current = stab
            s.system.raw = kept_system(raw, stab)
            self._render(s, system_msgs)
            return
        s.system.raw = kept_system(raw, stab)
        if [x.text for x in stab] != [x.text for x in s.system.current] or self._values(stab) != self._values(
            s.system.current
        ):
            note = self._update_note(s.system.current, stab)
            if note is not None:
                s.updates.append((len(s.entries), {"role": "user", "content": note}))
        s.system.current = stab  # per-call values (dates) always come from the latest prompt

    def _note_template(self, system_msgs: Sequence[Mapping[str, Any]]) -> bool:
        """Remember the values this system prompt came with; has its template (the text
        with placeholders) been seen with other values?"""
        if not self.config.stabilize:
            return False
        stab = [self._stabilize(m.get("content")) for m in system_msgs]
        if not any(st.session_values or st.call_values for st in stab):
            return False
        template = sha256_hex(canonical_json([st.text for st in stab]))
        values = sha256_hex(canonical_json([[st.session_values, st.call_values] for st in stab]))
        with self._templates_lock:
            seen = self._template_values.get(template, values)
            self._template_values[template] = None if seen != values else seen
            self._template_values.move_to_end(template)
            while len(self._template_values) > _MAX_TEMPLATES:
                self._template_values.popitem(last=False)
            return self._template_values[template] is None

    def _stabilize(self, content: Any, *, verbatim: bool = False) -> Stabilized:
        text = content_text(content) if not isinstance(content, str) else content
        if not self.config.stabilize or verbatim:
            return Stabilized(text)
        return stabilize_text(text, self.config.volatile_patterns)

    def _worth_placeholders(self, system_msgs: Sequence[Mapping[str, Any]]) -> bool:
        """Do at least `min_shared_tokens` of the system prompt follow its first volatile
        value? Only then can other sessions share enough of the cached prefix to pay for
        the values block."""
        after: list[str] = []
        found = False
        for m in system_msgs:
            st = self._stabilize(m.get("content"))
            if not found:
                pos = min((st.text.find(ph) for ph, _ in st.session_values + st.call_values), default=-1)
                if pos < 0:
                    continue
                found = True
                after.append(st.text[pos:])
            else:
                after.append(st.text)
        return found and count_tokens("\n".join(after)) >= self.config.min_shared_tokens

    @staticmethod
    def _values(stab: Sequence[Stabilized], *, per_call: bool = False) -> list[tuple[str, str]]:
        seen: dict[str, str] = {}
        for st in stab:
            for ph, v in st.call_values if per_call else st.session_values:
                seen.setdefault(ph, v)
        return list(seen.items())

    def _render(self, s: Session, system_msgs: list[Mapping[str, Any]]) -> None:
        cfg = self.config
        out = []
        for m, st in zip(system_msgs, s.system.stable):
            content = m.get("content")
            if isinstance(content, str) or content is None:
                out.append({**m, "content": st.text if content is not None else None})
            else:  # a list of parts: its text becomes one stabilised part, others kept
                parts = [p for p in content if not (isinstance(p, Mapping) and p.get("type") == "text")]
                out.append({**m, "content": [{"type": "text", "text": st.text}, *parts]})
        # Per-call values (dates, times) start here too, so a session whose date never
        # changes sends no per-call tail at all; only values that moved go to the end.
        values = self._values(s.system.stable) + self._values(s.system.stable, per_call=True)
        if values and out:
            block = values_block(values, title=SESSION_VALUES_TITLE)
            if cfg.session_values == "merge" and isinstance(out[-1].get("content"), str):
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + block}
            else:
                out.append({"role": "system", "content": block})
        s.system.rendered = out
        s.system.version += 1
        s.system.tokens = sum(msg_tokens(m) for m in out)

    def _update_note(self, old: Sequence[Stabilized], new: Sequence[Stabilized]) -> str | None:
        """An append-only note describing how the system prompt changed (None: nothing visible)."""
        parts = []
        for a, b in zip(old, new):
            if a.text != b.text:
                diff = [
                    line
                    for line in difflib.unified_diff(
                        a.text.splitlines(), b.text.splitlines(), lineterm="", n=0
                    )
                    if line[:1] in "+-" and not line.startswith(("+++", "---"))
                ]
                parts.append("\n".join(diff))
        old_vals, new_vals = dict(self._values(old)), self._values(new)
        changed = [(ph, v) for ph, v in new_vals if old_vals.get(ph) != v]
        if changed:
            parts.append("\n".join(f"{ph} = {v}" for ph, v in changed))
        if not parts:
            return None
        return (
            "<tokenpilot-system-update>\nThe system prompt changed after this conversation began. "
            "Apply these changes to it (lines starting with - were removed, + were added; "
            "'X = v' gives a placeholder's new value):\n" + "\n".join(parts) + "\n</tokenpilot-system-update>"
        )

    def tail_values(self, s: Session) -> list[tuple[str, str]]:
        """Per-call values that differ from those at the session start (the rest are cached)."""
        start = dict(self._values(s.system.stable, per_call=True))
        return [(ph, v) for ph, v in self._values(s.system.current, per_call=True) if start.get(ph) != v]


def kept_system(raw: tuple[Any, ...], stab: Sequence[Stabilized]) -> tuple[Any, ...]:
    """The raw system contents as the session keeps them: the stabilised text itself where
    it equals the raw one (no volatile values), else a digest (the raw prompt is needed
    only to see whether the next call's differs)."""
    return tuple(keep(r, st.text) for r, st in zip(raw, stab))
