"""Answer evaluation: loading samples, asking a live RAG target, keyword tests, the pipeline."""

from ragjury.evaluation.inputs import InvalidRecord, SampleFile, SampleSet, load_samples
from ragjury.evaluation.keywords import check_keywords, failure_rates, keyword_score
from ragjury.evaluation.targets import (
    CallableTarget,
    HttpTarget,
    Target,
    TargetAnswer,
    TargetError,
    target_from_spec,
)

__all__ = [
    "CallableTarget",
    "HttpTarget",
    "InvalidRecord",
    "SampleFile",
    "SampleSet",
    "Target",
    "TargetAnswer",
    "TargetError",
    "check_keywords",
    "failure_rates",
    "keyword_score",
    "load_samples",
    "target_from_spec",
]
