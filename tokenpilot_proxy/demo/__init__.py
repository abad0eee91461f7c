"""The built-in upstreams: scripted OpenAI, Anthropic and Gemini servers on 127.0.0.1, no key needed.

They are the proxy's demo mode (`tokenpilot serve --demo`: the proxy in front of a built-in
upstream, so a reduction, a recall and the dashboard can be seen in a minute without a
provider), and the upstream the tests and benchmarks run the proxy against.

    from tokenpilot_proxy.demo import FakeUpstream, Reply
"""

from __future__ import annotations

from tokenpilot_proxy.demo.anthropic_upstream import (
    ANTHROPIC_LOOKBACK_BLOCKS,
    ANTHROPIC_MAX_BREAKPOINTS,
    FakeAnthropic,
    anthropic_blocks,
)
from tokenpilot_proxy.demo.base import (
    CHARS_PER_TOKEN,
    Fault,
    LocalServer,
    LoopThread,
    Recorded,
    Reply,
    Responder,
    ToolCall,
    common_prefix_len,
    prompt_text,
)
from tokenpilot_proxy.demo.gemini_upstream import FakeGemini, gemini_prompt_text
from tokenpilot_proxy.demo.openai_upstream import FakeUpstream, responses_prompt_text

__all__ = [
    "ANTHROPIC_LOOKBACK_BLOCKS",
    "ANTHROPIC_MAX_BREAKPOINTS",
    "CHARS_PER_TOKEN",
    "FakeAnthropic",
    "FakeGemini",
    "FakeUpstream",
    "Fault",
    "LocalServer",
    "LoopThread",
    "Recorded",
    "Reply",
    "Responder",
    "ToolCall",
    "anthropic_blocks",
    "common_prefix_len",
    "gemini_prompt_text",
    "prompt_text",
    "responses_prompt_text",
]
