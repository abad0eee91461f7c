"""List prices of models, to put dollars on real usage.

The proxy's dashboard and `/metrics` price each session at its model's list price
(`prices_for`), looked up in this order: the user's own prices (a JSON file,
`load_price_file`, `tokenpilot serve --prices`); `genai-prices`, a maintained offline list
with cache-read and cache-write prices per model and provider (Python 3.11 and later); the
snapshot below (`TABLE`, see `AS_OF`: for Python 3.10, and for dated model ids the list
does not match). A model none of them knows is priced at the paper's defaults
(`DEFAULT_PRICES`, which the bench's tables use) and said so (`known` False), never
silently at zero.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .pricing import DEFAULT_PRICES, Prices, cost

AS_OF = "2026-11"  # the month these list prices were last checked against the providers' pages


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """A model's prices ($ per million tokens) and the cache profile its writes follow."""

    prices: Prices
    profile: str  # "openai", "anthropic", "deepseek": how a cache write is charged (pricing.py)
    known: bool = True


def _p(miss: float, hit: float, out: float, write: float | None = None) -> Prices:
    return Prices(hit=hit, miss=miss, output=out, write=write)


# Longest prefix wins: "gpt-4.1-mini-2025-04-14" is priced as "gpt-4.1-mini", not "gpt-4.1".
# (uncached input, cached input, output[, cache write]) in $ per million tokens.
TABLE: dict[str, ModelPrice] = {
    # OpenAI: cached input is a discount, writes cost nothing extra
    # A newer family needs its own row: "gpt-5.4" would otherwise be priced as "gpt-5".
    "gpt-5.5": ModelPrice(_p(5.00, 0.50, 30.00), "openai"),
    "gpt-5.4": ModelPrice(_p(2.50, 0.25, 15.00), "openai"),
    "gpt-5.4-mini": ModelPrice(_p(0.75, 0.075, 4.50), "openai"),  # the paper's model
    "gpt-5.4-nano": ModelPrice(_p(0.20, 0.02, 1.25), "openai"),
    "gpt-5.2": ModelPrice(_p(1.75, 0.175, 14.00), "openai"),
    "gpt-5.1": ModelPrice(_p(1.25, 0.125, 10.00), "openai"),
    "gpt-5-nano": ModelPrice(_p(0.05, 0.005, 0.40), "openai"),
    "gpt-5-mini": ModelPrice(_p(0.25, 0.025, 2.00), "openai"),
    "gpt-5": ModelPrice(_p(1.25, 0.125, 10.00), "openai"),
    "gpt-4.1-nano": ModelPrice(_p(0.10, 0.025, 0.40), "openai"),
    "gpt-4.1-mini": ModelPrice(_p(0.40, 0.10, 1.60), "openai"),
    "gpt-4.1": ModelPrice(_p(2.00, 0.50, 8.00), "openai"),
    "gpt-4o-mini": ModelPrice(_p(0.15, 0.075, 0.60), "openai"),
    "gpt-4o": ModelPrice(_p(2.50, 1.25, 10.00), "openai"),
    "o4-mini": ModelPrice(_p(1.10, 0.275, 4.40), "openai"),
    "o3": ModelPrice(_p(2.00, 0.50, 8.00), "openai"),
    # Anthropic: reads 0.1x, 5-minute writes 1.25x of uncached input
    "claude-opus-4-6": ModelPrice(_p(5.00, 0.50, 25.00, 6.25), "anthropic"),
    "claude-opus-4-5": ModelPrice(_p(5.00, 0.50, 25.00, 6.25), "anthropic"),
    "claude-opus-4-1": ModelPrice(_p(15.00, 1.50, 75.00, 18.75), "anthropic"),
    "claude-opus-4": ModelPrice(_p(15.00, 1.50, 75.00, 18.75), "anthropic"),
    "claude-sonnet-4": ModelPrice(_p(3.00, 0.30, 15.00, 3.75), "anthropic"),
    "claude-3-7-sonnet": ModelPrice(_p(3.00, 0.30, 15.00, 3.75), "anthropic"),
    "claude-haiku-4-5": ModelPrice(_p(1.00, 0.10, 5.00, 1.25), "anthropic"),
    "claude-3-5-haiku": ModelPrice(_p(0.80, 0.08, 4.00, 1.00), "anthropic"),
    # DeepSeek: a cache hit is a tenth of a miss, writes are free
    "deepseek-chat": ModelPrice(_p(0.28, 0.028, 0.42), "deepseek"),
    "deepseek-reasoner": ModelPrice(_p(0.28, 0.028, 0.42), "deepseek"),
}

UNKNOWN = ModelPrice(DEFAULT_PRICES, "openai", known=False)


class PriceFileError(ValueError):
    """A price file that cannot be read or has a malformed entry (named)."""


def _bare(model: str) -> str:
    """`openai/gpt-4o` or `anthropic:claude-sonnet-4-5` -> the model's own name, lower case."""
    name = model.strip().lower()
    for sep in ("/", ":"):
        name = name.rsplit(sep, 1)[-1] if sep in name else name
    return name


def prices_for(model: str | None, table: Mapping[str, ModelPrice] | None = None) -> ModelPrice:
    """`model`'s prices: the longest prefix of it in `table` (the user's own prices), else
    the maintained list's entry (`listed_price`), else the longest prefix in the snapshot
    `TABLE`; provider prefixes (`openai/`, `anthropic:`) are ignored."""
    if not model:
        return UNKNOWN
    name = _bare(model)
    if table is not None and (own := _longest(name, table)) is not None:
        return own
    return listed_price(name) or _longest(name, TABLE) or UNKNOWN


def _longest(name: str, table: Mapping[str, ModelPrice]) -> ModelPrice | None:
    best = max((k for k in table if name.startswith(k.lower())), key=len, default=None)
    return table[best] if best is not None else None


_PROFILES = {"anthropic": "anthropic", "deepseek": "deepseek"}  # how each provider charges a cache write


@functools.lru_cache(maxsize=256)
def _listed(name: str) -> Any:
    """`genai-prices`' entry for a model (its prices and its model record), or None when the
    package is not installed (Python 3.10) or does not know the model."""
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        return None
    try:
        return calc_price(Usage(input_tokens=0, output_tokens=0), model_ref=name)
    except (LookupError, ValueError):
        return None


@functools.lru_cache(maxsize=256)
def listed_price(name: str) -> ModelPrice | None:
    """The model's list price from `genai-prices` (offline data), or None when the package
    is not installed (Python 3.10) or does not know the model. Tiered prices: the base tier."""
    found = _listed(name)
    if found is None:
        return None
    mp = found.model_price

    def rate(value: object) -> float | None:
        value = getattr(value, "base", value)
        return float(value) if value is not None else None  # type: ignore[arg-type]

    miss, out = rate(mp.input_mtok), rate(mp.output_mtok)
    if miss is None or out is None:
        return None
    hit = rate(mp.cache_read_mtok)
    prices = _p(miss, miss if hit is None else hit, out, rate(mp.cache_write_mtok))
    return ModelPrice(prices, _PROFILES.get(found.provider.id, "openai"))


@functools.lru_cache(maxsize=256)
def context_window(model: str | None) -> int | None:
    """The model's context window in tokens (`genai-prices`), or None when unknown."""
    found = _listed(_bare(model)) if model else None
    if found is None:
        return None
    window = getattr(found.model, "context_window", None)
    return int(window) if isinstance(window, int) and window > 0 else None


def warm() -> None:
    """Load `genai-prices` and its table now (about 0.1 s, once per process): a proxy does
    at start, so that its first call does not pay for it."""
    _listed("gpt-4o")


def sendable_saving(saved: int, sent: int, model: str | None) -> int:
    """The tokens a call kept out of its prompt that could really have been sent: a request
    over the model's context window would have been refused, not billed, so what exceeds
    the window saved no money."""
    window = context_window(model)
    return saved if window is None else max(0, min(saved, window - sent))


def load_price_file(path: Path, base: Mapping[str, ModelPrice] | None = None) -> dict[str, ModelPrice]:
    """`base` (the built-in table) with the file's entries over it.

    The file: `{"model-prefix": {"input": 3.0, "cached_input": 0.3, "output": 15.0,
    "cache_write": 3.75, "profile": "anthropic"}}`, $ per million tokens; `cache_write`
    and `profile` are optional (profile "openai": writes cost `input`)."""
    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PriceFileError(f"price file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise PriceFileError(f"price file {path}: must be a JSON object of model -> prices")
    out = dict(TABLE if base is None else base)
    for model, entry in data.items():
        out[str(model).lower()] = _entry(path, str(model), entry)
    return out


def _entry(path: Path, model: str, entry: Any) -> ModelPrice:
    if not isinstance(entry, dict):
        raise PriceFileError(f"price file {path}: {model!r} must be an object")
    values: dict[str, float] = {}
    for key in ("input", "cached_input", "output", "cache_write"):
        v = entry.get(key)
        if v is None and key == "cache_write":
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < 1e6:
            raise PriceFileError(
                f"price file {path}: {model!r}.{key} must be a price in $ per million tokens"
            )
        values[key] = float(v)
    profile = entry.get("profile", "openai")
    if profile not in ("openai", "anthropic", "deepseek"):
        raise PriceFileError(f"price file {path}: {model!r}.profile must be openai, anthropic or deepseek")
    prices = _p(values["input"], values["cached_input"], values["output"], values.get("cache_write"))
    return ModelPrice(prices, profile)


def spent_and_saved(
    price: ModelPrice, prompt: int, cached: int, output: int, tokens_saved: int
) -> tuple[float, float]:
    """Dollars paid for the usage the provider reported, and dollars TokenPilot's reduction
    saved: the tokens it kept out of the prompt, priced at the session's own mix of cache
    hits and misses (a removed token would have been a hit as often as the ones sent were).
    The cache that stabilisation kept is not counted: that needs a run without TokenPilot."""
    cached = min(cached, prompt)
    spent = cost(cached, prompt - cached, 0, output, price.prices, price.profile)
    hit_rate = cached / prompt if prompt else 0.0
    hits = round(tokens_saved * hit_rate)
    saved = cost(hits, tokens_saved - hits, 0, 0, price.prices, price.profile)
    return spent, saved
