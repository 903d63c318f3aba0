"""Judge model prices (docs/judges.md#llm-judges): dated snapshots cost their base model's price, and a price entry
needs both its input and output price.
"""

from __future__ import annotations

import pytest

from evaltasks.judges.openai import OpenAIJudge
from evaltasks.judges.prices import PRICES, resolve_price


def test_a_dated_snapshot_costs_its_base_models_price() -> None:
    price = resolve_price("gpt-4o-mini-2024-07-18")
    assert (price.input, price.output, price.known) == (
        PRICES["gpt-4o-mini"]["input"],
        PRICES["gpt-4o-mini"]["output"],
        True,
    )
    own = resolve_price("my-model-2025-01-31", {"my-model": {"input": 1.0, "output": 2.0}})
    assert (own.input, own.output) == (1.0, 2.0)
    assert not resolve_price("gpt-4o-mini-preview").known


def test_a_price_entry_needs_input_and_output() -> None:
    with pytest.raises(ValueError, match=r"prices\['my-model'\] must be a mapping with both 'input' and 'output'"):
        resolve_price("my-model", {"my-model": {"input": 1.0}})
    with pytest.raises(ValueError, match=r"prices\['gpt-4o'\]"):
        OpenAIJudge(
            "gpt-4o", {"api_key": "k", "base_url": "http://127.0.0.1:9/v1", "prices": {"gpt-4o": {"output": 3.0}}}
        )
