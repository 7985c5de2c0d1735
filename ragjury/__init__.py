"""ragjury: trustworthy evaluation sets and judgements for retrieval-augmented generation."""

from ragjury.config import GenerationOptions, Settings
from ragjury.errors import (
    BusError,
    ConfigurationError,
    HandlerTimeout,
    InputError,
    LLMError,
    LLMOutputError,
    LLMTransportError,
    RagjuryError,
)

__version__ = "0.1.0"

__all__ = [
    "BusError",
    "ConfigurationError",
    "GenerationOptions",
    "HandlerTimeout",
    "InputError",
    "LLMError",
    "LLMOutputError",
    "LLMTransportError",
    "RagjuryError",
    "Settings",
    "__version__",
]
