"""Answer evaluation: loading samples, asking a live RAG target, keyword tests, the pipeline.

The names are imported when first used, so that a module that needs one part (the retrieval
figures, the keyword tests) does not load the others (the HTTP client of the targets)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragjury._lazy import lazy_names

if TYPE_CHECKING:
    from ragjury.evaluation.inputs import InvalidRecord as InvalidRecord
    from ragjury.evaluation.inputs import SampleFile as SampleFile
    from ragjury.evaluation.inputs import SampleSet as SampleSet
    from ragjury.evaluation.inputs import load_samples as load_samples
    from ragjury.evaluation.keywords import check_keywords as check_keywords
    from ragjury.evaluation.keywords import failure_rates as failure_rates
    from ragjury.evaluation.keywords import keyword_score as keyword_score
    from ragjury.evaluation.targets import CallableTarget as CallableTarget
    from ragjury.evaluation.targets import HttpTarget as HttpTarget
    from ragjury.evaluation.targets import Target as Target
    from ragjury.evaluation.targets import TargetAnswer as TargetAnswer
    from ragjury.evaluation.targets import TargetError as TargetError
    from ragjury.evaluation.targets import target_from_spec as target_from_spec

_WHERE = {
    "CallableTarget": "ragjury.evaluation.targets",
    "HttpTarget": "ragjury.evaluation.targets",
    "InvalidRecord": "ragjury.evaluation.inputs",
    "SampleFile": "ragjury.evaluation.inputs",
    "SampleSet": "ragjury.evaluation.inputs",
    "Target": "ragjury.evaluation.targets",
    "TargetAnswer": "ragjury.evaluation.targets",
    "TargetError": "ragjury.evaluation.targets",
    "check_keywords": "ragjury.evaluation.keywords",
    "failure_rates": "ragjury.evaluation.keywords",
    "keyword_score": "ragjury.evaluation.keywords",
    "load_samples": "ragjury.evaluation.inputs",
    "target_from_spec": "ragjury.evaluation.targets",
}

__getattr__ = lazy_names(__name__, _WHERE)

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
