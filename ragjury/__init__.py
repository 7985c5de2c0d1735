"""ragjury: trustworthy evaluation sets and judgements for retrieval-augmented generation."""

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
from ragjury.results import EvaluationResult
from ragjury.schemas import MetricResult, Sample

__version__ = "0.1.0"

__all__ = [
    "BusError",
    "ConfigurationError",
    "EvaluationOptions",
    "EvaluationResult",
    "GenerationOptions",
    "HandlerTimeout",
    "InputError",
    "Jury",
    "LLMError",
    "LLMOutputError",
    "LLMTransportError",
    "LLMUnavailableError",
    "MetricResult",
    "RagjuryError",
    "Sample",
    "Settings",
    "__version__",
]
