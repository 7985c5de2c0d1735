"""Confidence from token log-probabilities: how sure the model was of the value it chose."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence


def value_probabilities(raw: str, tokens: Sequence[tuple[str, float]], key: str) -> list[float]:
    """The probability of the first token of each value of ``"key":`` in a JSON completion.

    ``tokens`` are the completion's tokens with their logprobs, in order; joined they spell
    ``raw``. For ``{"score": 4}`` and key ``score`` this is the probability of the token "4".
    """
    return [p for _, p in located_probabilities(raw, tokens, key)]


def located_probabilities(
    raw: str, tokens: Sequence[tuple[str, float]], key: str
) -> list[tuple[int, float]]:
    """Like :func:`value_probabilities`, with each value's character offset in ``raw``."""
    if "".join(token for token, _ in tokens) != raw:
        return []
    starts, offset = [], 0
    for token, _ in tokens:
        starts.append(offset)
        offset += len(token)
    found = []
    for match in re.finditer(rf'"{re.escape(key)}"\s*:\s*', raw):
        position = match.end()
        for index in range(len(tokens) - 1, -1, -1):
            if starts[index] <= position < starts[index] + max(len(tokens[index][0]), 1):
                found.append((position, math.exp(tokens[index][1])))
                break
    return found


def perplexity(logprobs: Sequence[float]) -> float:
    """exp of the mean negative log-probability: 1.0 is certain, higher is less sure."""
    if not logprobs:
        raise ValueError("perplexity needs at least one token log-probability")
    return math.exp(-sum(logprobs) / len(logprobs))
