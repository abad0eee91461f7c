"""tokenpilot[redis]'s first use: `TokenPilot(store="redis://…")`, an output stored and recalled."""

import os
import sys

from tokenpilot import TokenPilot

url = os.environ.get("TOKENPILOT_TEST_REDIS")
if not url:
    sys.exit("first/use_redis.py: set TOKENPILOT_TEST_REDIS to a running Redis (redis://host:port/db)")
big = "".join(f"line {i}: value {i * 7}\n" for i in range(8000))
messages = [
    {"role": "user", "content": "Show the log."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "cat app.log"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": big},
]
tp = TokenPilot(store=url)
prepared = tp.prepare(messages, session_id="ci-first-redis")
aid = prepared.stats.artifacts[0]
back = tp.recall(aid, session_id="ci-first-redis").text
print(f"stored {aid} in {url.split('@')[-1]}; recalled {len(back)} chars")
assert back == big, "the recall did not return the original byte for byte"
