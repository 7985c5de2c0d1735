"""What a metric's score means: its range and which way is better."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    low: float
    high: float | None
    higher_is_better: bool = True

    def describe(self) -> str:
        top = "unbounded" if self.high is None else f"{self.high:g}"
        return f"{self.low:g} to {top}"


SCALES: dict[str, Scale] = {
    "faithfulness": Scale(0.0, 1.0),
    "correctness": Scale(1.0, 5.0),
    "rubric": Scale(1.0, 5.0),
    "keywords": Scale(0.0, 1.0),
    "similarity": Scale(-1.0, 1.0),
    # answer perplexity: 1 is a certain model, higher is less sure
    "confidence": Scale(1.0, None, higher_is_better=False),
}


def scale_of(metric: str) -> Scale:
    return SCALES.get(metric, Scale(0.0, 1.0))
