"""ragjury: trustworthy evaluation sets and judgements for retrieval-augmented generation."""

from ragjury.api_inputs import SampleInput
from ragjury.config import EvaluationOptions, GenerationOptions, Settings
from ragjury.errors import (
    BusError,
    ConfigurationError,
    HandlerTimeout,
    InputError,
    LLMError,
    LLMOutputError,
    LLMTransportError,
    LLMUnavailableError,
    RagjuryError,
)
from ragjury.jury import Jury
from ragjury.llm import LLM
from ragjury.pricing import ModelPrice
from ragjury.prompts import Prompt
from ragjury.results import (
    ConfidenceResult,
    CorrectnessResult,
    EvaluationResult,
    FaithfulnessResult,
    KeywordsResult,
    RubricGrade,
    RubricResult,
    SimilarityResult,
)
from ragjury.schemas import (
    Chunk,
    ChunkFailed,
    Criterion,
    CritiqueResult,
    DocumentJudged,
    Failure,
    ItemFailed,
    KeywordCheck,
    KeywordRule,
    MetricName,
    MetricOutcome,
    MetricResult,
    PairJudged,
    PairOutcome,
    QAPair,
    Sample,
    SampleScored,
    StatementVerdict,
)

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "BusError",
    "Chunk",
    "ChunkFailed",
    "ConfidenceResult",
    "ConfigurationError",
    "CorrectnessResult",
    "Criterion",
    "CritiqueResult",
    "DocumentJudged",
    "EvaluationOptions",
    "EvaluationResult",
    "Failure",
    "FaithfulnessResult",
    "GenerationOptions",
    "HandlerTimeout",
    "InputError",
    "ItemFailed",
    "Jury",
    "KeywordCheck",
    "KeywordRule",
    "KeywordsResult",
    "LLMError",
    "LLMOutputError",
    "LLMTransportError",
    "LLMUnavailableError",
    "MetricName",
    "MetricOutcome",
    "MetricResult",
    "ModelPrice",
    "PairJudged",
    "PairOutcome",
    "Prompt",
    "QAPair",
    "RagjuryError",
    "RubricGrade",
    "RubricResult",
    "Sample",
    "SampleInput",
    "SampleScored",
    "Settings",
    "SimilarityResult",
    "StatementVerdict",
    "__version__",
]
