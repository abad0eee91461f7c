"""Cost model: cost = hit·p_hit + miss·p_miss + write·p_write + out·p_out (DESIGN.md §1).

Prices are $ per million tokens; the defaults are the paper's GPT-5.4-mini. A cache
write costs a multiple of an uncached input token that depends on the provider
(Anthropic 1.25× for 5-minute entries, 2× for 1-hour ones; 1× where writes are free
of surcharge), so `write` defaults to `miss` times the profile's multiplier.
"""

from __future__ import annotations

from dataclasses import dataclass

WRITE_MULTIPLIER: dict[str, float] = {
    "openai": 1.0,
    "anthropic": 1.25,
    "anthropic-1h": 2.0,
    "deepseek": 1.0,
    "gemini": 1.0,
    "vllm": 1.0,
}


@dataclass(frozen=True, slots=True)
class Prices:
    """$ per million tokens. `write` None means `miss` × the profile's write multiplier."""

    hit: float = 0.075
    miss: float = 0.75
    output: float = 4.50
    write: float | None = None

    def write_price(self, profile: str = "anthropic") -> float:
        if self.write is not None:
            return self.write
        return self.miss * WRITE_MULTIPLIER.get(profile, 1.0)


DEFAULT_PRICES = Prices()


def cost(
    hit: int,
    miss: int,
    write: int,
    output: int,
    prices: Prices = DEFAULT_PRICES,
    profile: str = "anthropic",
) -> float:
    """Dollars for one call (or totals). hit, miss and write are disjoint parts of the prompt.

    Only Anthropic-style simulations report separate writes, hence the default profile
    for pricing them.
    """
    return (
        hit * prices.hit + miss * prices.miss + write * prices.write_price(profile) + output * prices.output
    ) / 1_000_000
