"""ragjury: trustworthy evaluation sets and judgements for retrieval-augmented generation.

The public names are imported when first used (``ragjury.Jury``, ``from ragjury import
Sample``), so that ``import ragjury`` and the command line's ``--version`` and ``--help`` do not
load the LLM client, the stores and the report code they do not need."""

import typing as _typing

from ragjury._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from ragjury.api_inputs import (
        SampleInput as SampleInput,
    )
    from ragjury.config import (
        EvaluationOptions as EvaluationOptions,
    )
    from ragjury.config import (
        GenerationOptions as GenerationOptions,
    )
    from ragjury.config import (
        JudgeEndpoint as JudgeEndpoint,
    )
    from ragjury.config import (
        Settings as Settings,
    )
    from ragjury.errors import (
        BusError as BusError,
    )
    from ragjury.errors import (
        ConfigurationError as ConfigurationError,
    )
    from ragjury.errors import (
        EndpointUnreachableError as EndpointUnreachableError,
    )
    from ragjury.errors import (
        InputError as InputError,
    )
    from ragjury.errors import (
        LLMError as LLMError,
    )
    from ragjury.errors import (
        LLMOutputError as LLMOutputError,
    )
    from ragjury.errors import (
        LLMTransportError as LLMTransportError,
    )
    from ragjury.errors import (
        LLMUnavailableError as LLMUnavailableError,
    )
    from ragjury.errors import (
        MetricNotRequested as MetricNotRequested,
    )
    from ragjury.errors import (
        RagjuryError as RagjuryError,
    )
    from ragjury.errors import (
        StoreUnavailableError as StoreUnavailableError,
    )
    from ragjury.errors import (
        TargetError as TargetError,
    )
    from ragjury.jury import (
        Jury as Jury,
    )
    from ragjury.llm import (
        LLM as LLM,
    )
    from ragjury.metrics import (
        Metric as Metric,
    )
    from ragjury.metrics import (
        Scale as Scale,
    )
    from ragjury.pricing import (
        BatchPrice as BatchPrice,
    )
    from ragjury.pricing import (
        ModelPrice as ModelPrice,
    )
    from ragjury.prompts import (
        Prompt as Prompt,
    )
    from ragjury.results import (
        AnswerRelevanceResult as AnswerRelevanceResult,
    )
    from ragjury.results import (
        ConfidenceResult as ConfidenceResult,
    )
    from ragjury.results import (
        ContextPrecisionResult as ContextPrecisionResult,
    )
    from ragjury.results import (
        ContextRecallResult as ContextRecallResult,
    )
    from ragjury.results import (
        ContextRelevanceResult as ContextRelevanceResult,
    )
    from ragjury.results import (
        ContextVerdictRecord as ContextVerdictRecord,
    )
    from ragjury.results import (
        CorrectnessResult as CorrectnessResult,
    )
    from ragjury.results import (
        EvaluationResult as EvaluationResult,
    )
    from ragjury.results import (
        FaithfulnessResult as FaithfulnessResult,
    )
    from ragjury.results import (
        KeywordsResult as KeywordsResult,
    )
    from ragjury.results import (
        RetrievalResult as RetrievalResult,
    )
    from ragjury.results import (
        RubricGrade as RubricGrade,
    )
    from ragjury.results import (
        RubricResult as RubricResult,
    )
    from ragjury.results import (
        SimilarityResult as SimilarityResult,
    )
    from ragjury.schemas import (
        AloneAttempt as AloneAttempt,
    )
    from ragjury.schemas import (
        AnswerCheck as AnswerCheck,
    )
    from ragjury.schemas import (
        Chunk as Chunk,
    )
    from ragjury.schemas import (
        ChunkFailed as ChunkFailed,
    )
    from ragjury.schemas import (
        Criterion as Criterion,
    )
    from ragjury.schemas import (
        CritiqueResult as CritiqueResult,
    )
    from ragjury.schemas import (
        DocumentJudged as DocumentJudged,
    )
    from ragjury.schemas import (
        Failure as Failure,
    )
    from ragjury.schemas import (
        ItemFailed as ItemFailed,
    )
    from ragjury.schemas import (
        KeywordCheck as KeywordCheck,
    )
    from ragjury.schemas import (
        KeywordRule as KeywordRule,
    )
    from ragjury.schemas import (
        MetricChoice as MetricChoice,
    )
    from ragjury.schemas import (
        MetricName as MetricName,
    )
    from ragjury.schemas import (
        MetricOutcome as MetricOutcome,
    )
    from ragjury.schemas import (
        MetricResult as MetricResult,
    )
    from ragjury.schemas import (
        PairJudged as PairJudged,
    )
    from ragjury.schemas import (
        PairOutcome as PairOutcome,
    )
    from ragjury.schemas import (
        Persona as Persona,
    )
    from ragjury.schemas import (
        QAPair as QAPair,
    )
    from ragjury.schemas import (
        Sample as Sample,
    )
    from ragjury.schemas import (
        SampleScored as SampleScored,
    )
    from ragjury.schemas import (
        StatementVerdict as StatementVerdict,
    )
    from ragjury.schemas.panel import (
        Panel as Panel,
    )
    from ragjury.schemas.panel import (
        PanelJudge as PanelJudge,
    )

__version__ = "0.1.0"

_WHERE = {
    "AloneAttempt": "ragjury.schemas",
    "AnswerCheck": "ragjury.schemas",
    "AnswerRelevanceResult": "ragjury.results",
    "BusError": "ragjury.errors",
    "Chunk": "ragjury.schemas",
    "ChunkFailed": "ragjury.schemas",
    "ConfidenceResult": "ragjury.results",
    "ConfigurationError": "ragjury.errors",
    "ContextPrecisionResult": "ragjury.results",
    "ContextRecallResult": "ragjury.results",
    "ContextRelevanceResult": "ragjury.results",
    "ContextVerdictRecord": "ragjury.results",
    "CorrectnessResult": "ragjury.results",
    "Criterion": "ragjury.schemas",
    "CritiqueResult": "ragjury.schemas",
    "DocumentJudged": "ragjury.schemas",
    "EndpointUnreachableError": "ragjury.errors",
    "EvaluationOptions": "ragjury.config",
    "EvaluationResult": "ragjury.results",
    "Failure": "ragjury.schemas",
    "FaithfulnessResult": "ragjury.results",
    "GenerationOptions": "ragjury.config",
    "InputError": "ragjury.errors",
    "JudgeEndpoint": "ragjury.config",
    "ItemFailed": "ragjury.schemas",
    "Jury": "ragjury.jury",
    "KeywordCheck": "ragjury.schemas",
    "KeywordRule": "ragjury.schemas",
    "KeywordsResult": "ragjury.results",
    "LLM": "ragjury.llm",
    "LLMError": "ragjury.errors",
    "LLMOutputError": "ragjury.errors",
    "LLMTransportError": "ragjury.errors",
    "LLMUnavailableError": "ragjury.errors",
    "Metric": "ragjury.metrics",
    "MetricChoice": "ragjury.schemas",
    "MetricName": "ragjury.schemas",
    "MetricNotRequested": "ragjury.errors",
    "MetricOutcome": "ragjury.schemas",
    "MetricResult": "ragjury.schemas",
    "ModelPrice": "ragjury.pricing",
    "BatchPrice": "ragjury.pricing",
    "PairJudged": "ragjury.schemas",
    "Panel": "ragjury.schemas.panel",
    "PanelJudge": "ragjury.schemas.panel",
    "PairOutcome": "ragjury.schemas",
    "Persona": "ragjury.schemas",
    "Prompt": "ragjury.prompts",
    "QAPair": "ragjury.schemas",
    "RagjuryError": "ragjury.errors",
    "RetrievalResult": "ragjury.results",
    "RubricGrade": "ragjury.results",
    "RubricResult": "ragjury.results",
    "Sample": "ragjury.schemas",
    "SampleInput": "ragjury.api_inputs",
    "SampleScored": "ragjury.schemas",
    "Scale": "ragjury.metrics",
    "Settings": "ragjury.config",
    "SimilarityResult": "ragjury.results",
    "StatementVerdict": "ragjury.schemas",
    "StoreUnavailableError": "ragjury.errors",
    "TargetError": "ragjury.errors",
}


__getattr__ = _lazy_names(__name__, _WHERE)


__all__ = [
    "LLM",
    "AloneAttempt",
    "AnswerCheck",
    "AnswerRelevanceResult",
    "BatchPrice",
    "BusError",
    "Chunk",
    "ChunkFailed",
    "ConfidenceResult",
    "ConfigurationError",
    "ContextPrecisionResult",
    "ContextRecallResult",
    "ContextRelevanceResult",
    "ContextVerdictRecord",
    "CorrectnessResult",
    "Criterion",
    "CritiqueResult",
    "DocumentJudged",
    "EndpointUnreachableError",
    "EvaluationOptions",
    "EvaluationResult",
    "Failure",
    "FaithfulnessResult",
    "GenerationOptions",
    "InputError",
    "ItemFailed",
    "JudgeEndpoint",
    "Jury",
    "KeywordCheck",
    "KeywordRule",
    "KeywordsResult",
    "LLMError",
    "LLMOutputError",
    "LLMTransportError",
    "LLMUnavailableError",
    "Metric",
    "MetricChoice",
    "MetricName",
    "MetricNotRequested",
    "MetricOutcome",
    "MetricResult",
    "ModelPrice",
    "PairJudged",
    "PairOutcome",
    "Panel",
    "PanelJudge",
    "Persona",
    "Prompt",
    "QAPair",
    "RagjuryError",
    "RetrievalResult",
    "RubricGrade",
    "RubricResult",
    "Sample",
    "SampleInput",
    "SampleScored",
    "Scale",
    "Settings",
    "SimilarityResult",
    "StatementVerdict",
    "StoreUnavailableError",
    "TargetError",
    "__version__",
]
