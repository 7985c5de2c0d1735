"""A run's spending limit: tokens and/or USD. The LLM adds every response to it; the feeders
ask :attr:`Budget.exhausted` before taking new work, and work in flight is finished."""

from __future__ import annotations

from dataclasses import dataclass

from ragjury._json import JSONData


@dataclass
class Budget:
    """``max_tokens`` (prompt + completion, every attempt), ``max_cost`` (USD); None: no limit."""

    max_tokens: int | None = None
    max_cost: float | None = None
    tokens: int = 0
    cost: float = 0.0

    def add(self, tokens: int, cost: float | None) -> None:
        self.tokens += tokens
        self.cost += cost or 0.0

    @property
    def exhausted(self) -> bool:
        return self.reason is not None

    @property
    def reason(self) -> str | None:
        """Why the budget is spent, in words, or None while it is not."""
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return f"--max-tokens {self.max_tokens} reached ({self.tokens} tokens used)"
        if self.max_cost is not None and self.cost >= self.max_cost:
            return f"--max-cost {self.max_cost:g} USD reached ({self.cost:.4f} USD spent)"
        return None

    def as_dict(self) -> dict[str, JSONData]:
        return {
            "max_tokens": self.max_tokens,
            "max_cost": self.max_cost,
            "exhausted": self.exhausted,
            "reason": self.reason,
        }
