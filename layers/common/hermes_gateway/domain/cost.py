"""Estimated cost of a turn from its token counts and a list-price table.

The table (`model_prices.json`, next to this module) names its date and sources. A model is
matched by its name without a provider or region prefix (`us.anthropic.claude-3-5-sonnet-…` and
`openai/gpt-4o` both match), exactly or by the longest listed prefix (`gpt-4o-2024-08-06` is
`gpt-4o`). `cost_status`: `estimated` (priced from the table), `unknown` (not in the table: the
amount is 0 and says nothing), `included` (a free provider such as the local echo model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hermes_gateway.domain.sessions import TokenUsage

PRICE_FILE = Path(__file__).with_name("model_prices.json")
_PREFIXES = ("us.", "eu.", "apac.", "global.", "anthropic.", "openai.", "openai/", "anthropic/", "bedrock/")


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0


@dataclass(frozen=True)
class PriceTable:
    models: dict[str, Price]
    included_providers: frozenset[str]
    as_of: str


@dataclass(frozen=True)
class CostEstimate:
    usd: float
    status: str  # estimated | unknown | included


@cache
def load_prices(path: Path = PRICE_FILE) -> PriceTable:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    models = {name.lower(): Price(**fields) for name, fields in data["models"].items()}
    return PriceTable(models, frozenset(data.get("included_providers", ())), str(data["prices_as_of"]))


def normalize_model(model: str) -> str:
    name = model.strip().lower()
    stripped = True
    while stripped:
        stripped = False
        for prefix in _PREFIXES:
            if name.startswith(prefix):
                name, stripped = name[len(prefix) :], True
    return name


def price_for(model: str | None, table: PriceTable) -> Price | None:
    if not model:
        return None
    name = normalize_model(model)
    if name in table.models:
        return table.models[name]
    matches = [listed for listed in table.models if name.startswith(listed + "-") or name.startswith(listed + ":")]
    return table.models[max(matches, key=len)] if matches else None


def estimate_cost(
    usage: TokenUsage, model: str | None, provider: str | None, table: PriceTable | None = None
) -> CostEstimate:
    table = table or load_prices()
    if provider and provider in table.included_providers:
        return CostEstimate(0.0, "included")
    price = price_for(model, table)
    if price is None:
        return CostEstimate(0.0, "unknown")
    usd = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / 1_000_000
    return CostEstimate(round(usd, 8), "estimated")


def session_cost_status(estimated_turns: int, unknown_turns: int, included_turns: int) -> str:
    """A session's status from its turns' statuses (counted, so recording a turn is a pure add):
    one unknown turn makes the total a lower bound (`unknown`); `estimated` beats `included`;
    no turn recorded yet is `unknown`."""
    if unknown_turns > 0:
        return "unknown"
    if estimated_turns > 0:
        return "estimated"
    return "included" if included_turns > 0 else "unknown"
