"""A GGUF model run in-process by llama.cpp (the ``local`` extra): no server, no network.

The model answers one request at a time (a llama.cpp context is not safe to share between
threads), so calls queue on a FIFO lock; each runs in a worker thread, so the event loop
keeps serving every other task while the model thinks. Structured output is constrained by
llama.cpp's JSON-schema grammar, and instructor still validates and re-asks exactly as it
does for an HTTP endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion

from ragjury._json import JSONData, JSONValue
from ragjury.errors import LLMTransportError, LLMUnavailableError
from ragjury.llm import static_embeddings
from ragjury.pricing import LOCAL_PREFIX
from ragjury.schemas.responses import grammar_schema

if TYPE_CHECKING:
    from llama_cpp import Llama

# What instructor may send that llama.cpp's create_chat_completion understands too.
_PASSED = ("messages", "temperature", "top_p", "stop", "seed", "logprobs", "top_logprobs")
MAX_STRING_CHARS = 600
"""Longest string value the grammar lets a local model write. Small models often repeat
themselves inside a string until the token limit cuts the JSON off; a bound closes the
string so the output stays JSON, and instructor judges what it says."""


def bounded_strings(schema: JSONValue, limit: int = MAX_STRING_CHARS) -> JSONValue:
    """A copy of a JSON schema whose string values are at most ``limit`` characters long."""
    if isinstance(schema, list):
        return [bounded_strings(item, limit) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    bounded = {key: bounded_strings(value, limit) for key, value in schema.items()}
    if bounded.get("type") == "string" and "enum" not in bounded and "const" not in bounded:
        given = bounded.get("maxLength", limit)
        if not isinstance(given, int | float | str):
            raise TypeError(f"a schema's maxLength is {given!r}, not a number")
        bounded["maxLength"] = min(int(given), limit)
    return bounded


def llama_request(request: Mapping[str, JSONData], *, max_tokens: int) -> dict[str, Any]:
    """An OpenAI chat request as keyword arguments of ``Llama.create_chat_completion``.

    instructor's ``json_schema`` mode sends ``{"type": "json_schema", "json_schema":
    {"schema": ...}}``; llama.cpp takes the schema as ``{"type": "json_object", "schema":
    ...}`` and turns it into a grammar, so the model can only write JSON of that shape.
    """
    # keyword arguments of create_chat_completion, each typed its own way by llama-cpp-python
    kwargs: dict[str, Any] = {key: request[key] for key in _PASSED if request.get(key) is not None}
    if kwargs.get("logprobs") and not kwargs.get("top_logprobs"):
        kwargs["top_logprobs"] = 1  # llama.cpp returns no logprobs without a top_logprobs
    asked = request.get("max_tokens") or request.get("max_completion_tokens")
    if not asked:
        kwargs["max_tokens"] = max_tokens
    elif isinstance(asked, int | float | str):
        kwargs["max_tokens"] = min(int(asked), max_tokens)
    else:
        raise TypeError(f"a request's max_tokens is {asked!r}, not a number")
    response_format = request.get("response_format")
    if isinstance(response_format, Mapping):
        if response_format.get("type") == "json_schema":
            given = response_format.get("json_schema", {})
            schema = given.get("schema") if isinstance(given, Mapping) else None
            constrained = bounded_strings(grammar_schema(_json(schema)))
            kwargs["response_format"] = {"type": "json_object", "schema": constrained}
        elif response_format.get("type") == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
    return kwargs


def _json(value: JSONData) -> JSONValue:
    """``value`` with its read-only containers as JSON's lists and dicts."""
    if isinstance(value, Mapping):
        return {str(key): _json(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_json(item) for item in value]
    return value


class LlamaCppBackend:
    """One GGUF model, loaded on first use, serving one request at a time in a thread."""

    forced_mode = "json_schema"
    """Grammar-constrained decoding needs the schema in the request, which this mode sends."""

    def __init__(
        self,
        model_path: Path,
        *,
        context: int,
        threads: int | None,
        max_tokens: int,
        logprobs: bool = False,
    ) -> None:
        self.model_path = model_path
        self.model_name = f"{LOCAL_PREFIX}{model_path.name}"
        self.embeddings_unavailable: str | None = static_embeddings.available()
        self.embedding_model = static_embeddings.MODEL_NAME
        self._context = context
        self._threads = threads or os.cpu_count() or 1
        self._max_tokens = max_tokens
        self._logprobs = logprobs
        self._llama: Llama | None = None
        self._load_error: LLMTransportError | None = None
        self._lock = anyio.Lock()  # FIFO: waiting calls are served in arrival order

    async def chat(self, *, stage: str, **request: JSONData) -> ChatCompletion:
        kwargs = llama_request(request, max_tokens=self._max_tokens)
        async with self._lock:
            # not abandoned on cancel: the thread holds the model until it returns
            return await anyio.to_thread.run_sync(self._complete, stage, kwargs)

    async def embed(self, texts: Sequence[str], *, stage: str) -> CreateEmbeddingResponse:
        if self.embeddings_unavailable is not None:
            raise LLMUnavailableError(f"{stage}: {self.embeddings_unavailable}")
        return await anyio.to_thread.run_sync(static_embeddings.embed, list(texts))

    async def aclose(self) -> None:
        async with self._lock:
            if self._llama is not None:
                llama, self._llama = self._llama, None
                await anyio.to_thread.run_sync(llama.close)

    def _complete(self, stage: str, kwargs: dict[str, Any]) -> ChatCompletion:
        llama = self._load()
        try:
            raw = llama.create_chat_completion(**kwargs)
        except ValueError as exc:  # e.g. "Requested tokens (5000) exceed context window"
            hint = (
                f"; raise --local-context (now {self._context} tokens) or lower --chunk-size"
                if "context" in str(exc)
                else ""
            )
            raise LLMTransportError(
                f"{stage}: the local model refused the request: {exc}{hint}"
            ) from exc
        except RuntimeError as exc:
            raise LLMTransportError(f"{stage}: the local model failed: {exc}") from exc
        return ChatCompletion.model_validate(raw)

    def _load(self) -> Llama:
        if self._llama is not None:
            return self._llama
        if self._load_error is not None:
            raise self._load_error
        from llama_cpp import Llama

        try:
            self._llama = Llama(
                model_path=str(self.model_path),
                n_ctx=self._context,
                n_threads=self._threads,
                n_threads_batch=self._threads,
                logits_all=self._logprobs,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            self._load_error = LLMTransportError(
                f"could not load the GGUF model {self.model_path}: {exc}; check that the "
                "file is a complete GGUF model (--llm local:/path/to/model.gguf)"
            )
            raise self._load_error from exc
        return self._llama
