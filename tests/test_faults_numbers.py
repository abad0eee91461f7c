"""A body json.loads refuses for other reasons than syntax (an integer past Python's
4,300-digit conversion limit) is a 400 naming why, on every endpoint, never a 500."""

from __future__ import annotations

import aiohttp
import pytest
from test_faults_bodies import assert_still_serving, error_of, post, proxy, upstream  # noqa: F401

from tokenpilot_proxy import wire

HUGE = b"1" * 5000


def test_parse_body_refuses_an_integer_past_the_conversion_limit() -> None:
    with pytest.raises(wire.BadRequest) as info:
        wire.parse_body(b'{"model": "m", "n": ' + HUGE + b"}")
    assert info.value.code == "invalid_json" and "4300" in str(info.value)


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.mark.parametrize(
    "path", ["/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/chat/completions"]
)
async def test_a_body_with_a_5000_digit_integer_is_a_400(upstream, proxy, http, path):  # noqa: F811
    body = b'{"model": "m", "max_tokens": ' + HUGE + b', "messages": []}'
    err = error_of(*await post(http, proxy.url, path, body), 400)
    assert err["code"] == "invalid_json"
    assert not upstream.received
    await assert_still_serving(http, proxy.url, path)


@pytest.mark.parametrize(
    "reply",
    [
        '{"baseVersion": ' + "1" * 5000 + ', "taskUpdates": []}',
        '{"baseVersion": 1, "x": ' + "[" * 100_000 + "]",
    ],
)
def test_an_estimator_reply_json_loads_refuses_is_a_reply_error(reply: str) -> None:
    from tokenpilot.estimator.llm import EstimatorReplyError, _extract_json_object

    with pytest.raises(EstimatorReplyError):
        _extract_json_object(reply)
