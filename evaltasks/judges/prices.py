"""Prices of judge models, US dollars per million tokens, and the cost of one reply.

:data:`PRICES` holds OpenAI's list prices (standard tier, no batch or cached-input discounts) of the chat models
a judge is most often run with. Source: platform.openai.com/docs/pricing as quoted by pricing guides of
April-June 2026 (aumiqx.com "OpenAI API Pricing Decoded", aimodelcalc.pages.dev "OpenAI API Pricing
Explained", deploybase.ai "OpenAI Pricing"), checked 2026-12-01. A user extends or overrides the table per
judge with the ``prices`` option (``{model: {input: USD, output: USD}}`` per million tokens) or
``price_per_million_input_tokens`` / ``price_per_million_output_tokens``.

A model missing from the table costs 0: its costs are undercounted and the budget (``--max-cost``) cannot
protect against it, which :class:`PriceTable` logs once per model as a warning.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evaltasks.errors import quote

log = logging.getLogger("evaltasks.judges")

PRICES: dict[str, dict[str, float]] = {  # USD per 1M tokens: input (prompt), output (completion)
    "gpt-4o-mini": {"input": 0.15, "output": 0.60},
    "gpt-4o": {"input": 2.50, "output": 10.00},
    "gpt-4.1": {"input": 2.00, "output": 8.00},
    "gpt-4.1-mini": {"input": 0.40, "output": 1.60},
    "gpt-4.1-nano": {"input": 0.10, "output": 0.40},
    "o3-mini": {"input": 1.10, "output": 4.40},
    "gpt-3.5-turbo": {"input": 0.50, "output": 1.50},
}

_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")
"""A dated snapshot's suffix (``gpt-4o-mini-2024-07-18``): a model missing from the tables is priced as the
model without it."""

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _price(value: Any, label: str) -> float:
    """``value`` as a non-negative finite price. Raises ValueError naming ``label``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{label} must be a non-negative number of US dollars per million tokens, got {quote(value)}")
    return float(value)


@dataclass(frozen=True)
class Price:
    """US dollars per million input (prompt) and output (completion) tokens of one model.

    Attributes:
        input: USD per 1M prompt tokens.
        output: USD per 1M completion tokens.
        known: False when the model is in no table (both prices 0: costs undercount).
    """

    input: float
    output: float
    known: bool = True

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """US dollars for the given tokens."""
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1e6


def resolve_price(
    model: str,
    prices: Mapping[str, Any] | None = None,
    input_price: float | None = None,
    output_price: float | None = None,
) -> Price:
    """The price of ``model``: ``input_price`` / ``output_price`` when given, else the user's ``prices`` table,
    else :data:`PRICES`; a dated snapshot (``gpt-4o-mini-2024-07-18``) in neither is priced as its base model
    (the name without the trailing ``-YYYY-MM-DD``); unknown: 0 (logged once as a warning, see the module
    docstring).

    Raises:
        ValueError: a malformed ``prices`` table (an entry must give both ``input`` and ``output``; the message
            names the model) or a negative / non-numeric price.
    """
    table: dict[str, dict[str, float]] = {name: dict(p) for name, p in PRICES.items()}
    if prices is not None:
        if not isinstance(prices, Mapping):
            raise ValueError(f"prices must be a mapping of model to {{input, output}}, got {type(prices).__name__}")
        for name, entry in prices.items():
            if not isinstance(entry, Mapping) or set(entry) != {"input", "output"}:
                raise ValueError(
                    f"prices[{quote(name)}] must be a mapping with both 'input' and 'output' "
                    f"(US dollars per million tokens), got {quote(entry)}"
                )
            merged = dict(table.get(str(name), {}))
            merged.update({k: _price(v, f"prices[{quote(name)}].{k}") for k, v in entry.items()})
            table[str(name)] = merged
    found = table.get(model)
    if found is None and _DATED.search(model):  # a dated snapshot costs what its base model costs
        found = table.get(_DATED.sub("", model))
    if input_price is not None:
        input_price = _price(input_price, "price_per_million_input_tokens")
    if output_price is not None:
        output_price = _price(output_price, "price_per_million_output_tokens")
    if found is None and input_price is None and output_price is None:
        with _warned_lock:
            first = model not in _warned
            _warned.add(model)
        if first:
            log.warning(
                "no price for judge model %r: its costs count as $0, so costs are undercounted and "
                "--max-cost cannot limit its spend; set the judge option prices: {%s: {input: ..., "
                "output: ...}} (US dollars per million tokens)",
                model,
                model,
            )
        return Price(0.0, 0.0, known=False)
    found = found or {}
    return Price(
        input_price if input_price is not None else float(found.get("input", 0.0)),
        output_price if output_price is not None else float(found.get("output", 0.0)),
    )
