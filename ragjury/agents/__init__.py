"""The agents: one module per role. An agent never touches the bus.

The modules are imported when first asked for (``from ragjury.agents import Generator``), so
importing one agent, or :mod:`ragjury.agents.base`, does not import them all; the metric
registry (:mod:`ragjury.metrics.registry`) finds every module here by walking the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragjury._lazy import lazy_names

if TYPE_CHECKING:
    from ragjury.agents.aggregator import Aggregator
    from ragjury.agents.answer_relevance import AnswerRelevanceJudge
    from ragjury.agents.base import Agent
    from ragjury.agents.chunker import Chunker
    from ragjury.agents.collector import Collector
    from ragjury.agents.context_judges import ContextPrecisionJudge, ContextRelevanceJudge
    from ragjury.agents.critics import GroundednessCritic, RelevanceCritic, StandaloneCritic
    from ragjury.agents.deduplicator import Deduplicator
    from ragjury.agents.generator import Generator
    from ragjury.agents.judges import CorrectnessJudge, RubricJudge
    from ragjury.agents.reference_writer import ReferenceWriter
    from ragjury.agents.retrieval import RetrievalScorer
    from ragjury.agents.sample_aggregator import SampleAggregator
    from ragjury.agents.scorers import ConfidenceScorer, KeywordChecker, SimilarityScorer
    from ragjury.agents.splitter import StatementSplitter
    from ragjury.agents.verdict_judge import VerdictJudge

_MODULES = {
    "Agent": "base",
    "Aggregator": "aggregator",
    "AnswerRelevanceJudge": "answer_relevance",
    "Chunker": "chunker",
    "Collector": "collector",
    "ConfidenceScorer": "scorers",
    "ContextPrecisionJudge": "context_judges",
    "ContextRelevanceJudge": "context_judges",
    "CorrectnessJudge": "judges",
    "Deduplicator": "deduplicator",
    "Generator": "generator",
    "GroundednessCritic": "critics",
    "KeywordChecker": "scorers",
    "ReferenceWriter": "reference_writer",
    "RelevanceCritic": "critics",
    "RetrievalScorer": "retrieval",
    "RubricJudge": "judges",
    "SampleAggregator": "sample_aggregator",
    "SimilarityScorer": "scorers",
    "StandaloneCritic": "critics",
    "StatementSplitter": "splitter",
    "VerdictJudge": "verdict_judge",
}


__getattr__ = lazy_names(__name__, {name: f"{__name__}.{m}" for name, m in _MODULES.items()})


__all__ = [
    "Agent",
    "Aggregator",
    "AnswerRelevanceJudge",
    "Chunker",
    "Collector",
    "ConfidenceScorer",
    "ContextPrecisionJudge",
    "ContextRelevanceJudge",
    "CorrectnessJudge",
    "Deduplicator",
    "Generator",
    "GroundednessCritic",
    "KeywordChecker",
    "ReferenceWriter",
    "RelevanceCritic",
    "RetrievalScorer",
    "RubricJudge",
    "SampleAggregator",
    "SimilarityScorer",
    "StandaloneCritic",
    "StatementSplitter",
    "VerdictJudge",
]
