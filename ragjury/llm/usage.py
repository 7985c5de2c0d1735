"""Token and request accounting: per call, per stage, per run. Every attempt counts."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StageUsage:
    """Totals for one stage (agent role) of a run."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    failed_calls: int = 0
    latency_seconds: float = 0.0

    def as_dict(self) -> dict[str, int | float]:
        return {
            "llm_calls": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "structured_calls": self.calls,
            "failed_calls": self.failed_calls,
            "latency_seconds": round(self.latency_seconds, 3),
        }


@dataclass
class CallStats:
    """What one structured call cost: every HTTP request it sent, retries included."""

    stage: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_seconds: float = 0.0
    last_raw_output: str | None = None
    statuses: list[int | str] = field(default_factory=list)
    logprobs: list[tuple[str, float]] | None = None
    """Token log-probabilities of the last completion, when the endpoint returned them."""


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

    def by_stage(self) -> dict[str, dict[str, int | float]]:
        return {name: usage.as_dict() for name, usage in sorted(self.stages.items())}
