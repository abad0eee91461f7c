"""LightMem2 (the paper's own implementation, `zjunlp/LightMem2`), its TokenPilot preset
run through the adapter its users install on each host, from its own TypeScript
sources under Node.

Which adapter runs is chosen by the recorded session's format (`session_for`):
- Claude Code sessions: Claude Code's own gateway (`startClaudeCodeGatewayRuntime`) on
  a local port, the whole request path, with its upstream forwarder replaced by one
  that keeps the body it would forward (lifecycle planner, eviction, stabiliser,
  recovery protocol, `applyBeforeCallReductionToClaudePayload`, encode or bypass), on
  every call. The system prompt goes as a string: as text blocks, which is how Claude
  Code sends it, the gateway's codec refuses to encode the system once its recovery
  protocol is appended and the gateway answers HTTP 500 (tested);
- OpenClaw sessions: the OpenClaw plugin proxy's `prepareProxyRequest` on the Responses
  body OpenClaw's provider sends (its stabiliser, procedural memory, recovery protocol
  and `applyProxyReductionToInput`), on every call; with `persist` on, also the plugin's
  `tool_result_persist` hook once per tool result as it enters the transcript;
- every other set (tau-bench, τ²-bench, mini-swe-agent, SWE-agent: OpenAI chat): the
  Codex proxy's before-call chain on the Responses body Codex would send (decode,
  stable prefix, recovery protocol, `applyBeforeCallReductionToPayload`, sync); see
  `lightmem2_wire` for what maps.
Every config is the adapter's install default, "normal" mode: stabiliser and reduction
on (gates 2,200 / 1,200 chars, every pass), eviction off, no estimator, OpenClaw's
`tool_result_persist` hook off. `lightmem2_persist` turns that hook on; `lightmem2_evict`
turns the Claude Code gateway's eviction on, which with no estimator plans by its
heuristic (tool results over 4,000 chars). What does not run, and why, `notes()` says.

Each reduced block ends with a recovery hint naming `memory_fault_recover`, a data key
and an archive file the adapter wrote under a scratch `HOME` (an eviction stub names a
`recovery_ref` key); a recall of that key returns the archived `originalText`, found by
the archive folder's `key-lookup.json` as `memory_fault_recover` finds it, charged like
TokenPilot's recall.

Where LightMem2 is: `$TOKENPILOT_LIGHTMEM2_DIR`, else `../shared/lightmem2` beside the
working directory or the repository. It runs from a copy in the e2e cache
(`$TOKENPILOT_E2E_CACHE`, default `~/.cache/tokenpilot-e2e/lightmem2-run`) with each
workspace package linked as `node_modules/@lightrsi/<name>` (its workspace's
`workspace:*` dependencies do not install with npm) and `tsx` from
`<cache>/lightmem2-deps` (`npm install --prefix <cache>/lightmem2-deps tsx js-tiktoken`).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ....messages.model import from_anthropic, to_anthropic
from ..method import Message, Method, MethodSession, Rendered
from .lightmem2_wire import Wire, from_responses, to_responses
from .node_driver import NodeDriver
from .openclaw_pruning import _e2e_cache, find_node

ENV_DIR = "TOKENPILOT_LIGHTMEM2_DIR"
HOSTS = ("claude", "claude_evict", "codex", "openclaw")
LABEL = {"claude": "Claude Code gateway", "claude_evict": "Claude Code gateway with its eviction on",
         "codex": "Codex proxy's before-call chain", "openclaw": "OpenClaw plugin proxy"}  # fmt: skip
# the recorded session's format -> the adapter its agent's users install
FORMAT_HOST = {"claude_code": "claude", "openclaw": "openclaw", "openclaw_sqlite": "openclaw",
               "openclaw_pinchbench": "openclaw"}  # fmt: skip
MODEL = {"claude": "claude-sonnet-4-5", "codex": "gpt-5.4-mini", "openclaw": "gpt-5.4-mini"}
# a recovery hint: `{"dataKey":"<key>"}.` ... `Archive: <file>` (artifact-store's buildRecoveryHint)
_HINT = re.compile(r'memory_fault_recover with \{"dataKey":"([^"]+)"\}\.\n.*?Archive: (\S+)', re.S)
# the Claude Code gateway's eviction stub; its archive sits under the gateway's state folder
_STUB = re.compile(r"\[Tool payload trimmed; recovery_ref=(claude_tool_result:[0-9a-f]+)\]")
_STUB_ARCHIVE = Path(".claude", "tokenpilot-evict", "claude-context", "archive")


def host_for(fmt: str, *, evict: bool = False) -> str:
    """The LightMem2 adapter for a recorded session's format (`evict`: Claude Code's
    gateway with its eviction switched on; the others have no eviction without an estimator)."""
    host = FORMAT_HOST.get(fmt, "codex")
    return "claude_evict" if evict and host == "claude" else host


def find_lightmem2() -> tuple[Path | None, str]:
    """(the LightMem2 checkout, or None and why not)."""
    env = os.environ.get(ENV_DIR)
    repo = Path(__file__).resolve().parents[4]
    # beside the working directory or the checkout (a worktree sits one level deeper)
    beside = [Path.cwd() / "..", repo / "..", repo / ".." / ".."]
    cands = [Path(env)] if env else [b / "shared" / "lightmem2" for b in beside]
    for cand in cands:
        if (cand / "components" / "adapters" / "claude-code" / "src" / "reduction.ts").is_file():
            return cand.resolve(), ""
    where = f"${ENV_DIR}={env}" if env else f"${ENV_DIR}, ../shared/lightmem2"
    return None, f"LightMem2 not found ({where})"


def _deps() -> Path:
    return _e2e_cache() / "lightmem2-deps"


# This module is a peer: the bench finds it by these names (`peers.__init__`), no list to edit.
METHOD_NAMES = ("lightmem2", "lightmem2_persist", "lightmem2_evict")
REPORT_ORDER = 40  # where its rows go among the peers'


def missing() -> str | None:
    """Why LightMem2 cannot run here, or None."""
    src, why = find_lightmem2()
    if src is None:
        return why
    node, why = find_node()
    if node is None:
        return why
    if not (_deps() / "node_modules" / "tsx" / "dist" / "loader.mjs").is_file():
        return f"tsx not installed: npm install --prefix {_deps()} tsx js-tiktoken"
    return None


def methods() -> list[Method]:
    return [
        LightMem2(),
        LightMem2(name="lightmem2_persist", persist=True),
        LightMem2(name="lightmem2_evict", evict=True),
    ]


def _runtime(src: Path) -> Path:
    """A copy of `src` that Node can resolve: workspace packages linked under
    node_modules/@lightrsi, tsx and js-tiktoken beside them. Rebuilt when `src` changes."""
    digest = hashlib.sha256()
    for f in sorted(src.rglob("*")):
        if f.is_file() and "node_modules" not in f.parts:
            digest.update(f"{f.relative_to(src)}:{f.stat().st_size}:{f.stat().st_mtime_ns}".encode())
    run = _e2e_cache() / "lightmem2-run" / digest.hexdigest()[:16]
    if (run / ".ready").exists():
        return run
    run.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="building-", dir=run.parent))
    shutil.rmtree(tmp)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("node_modules"))
    modules = tmp / "node_modules"
    shutil.copytree(_deps() / "node_modules", modules, symlinks=True)
    for pkg in (tmp / "components").glob("*/**/package.json"):
        if "node_modules" in pkg.parts:
            continue
        name = json.loads(pkg.read_text()).get("name", "")
        if name.startswith("@lightrsi/"):
            link = modules / name
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(run / pkg.parent.relative_to(tmp))
    (tmp / ".ready").write_text("ok")
    try:
        tmp.rename(run)
    except OSError:  # another run built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return run


class _Home:
    """The driver's HOME: the first free `lightmem2-home-<pid>-<n>` in the temp folder, so a
    second replay in the same process (the determinism check) sees the same path, as a
    user's HOME is; the adapters name archive files under it in what the model reads."""

    def __init__(self) -> None:
        for n in range(1000):
            path = Path(tempfile.gettempdir(), f"lightmem2-home-{os.getpid()}-{n}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            self.name = str(path)
            return
        raise RuntimeError("no free lightmem2 HOME folder in the temp folder")

    def cleanup(self) -> None:
        shutil.rmtree(self.name, ignore_errors=True)


class _Driver(NodeDriver):
    """A long-lived `node --import tsx lightmem2.mjs`: one JSON line in, one out.
    Its HOME is a scratch folder: the adapters keep state and archive every original under it."""

    def __init__(self, hosts: tuple[str, ...]) -> None:
        src, why = find_lightmem2()
        node, why_node = find_node()
        if src is None or node is None:
            raise RuntimeError(f"lightmem2 cannot run: {why or why_node}")
        run = _runtime(src)
        self.home = _Home()
        super().__init__(
            "LightMem2 driver",
            node,
            "lightmem2.mjs",
            [str(run), ",".join(hosts)],
            node_flags=["--import", str(run / "node_modules" / "tsx" / "dist" / "loader.mjs")],
            env={"HOME": self.home.name},
            cwd=self.home.name,
        )
        self.config: dict[str, Any] = self.hello["config"]

    def close(self) -> None:
        super().close()
        self.home.cleanup()


@dataclass(slots=True)
class LightMem2:
    """LightMem2's TokenPilot preset through each host's own adapter, on every call.
    `persist`: also OpenClaw's `tool_result_persist` hook (off in its install default);
    `evict`: Claude Code's gateway with its eviction on (off in its install default).
    One Node process (and one scratch HOME) per replay."""

    name: str = "lightmem2"
    persist: bool = False
    evict: bool = False
    kind: ClassVar[str] = "peer"
    _driver: _Driver | None = field(default=None, repr=False)
    _users: int = 0
    requests: Counter[str] = field(default_factory=Counter)  # host -> requests sent
    changed: Counter[str] = field(default_factory=Counter)  # host -> requests with a message cut
    persisted: int = 0  # tool results the persist hook replaced at ingestion

    def session(self, session_id: str) -> MethodSession:
        """A session on the Claude Code adapter (a caller that does not say the format)."""
        return self.session_for(session_id, "claude_code")

    def session_for(self, session_id: str, fmt: str) -> MethodSession:
        """A session on the adapter of the recorded session's agent."""
        if self._driver is None:
            self._driver = _Driver(("claude_evict" if self.evict else "claude", "codex", "openclaw"))
            atexit.register(self._driver.close)
        self._users += 1
        return _LightMem2Session(self, self._driver, session_id, host_for(fmt, evict=self.evict))

    def _release(self) -> None:
        self._users -= 1
        if self._users == 0 and self._driver is not None:
            self._driver.close()
            self._driver = None  # a later replay starts from a fresh process and HOME

    def notes(self) -> list[str]:
        ran = "; ".join(
            f"{LABEL[h]} (stabiliser, recovery protocol, reduction) cut messages in {self.changed[h]}/{self.requests[h]} requests"
            for h in HOSTS
            if self.requests[h]
        )
        lines = [f"{self.name} ran: {ran or 'nothing'}"]
        if self.persist:
            lines.append(
                f"{self.name} ran OpenClaw's tool_result_persist hook at ingestion: {self.persisted} results persisted"
            )
        missed = [
            "its LLM estimator and the eviction it drives (they need an endpoint; Codex and "
            "OpenClaw have no eviction without one)",
            "OpenClaw's context engine (it reads OpenClaw's own transcript files)",
        ]
        if not self.evict:
            missed.insert(0, "Claude Code's heuristic eviction (off in its install default; lightmem2_evict)")
        if not self.persist:
            missed.append(
                "OpenClaw's tool_result_persist hook (off in its install default; lightmem2_persist)"
            )
        lines.append(f"{self.name} did not run: " + ", ".join(missed))
        lines.append(
            f"{self.name} renders other bytes on each run: each recovery hint names an archive "
            "file stamped with Date.now() (the same bytes with a frozen clock)"
        )
        return lines


def _merge(original: list[Message], before: list[Message], after: list[Message]) -> list[Message]:
    """The prompt with each message the adapter changed replaced by its reduced form;
    messages it left alone stay the agent's own objects (no format round trip). A system
    message the adapter added in front (its recovery protocol) leads."""
    lead: list[Message] = []
    if len(after) == len(before) + 1 and after[0].get("role") == "system":
        lead, after = after[:1], after[1:]
    if len(before) != len(after) or len(before) != len(original):
        return lead + after
    return lead + [a if b != a else o for o, b, a in zip(original, before, after)]


class _LightMem2Session:
    def __init__(self, method: LightMem2, driver: _Driver, session_id: str, host: str) -> None:
        self.method = method
        self.driver = driver
        self.sid = session_id
        self.host = host
        self.archives: dict[str, str] = {}  # data key -> the archive file its first hint named
        self.originals: dict[str, str] = {}  # data key -> the archived original, once read
        self.ingested: dict[tuple[str, str], str] = {}  # (call id, result) -> what the hook kept
        self.closed = False

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        agent = {id(m) for m in prompt}
        if self.method.persist and self.host == "openclaw":
            names = {
                c.get("id"): (c.get("function") or {}).get("name", "")
                for m in prompt
                for c in m.get("tool_calls") or []
            }
            prompt = [self._ingest(m, names) if m.get("role") == "tool" else m for m in prompt]
        claude = self.host.startswith("claude")
        messages = self._claude(prompt, tools) if claude else self._responses(prompt, tools)
        self.method.changed[self.host] += any(
            id(m) not in agent and m.get("role") != "system" for m in messages
        )
        keys = set()
        for msg in messages:
            if id(msg) in agent:  # the agent's own message: nothing reduced in it
                continue
            text = _text(msg.get("content"))
            for m in _HINT.finditer(text):
                keys.add(m.group(1))
                self.archives.setdefault(m.group(1), m.group(2))
            for m in _STUB.finditer(text):
                keys.add(m.group(1))
                self.archives.setdefault(
                    m.group(1), str(Path(self.driver.home.name, _STUB_ARCHIVE, "stub.json"))
                )
        # its data keys are positions (`segment:input-5-output`), the same in every session:
        # the artifact id names the session too, since the bench takes ids as unique
        return Rendered(messages, tools, len(messages), frozenset(f"{k}@{self.sid}" for k in keys))

    def _send(self, payload: dict[str, Any]) -> dict[str, Any]:
        reply = self.driver.call({"host": self.host, "session": self.sid, "payload": payload})
        self.method.requests[self.host] += 1
        return reply["payload"]

    def _claude(self, prompt: list[Message], tools: list[dict[str, Any]]) -> list[Message]:
        body = {"model": MODEL["claude"], **to_anthropic(prompt, tools)}
        system = body.get("system")
        if isinstance(system, list) and all(b.get("type") == "text" for b in system):
            # as a string: with blocks (as Claude Code sends them) the gateway's codec throws
            # once its recovery protocol changes the text, and it answers HTTP 500
            body["system"] = "\n\n".join(b.get("text", "") for b in system)
        reduced = self._send(json.loads(json.dumps(body)))
        before, _ = from_anthropic(body["messages"], body.get("system"))
        after, _ = from_anthropic(reduced["messages"], reduced.get("system"))
        return _merge(prompt, before, after)

    def _responses(self, prompt: list[Message], tools: list[dict[str, Any]]) -> list[Message]:
        wire: Wire = to_responses(prompt, tools, self.host, MODEL[self.host])
        reduced = self._send(json.loads(json.dumps(wire.body)))
        messages = from_responses(wire, reduced, prompt)
        if messages is None:
            raise RuntimeError(f"lightmem2 {self.host}: the proxy changed the items' shape; no map back")
        return messages

    def _ingest(self, msg: Message, names: dict[Any, str]) -> Message:
        """OpenClaw's tool_result_persist hook on a tool result, once, as it enters."""
        content = msg.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        key = (str(msg.get("tool_call_id", "")), text)
        kept = self.ingested.get(key)
        if kept is None:
            call_id = key[0].split("|", 1)[0]
            tool = str(names.get(msg.get("tool_call_id")) or "").strip().lower()
            event_msg = {"role": "toolResult", "toolCallId": call_id, "toolName": tool,
                         "content": [{"type": "text", "text": text}]}  # fmt: skip
            reply = self.driver.call({"host": "openclaw", "op": "persist", "session": self.sid,
                                      "toolName": tool, "toolCallId": call_id, "message": event_msg})  # fmt: skip
            parts = reply["message"].get("content")
            kept = parts if isinstance(parts, str) else "\n".join(p.get("text", "") for p in parts or [])
            self.method.persisted += kept != text
            for m in _HINT.finditer(kept):
                self.archives.setdefault(m.group(1), m.group(2))
            self.ingested[key] = kept
        return msg if kept == text else {**msg, "content": kept}

    def recall_text(self, artifact_id: str) -> str | None:
        """The original behind an artifact id (`<data key>@<session>`) or a bare data key."""
        suffix = f"@{self.sid}"
        if artifact_id.endswith(suffix):
            artifact_id = artifact_id[: -len(suffix)]
        return self._recall(artifact_id)

    def _recall(self, artifact_id: str) -> str | None:
        """What `memory_fault_recover` returns for a data key: the archived original. An
        original that is itself a hint to an earlier archive (OpenClaw's proxy re-reducing
        a persisted preview) resolves to that archive's original: one recall, not two."""
        if artifact_id not in self.originals:
            path = self.archives.get(artifact_id)
            if path is None:
                return None
            text = _archived(path, artifact_id)
            inner = [m.group(1) for m in _HINT.finditer(text) if m.group(1) in self.archives]
            if len(inner) == 1 and inner[0] != artifact_id:
                text = self._recall(inner[0]) or text
            self.originals[artifact_id] = text
        return self.originals[artifact_id]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for key in self.archives:  # read before the scratch HOME goes
                self._recall(key)
            self.method._release()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _archived(path: str, key: str, wait_s: float = 5.0) -> str:
    """The archived `originalText` for `key`, found as `memory_fault_recover` finds it:
    by the archive folder's `key-lookup.json` (a hint's file name can differ from the file
    written, each taking its own `Date.now()`), else by the file the hint names. Some
    archives are written without being awaited, so wait for them, bounded."""
    folder = Path(path).parent
    deadline = time.monotonic() + wait_s
    while True:
        try:
            lookup = json.loads((folder / "key-lookup.json").read_text(encoding="utf-8"))
            target = Path(lookup[key]) if key in lookup else Path(path)
            return str(json.loads(target.read_text(encoding="utf-8")).get("originalText", ""))
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() >= deadline:
                return ""
            time.sleep(0.01)
