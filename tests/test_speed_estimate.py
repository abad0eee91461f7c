"""The statistics-only estimate samples 6,000 chars in 16 pieces; what prices and renders
(`count_tokens`) is counted exactly as before, and the memo never hands one's count to
the other."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot import tokens
from tokenpilot.tokens import _SAMPLE_CHARS, EXACT_LIMIT_CHARS, count_tokens, estimate_tokens


def _exact(text: str) -> int:
    return len(tokens.encoding().encode(text, disallowed_special=()))


def _log_then_traceback(n: int) -> str:
    """A text whose kind changes along it: few large samples follow it badly."""
    log = "".join(
        f"2026-12-04 10:{i % 60:02d}:00 worker-{i % 7} fetched item {i * 37} ok\n" for i in range(n)
    )
    tb = "".join(
        f'  File "/srv/app/mod_{i}.py", line {i * 3}, in handler_{i}\n    x = f(y)\n' for i in range(n)
    )
    return log + tb


def _count_as_before(text: str) -> int:
    """`count_tokens` above EXACT_LIMIT_CHARS as it always was: three 16,000/3-char samples."""
    mid, third = len(text) // 2, 16_000 // 3
    sample = text[:third] + text[mid : mid + third] + text[-third:]
    return round(_exact(sample) * len(text) / len(sample))


def test_estimate_is_close_on_a_text_that_changes_kind() -> None:
    text = _log_then_traceback(400)
    assert len(text) > _SAMPLE_CHARS
    tokens._MEMO.clear()
    assert abs(estimate_tokens(text) - _exact(text)) <= 0.03 * _exact(text)


def test_count_tokens_above_the_exact_limit_is_unchanged_and_kept_apart_from_the_estimate() -> None:
    text = _log_then_traceback(1200)
    assert len(text) > EXACT_LIMIT_CHARS
    tokens._MEMO.clear()
    estimated = estimate_tokens(text)  # memoised first: must not answer count_tokens
    counted = count_tokens(text)
    assert counted == _count_as_before(text)
    assert estimated != counted  # different samplers: the memo kept both
    assert estimate_tokens(text) == estimated


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=_SAMPLE_CHARS + 200), st.booleans())
def test_estimate_is_exact_up_to_the_sample_size(text: str, counted_first: bool) -> None:
    if counted_first:
        count_tokens(text)
    got = estimate_tokens(text)
    if len(text) <= _SAMPLE_CHARS:
        assert got == _exact(text) == count_tokens(text)
    else:
        assert got >= 1
