"""Counts that only feed statistics (an output's size before its reduction) are sampled
above `_SAMPLE_CHARS` chars, so counting a large output does not dominate a call; the
counts that price and render (the reduced form) stay as `count_tokens` gives them."""

from __future__ import annotations

from tokenpilot import TokenPilot
from tokenpilot.tokens import _SAMPLE_CHARS, count_tokens, estimate_tokens


def _log(lines: int) -> str:
    return "".join(
        f"2026-12-04 10:{i % 60:02d}:00 worker-{i % 7} fetched item {i * 37} ok\n" for i in range(lines)
    )


def test_estimate_is_exact_up_to_the_sample_size_and_close_above() -> None:
    short = _log(100)
    assert len(short) <= _SAMPLE_CHARS
    assert estimate_tokens(short) == count_tokens(short)
    long = _log(1200)
    assert _SAMPLE_CHARS < len(long) < 64_000  # count_tokens is exact here, the estimate samples
    exact = count_tokens(long)
    assert abs(estimate_tokens(long) - exact) <= 0.05 * exact


def test_a_reduced_output_is_priced_exactly_and_its_original_estimated(tmp_path) -> None:
    out = _log(1200)
    tp = TokenPilot(store=str(tmp_path))
    messages = [
        {"role": "user", "content": "fetch"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": out},
    ]
    prepared = tp.prepare(messages, session_id="s")
    sent = prepared.messages[-1]["content"]
    assert sent != out  # reduced, original stored
    entry = tp._sessions["s"].entries[-1]
    assert entry.tokens == count_tokens(sent) + 4
    assert abs(entry.raw_tokens - (count_tokens(out) + 4)) <= 0.05 * count_tokens(out)


def test_long_texts_are_counted_once_and_the_count_stays_exact(monkeypatch) -> None:
    """A long text sent again (a fleet's shared system prompt) is not encoded again, and an
    exact count and a sampled one of the same text are memoised apart."""
    from tokenpilot import tokens

    text = _log(1200)
    exact = len(tokens.encoding().encode(text, disallowed_special=()))
    tokens._MEMO.clear()
    calls: list[int] = []
    real = tokens._encoded
    monkeypatch.setattr(tokens, "_encoded", lambda t, limit: calls.append(len(t)) or real(t, limit))
    assert count_tokens(text) == exact
    assert count_tokens(text) == exact
    sampled = estimate_tokens(text)
    assert estimate_tokens(text) == sampled
    assert len(calls) == 2  # one exact encoding, one sampled
