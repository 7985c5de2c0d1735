"""The agents: one module per role. An agent never touches the bus."""

from ragjury.agents.aggregator import Aggregator
from ragjury.agents.base import Agent
from ragjury.agents.chunker import Chunker
from ragjury.agents.collector import Collector
from ragjury.agents.context_judges import (
    AnswerRelevanceJudge,
    ContextPrecisionJudge,
    ContextRelevanceJudge,
)
from ragjury.agents.critics import GroundednessCritic, RelevanceCritic, StandaloneCritic
from ragjury.agents.deduplicator import Deduplicator
from ragjury.agents.generator import Generator
from ragjury.agents.judges import CorrectnessJudge, RubricJudge
from ragjury.agents.retrieval import RetrievalScorer
from ragjury.agents.sample_aggregator import SampleAggregator
from ragjury.agents.scorers import ConfidenceScorer, KeywordChecker, SimilarityScorer
from ragjury.agents.splitter import StatementSplitter
from ragjury.agents.verdict_judge import VerdictJudge

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
    "RelevanceCritic",
    "RetrievalScorer",
    "RubricJudge",
    "SampleAggregator",
    "SimilarityScorer",
    "StandaloneCritic",
    "StatementSplitter",
    "VerdictJudge",
]
