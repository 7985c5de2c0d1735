"""RetrievalScorer: hit rate, MRR, recall, precision and nDCG at each k, with no LLM.

The rules (which retrieved context finds which reference context, duplicates, k beyond the
list) are in :mod:`ragjury.evaluation.retrieval`. A sample's score is its reciprocal rank
(1 / the rank of the first relevant context, 0 when none is); it passes when a reference
context is found within the largest k.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field, JsonValue

from ragjury._json import JSONData
from ragjury.agents.base import Step
from ragjury.evaluation.retrieval import rank_retrieval
from ragjury.metrics.declaration import FRACTION, Metric
from ragjury.schemas import MetricResult, MetricScored, SampleSubmitted

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions


class RetrievalScorer:
    role: ClassVar[str] = "retrieval_scorer"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, options: EvaluationOptions) -> None:
        self._ks = options.k

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if RETRIEVAL.name not in event.metrics:
            return []
        result = self._score(event)
        return [MetricScored(sample_id=event.sample.id, metric=RETRIEVAL.name, result=result)]

    def _score(self, event: SampleSubmitted) -> MetricResult:
        sample = event.sample
        if not sample.reference_contexts and not sample.reference_context_ids:
            return MetricResult.not_applicable(
                "the sample names no reference contexts (reference_contexts or "
                "reference_context_ids) to look for"
            )
        if not sample.contexts and sample.answer is None:
            return MetricResult.not_applicable(
                "nothing was retrieved: the sample has no contexts and no answer (give "
                "--target to ask your RAG system)"
            )
        ranked = rank_retrieval(
            sample.contexts,
            sample.context_ids,
            sample.reference_contexts,
            sample.reference_context_ids,
        )
        if sample.contexts and ranked.unmatchable == len(sample.contexts):
            return MetricResult.not_applicable(
                "the retrieved contexts carry no ids and the sample has no reference context "
                "text to match them by; give the contexts ids, or reference_contexts"
            )
        largest = max(self._ks)
        found = ranked.at(largest)
        first = ranked.first_relevant
        total = len(ranked.references)
        where = f"first reference context at rank {first}" if first else "no reference context"
        reason = (
            f"{where} of {len(sample.contexts)} retrieved; "
            f"{round(found['recall'] * total)} of {total} found in the top {largest}"
        )
        return MetricResult(
            outcome="scored",
            score=1 / first if first else 0.0,
            passing=found["hit"] == 1.0,
            reason=reason,
            details=ranked.details(self._ks),
        )


class RetrievalResult(MetricResult):
    """``score`` = the reciprocal rank of the first relevant context; ``at_k`` the figures
    (hit, mrr, recall, precision, ndcg) at each k; ``references`` and ``retrieved`` the
    ranks (see :mod:`ragjury.evaluation.retrieval`)."""

    mrr: float | None = None
    first_relevant_rank: int | None = None
    at_k: dict[str, dict[str, float]] = Field(default_factory=dict)
    references: tuple[dict[str, JsonValue], ...] = ()
    retrieved: tuple[dict[str, JsonValue], ...] = ()


_FIGURES = ("hit_rate", "mrr", "recall", "precision", "ndcg")


@dataclass
class RetrievalTally:
    """The retrieval figures at each k: the means over the scored samples."""

    samples: int = 0
    sums: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, result: MetricResult) -> None:
        if result.outcome != "scored":
            return
        self.samples += 1
        for k, figures in result.details["at_k"].items():
            sums = self.sums.setdefault(k, dict.fromkeys(_FIGURES, 0.0))
            for name, value in figures.items():
                sums["hit_rate" if name == "hit" else name] += value

    def figures(self) -> dict[str, JSONData]:
        """``at_k``: per k (as text, in increasing order), the means of hit, mrr, recall,
        precision and ndcg over the scored samples."""
        at_k = {
            k: {name: round(total / self.samples, 4) for name, total in sums.items()}
            for k, sums in sorted(self.sums.items(), key=lambda item: int(item[0]))
        }
        return {"at_k": at_k}


_REFERENCE_FIELDS = ("reference_contexts", "reference_context_ids")

RETRIEVAL = Metric(
    name="retrieval",
    description="Did retrieval find the reference contexts: hit rate, MRR, recall, precision "
    "and nDCG at each k (the score is the reciprocal rank of the first found).",
    scale=FRACTION,
    threshold=None,
    inputs=("contexts",),
    optional=("context_ids", *_REFERENCE_FIELDS),
    agents={"retrieval_scorer": lambda c: Step(RetrievalScorer(c.options))},
    llm=False,
    pass_rule="a reference context in the top k (the largest k)",
    result_type=RetrievalResult,
    tally=RetrievalTally,
    by_default=lambda filled: bool(filled & set(_REFERENCE_FIELDS)),
    order=70,
)
