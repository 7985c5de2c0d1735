"""Prices that turn tokens into money.

A small table of common models ships with ragjury (:data:`BUILTIN_PRICES`, USD per million
tokens, as of :data:`PRICES_AS_OF`); a ``[prices]`` table in ragjury.toml and ``--prices FILE``
(TOML or JSON) add models or override these. A model without a price has an unknown cost,
never a cost of 0.

A price file maps model names to input and output prices, at the top level or under a
``prices`` key::

    [prices]
    "gpt-4o-mini" = { input = 0.15, output = 0.60 }
    "my-vllm-model" = { input = 0, output = 0 }
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from ragjury._json import JSONData
from ragjury.errors import ConfigurationError

PRICES_AS_OF = "2026-03-21"
"""The date of the OpenAI standard-tier prices below (https://openai.com/api/pricing). They were
checked against copies of that page published between March and June 2026, which agree."""


class BatchPrice(BaseModel):
    """USD per million tokens through a batch API."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, description="USD per million prompt (input) tokens.")
    output: float = Field(default=0.0, ge=0, description="USD per million completion tokens.")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000


class ModelPrice(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, description="USD per million prompt (input) tokens.")
    output: float = Field(default=0.0, ge=0, description="USD per million completion tokens.")
    batch: BatchPrice | None = Field(
        default=None,
        description="USD per million tokens through the batch API (--batch); "
        "default: half the direct price, OpenAI's batch discount.",
    )

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000

    def batch_cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        if self.batch is not None:
            return self.batch.cost(prompt_tokens, completion_tokens)
        return self.cost(prompt_tokens, completion_tokens) * BATCH_DISCOUNT


BATCH_DISCOUNT = 0.5
"""What a batch-answered token costs, of the direct price, for a model with no ``batch``
price (OpenAI's Batch API is half price)."""


BUILTIN_PRICES: dict[str, ModelPrice] = {
    "gpt-5": ModelPrice(input=1.25, output=10.00),
    "gpt-5-mini": ModelPrice(input=0.25, output=2.00),
    "gpt-5-nano": ModelPrice(input=0.05, output=0.40),
    "gpt-4o-mini": ModelPrice(input=0.15, output=0.60),
    "gpt-4o": ModelPrice(input=2.50, output=10.00),
    "gpt-4.1-nano": ModelPrice(input=0.10, output=0.40),
    "gpt-4.1-mini": ModelPrice(input=0.40, output=1.60),
    "gpt-4.1": ModelPrice(input=2.00, output=8.00),
    "o4-mini": ModelPrice(input=1.10, output=4.40),
    "text-embedding-3-small": ModelPrice(input=0.02),
    "text-embedding-3-large": ModelPrice(input=0.13),
}

LOCAL_PREFIX = "local:"
"""How the in-process backend names its model (``local:SmolLM2-135M-Instruct.Q4_1.gguf``)."""
_FREE = ModelPrice(input=0.0, output=0.0)
_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")  # gpt-4o-mini-2024-07-18 is priced as gpt-4o-mini
_FILE_ADAPTER = pydantic.TypeAdapter(dict[str, ModelPrice])


class PriceTable:
    """The built-in prices with ``overrides`` on top."""

    def __init__(self, overrides: Mapping[str, ModelPrice] | None = None) -> None:
        self._prices = {**BUILTIN_PRICES, **(overrides or {})}

    def price(self, model: str) -> ModelPrice | None:
        """The price of ``model`` (a dated snapshot falls back to its base name), or None.

        A GGUF model run in-process (``local:<file>``) costs nothing per token unless a price
        is given for it."""
        found = self._prices.get(model)
        if found is None:
            found = self._prices.get(_SNAPSHOT.sub("", model))
        if found is None and model.startswith(LOCAL_PREFIX):
            found = _FREE
        return found

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        price = self.price(model)
        return None if price is None else price.cost(prompt_tokens, completion_tokens)

    def batch_cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The cost through a batch API: the model's ``batch`` price, else half its price."""
        price = self.price(model)
        return None if price is None else price.batch_cost(prompt_tokens, completion_tokens)


def load_price_file(path: Path) -> dict[str, ModelPrice]:
    """Read a TOML or JSON price file; a :class:`ConfigurationError` names what is wrong."""
    where = f"the price file {str(path)!r}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {where}: {exc.strerror}; check the --prices path"
        ) from exc
    data: JSONData  # a TOML date would be refused below, as any value not a price
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        raise ConfigurationError(
            f"{where} is not valid {kind}: {exc}; a .json file is read as JSON, anything "
            "else as TOML"
        ) from exc
    if isinstance(data, dict) and isinstance(data.get("prices"), dict):
        data = data["prices"]
    return parse_prices(data, where)


def parse_prices(data: JSONData, where: str) -> dict[str, ModelPrice]:
    try:
        return _FILE_ADAPTER.validate_python(data)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'the top level'}: {error['msg']} "
            f"(got {error.get('input')!r})"
            for error in exc.errors()
        )
        raise ConfigurationError(
            f"{where} has a bad price: {problems}. Each model needs USD per million tokens, "
            'e.g. "gpt-4o-mini" = { input = 0.15, output = 0.60 }'
        ) from exc
