"""RetrievalScorer: hit rate, MRR, recall, precision and nDCG at each k, with no LLM.

The rules (which retrieved context finds which reference context, duplicates, k beyond the
list) are in :mod:`ragjury.evaluation.retrieval`. A sample's score is its reciprocal rank
(1 / the rank of the first relevant context, 0 when none is); it passes when a reference
context is found within the largest k.
"""

from __future__ import annotations

from typing import ClassVar

from ragjury.config import EvaluationOptions
from ragjury.evaluation.retrieval import rank_retrieval
from ragjury.schemas import MetricResult, MetricScored, SampleSubmitted


class RetrievalScorer:
    role: ClassVar[str] = "retrieval_scorer"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, options: EvaluationOptions) -> None:
        self._ks = options.k

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if "retrieval" not in event.metrics:
            return []
        result = self._score(event)
        return [MetricScored(sample_id=event.sample.id, metric="retrieval", result=result)]

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
