"""Token, request and cost accounting: per call, per stage, per run. Every attempt counts.

A cost is None (unknown) as soon as one response came from a model without a price: an
unknown cost is never reported as 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

IN_FLIGHT = "in flight: sent, not yet answered"
"""The error of a call's record while it is in flight (what a killed run leaves)."""


@dataclass
class StageUsage:
    """Totals for one stage (agent role) of a run."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    failed_calls: int = 0
    latency_seconds: float = 0.0
    model: str | None = None
    cost_usd: float | None = 0.0
    batch_requests: int = 0
    """Of ``requests``, those answered through a batch API (``--batch``)."""
    batch_prompt_tokens: int = 0
    batch_completion_tokens: int = 0
    batch_cost_usd: float | None = 0.0
    """Of ``cost_usd``, what the batch-answered requests cost."""

    def add_cost(self, cost: float | None) -> None:
        self.cost_usd = None if cost is None or self.cost_usd is None else self.cost_usd + cost

    def add_batch_cost(self, cost: float | None) -> None:
        total = self.batch_cost_usd
        self.batch_cost_usd = None if cost is None or total is None else total + cost

    def as_dict(self) -> dict[str, int | float | str | None]:
        return {
            "llm_calls": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "structured_calls": self.calls,
            "failed_calls": self.failed_calls,
            "latency_seconds": round(self.latency_seconds, 3),
            "model": self.model,
            "cost_usd": _round_cost(self.cost_usd),
        }


@dataclass
class CallStats:
    """What one structured call cost: every HTTP request it sent, retries included."""

    stage: str
    model: str | None = None
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_seconds: float = 0.0
    cost_usd: float | None = 0.0
    """USD over every response of the call; None when the model has no price."""
    last_raw_output: str | None = None
    statuses: list[int | str] = field(default_factory=list)
    logprobs: list[tuple[str, float]] | None = None
    """Token log-probabilities of the last completion, when the endpoint returned them."""
    record: int | None = None
    """The call's row in the store while it is in flight (recorded when sent)."""


@dataclass
class UsageLedger:
    """Running totals for a run, by stage."""

    stages: dict[str, StageUsage] = field(default_factory=dict)

    def stage(self, name: str) -> StageUsage:
        return self.stages.setdefault(name, StageUsage())

    @property
    def requests(self) -> int:
        return sum(s.requests for s in self.stages.values())

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.stages.values())

    @property
    def completion_tokens(self) -> int:
        return sum(s.completion_tokens for s in self.stages.values())

    @property
    def latency_seconds(self) -> float:
        return sum(s.latency_seconds for s in self.stages.values())

    @property
    def cost_usd(self) -> float | None:
        """USD for the run so far; None if any stage used a model without a price."""
        costs = [s.cost_usd for s in self.stages.values()]
        return None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)

    def unpriced_models(self) -> list[str]:
        return sorted({s.model or "?" for s in self.stages.values() if s.cost_usd is None})

    def totals(self) -> dict[str, int | float | None]:
        """The run-level figures every summary carries."""
        return {
            "llm_calls": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "llm_latency_seconds": round(self.latency_seconds, 3),
            "cost_usd": _round_cost(self.cost_usd),
        }

    def by_stage(self) -> dict[str, dict[str, int | float | str | None]]:
        return {name: usage.as_dict() for name, usage in sorted(self.stages.items())}

    def by_mode(self) -> dict[str, ModeTotals]:
        """``calls_by_mode``: the run's calls, tokens and cost sent directly and answered
        through a batch API (``--batch``); a cost None when a model had no price."""
        stages = list(self.stages.values())

        def cost(values: list[float | None]) -> float | None:
            return (
                None
                if any(c is None for c in values)
                else _round_cost(sum(c or 0.0 for c in values))
            )

        batch = ModeTotals(
            llm_calls=sum(s.batch_requests for s in stages),
            prompt_tokens=sum(s.batch_prompt_tokens for s in stages),
            completion_tokens=sum(s.batch_completion_tokens for s in stages),
            cost_usd=cost([s.batch_cost_usd for s in stages]),
        )
        total = self.cost_usd
        direct_cost = (
            None
            if total is None or batch["cost_usd"] is None
            else _round_cost(max(total - batch["cost_usd"], 0.0))
        )
        direct = ModeTotals(
            llm_calls=self.requests - batch["llm_calls"],
            prompt_tokens=self.prompt_tokens - batch["prompt_tokens"],
            completion_tokens=self.completion_tokens - batch["completion_tokens"],
            cost_usd=direct_cost,
        )
        return {"direct": direct, "batch": batch}


class ModeTotals(TypedDict):
    """A run's calls in one mode (direct or batch), as ``calls_by_mode`` gives them."""

    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None


def _round_cost(cost: float | None) -> float | None:
    return None if cost is None else round(cost, 6)
