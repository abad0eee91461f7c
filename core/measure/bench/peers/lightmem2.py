"""LightMem2 (the paper's own implementation, `zjunlp/LightMem2`), its TokenPilot preset
through its Claude Code adapter, run from its own TypeScript sources under Node.

What runs: the adapter's before-call reduction, `applyBeforeCallReductionToClaudePayload`,
at the adapter's defaults (no config file: reduction on, gates 2,200 / 1,200 chars, every
pass on), on every call, on the whole Anthropic body Claude Code would send, exactly as
its gateway does before forwarding; its session state and the archive it writes for
every original live under a scratch `HOME`. What does not run: its stabiliser and its
eviction (the gateway's other stages; eviction is off in the adapter's defaults), and
its OpenClaw and Codex adapters: every trace set goes through the Claude Code adapter,
whatever agent recorded it, and `notes()` says so.

Each reduced block ends with a recovery hint naming `memory_fault_recover` and a
`segment:message-<i>-block-<j>` data key: those keys are the artifacts a recall would
fetch, and a recall returns the block's original text (charged like TokenPilot's).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ....messages import from_anthropic, to_anthropic
from ..method import Message, Method, MethodSession, Rendered
from .node_driver import NodeDriver
from .openclaw_pruning import _e2e_cache, find_node

ENV_DIR = "TOKENPILOT_LIGHTMEM2_DIR"
_KEY = re.compile(r'dataKey\\?":\\?"(segment:message-(\d+)-block-(\d+))')


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
METHOD_NAMES = ("lightmem2",)
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
    return [LightMem2()]


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


class _Driver(NodeDriver):
    """A long-lived `node --import tsx lightmem2.mjs`: one JSON line in, one out.
    Its HOME is a scratch folder: the adapter archives every original under it."""

    def __init__(self) -> None:
        src, why = find_lightmem2()
        node, why_node = find_node()
        if src is None or node is None:
            raise RuntimeError(f"lightmem2 cannot run: {why or why_node}")
        run = _runtime(src)
        self.home = tempfile.TemporaryDirectory(prefix="lightmem2-home-")
        super().__init__(
            "LightMem2 driver",
            node,
            "lightmem2.mjs",
            [str(run)],
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
    """LightMem2's TokenPilot preset through its Claude Code adapter's before-call
    reduction, on every call. One Node process (and one scratch HOME) per replay."""

    name: str = "lightmem2"
    kind: ClassVar[str] = "peer"
    _driver: _Driver | None = field(default=None, repr=False)
    _users: int = 0
    requests: int = 0
    changed: int = 0  # requests in which the adapter changed at least one block

    def session(self, session_id: str) -> MethodSession:
        if self._driver is None:
            self._driver = _Driver()
            atexit.register(self._driver.close)
        self._users += 1
        return _LightMem2Session(self, self._driver, session_id)

    def _release(self) -> None:
        self._users -= 1
        if self._users == 0 and self._driver is not None:
            self._driver.close()
            self._driver = None  # a later replay starts from a fresh process and HOME

    def notes(self) -> list[str]:
        return [
            f"lightmem2 ran: its Claude Code adapter's before-call reduction on every call, "
            f"changing {self.changed}/{self.requests} requests",
            "lightmem2 did not run: its stabiliser, eviction, OpenClaw and Codex adapters "
            "(every set went through the Claude Code adapter)",
        ]


def _merge(original: list[Message], before: list[Message], after: list[Message]) -> list[Message]:
    """The prompt with each message the adapter changed replaced by its reduced form;
    messages it left alone stay the agent's own objects (no format round trip)."""
    if len(before) != len(after) or len(before) != len(original):
        return after
    return [a if b != a else o for o, b, a in zip(original, before, after)]


class _LightMem2Session:
    def __init__(self, method: LightMem2, driver: _Driver, session_id: str) -> None:
        self.method = method
        self.driver = driver
        self.sid = session_id
        self.originals: dict[str, str] = {}  # data key -> the block's original text
        self.closed = False

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        body = to_anthropic(prompt, tools)
        sent = json.loads(json.dumps(body))
        reply = self.driver.call({"session": self.sid, "payload": sent})
        reduced = reply["payload"]
        self.method.requests += 1
        self.method.changed += bool(reply.get("changed"))
        system = body.get("system")
        before, _ = from_anthropic(body["messages"], system)
        after, _ = from_anthropic(reduced["messages"], reduced.get("system"))
        messages = _merge(prompt, before, after)
        keys = set()
        for m in _KEY.finditer(json.dumps(reduced["messages"], ensure_ascii=False)):
            key, i, j = m.group(1), int(m.group(2)), int(m.group(3))
            keys.add(key)
            if key not in self.originals:
                self.originals[key] = _block_text(body["messages"], i, j)
        return Rendered(messages, tools, len(messages), frozenset(keys))

    def recall_text(self, artifact_id: str) -> str | None:
        """What `memory_fault_recover` returns for a data key: the original block."""
        return self.originals.get(artifact_id)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.method._release()


def _block_text(messages: list[dict[str, Any]], i: int, j: int) -> str:
    try:
        content = messages[i]["content"]
        block = content[j] if isinstance(content, list) else {"text": content}
    except (IndexError, KeyError, TypeError):
        return ""
    inner = block.get("content", block.get("text", ""))
    if isinstance(inner, list):
        return "\n".join(b.get("text", "") for b in inner if isinstance(b, dict))
    return inner if isinstance(inner, str) else json.dumps(inner)
