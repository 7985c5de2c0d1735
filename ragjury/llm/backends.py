"""Where a chat request goes: the seam between :class:`~ragjury.llm.LLM` and a model.

:class:`LLM` keeps everything that is the same for every model (instructor's validation
re-asks, transport retries, accounting); a backend only sends one request and returns an
OpenAI-shaped response. Two backends exist: :class:`OpenAIBackend` for any OpenAI-compatible
HTTP endpoint and :class:`ragjury.llm.local.LlamaCppBackend` for a GGUF file run in-process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ragjury._json import JSONData
from ragjury.config import Settings
from ragjury.llm.ratelimit import keep_headers

if TYPE_CHECKING:
    import openai
    from openai.types import CreateEmbeddingResponse
    from openai.types.chat import ChatCompletion


class ChatBackend(Protocol):
    """One model behind one object: a chat request in, an OpenAI-shaped completion out."""

    @property
    def model_name(self) -> str:
        """The name recorded with every call (the endpoint's model, or the GGUF file)."""
        ...

    @property
    def forced_mode(self) -> str | None:
        """The structured-output mode this backend needs, or None to honour ``--mode``."""
        ...

    @property
    def embeddings_unavailable(self) -> str | None:
        """Why this backend cannot embed text, or None when it can."""
        ...

    @property
    def embedding_model(self) -> str:
        """The model that gives this backend's embeddings."""
        ...

    async def chat(self, *, stage: str, **request: JSONData) -> ChatCompletion:
        """Send one chat request (OpenAI keyword arguments) and return the completion."""
        ...

    async def embed(self, texts: Sequence[str], *, stage: str) -> CreateEmbeddingResponse:
        """Embeddings of ``texts``, one vector each."""
        ...

    async def aclose(self) -> None: ...


def completion(body: bytes) -> ChatCompletion:
    """An endpoint's chat answer as the openai client's ``ChatCompletion``.

    Read by pydantic-core in one pass (about 25 us), where the client's own reading walks
    every field of the answer through its type-driven construction (about 0.85 ms of CPU on
    the throughput benchmark's machine, a fifth of the bare client's CPU per request). An
    answer that does not fit the schema exactly (a field missing, a finish reason the schema
    does not know) is built as the client builds it, without validation, so an endpoint that
    the client accepts is accepted here too."""
    import json

    import pydantic
    from openai.types.chat import ChatCompletion

    try:
        return ChatCompletion.model_validate_json(body)
    except pydantic.ValidationError:
        return ChatCompletion.construct(**json.loads(body))


class OpenAIBackend:
    """An OpenAI-compatible HTTP endpoint, through the official client (its retries off).

    Its HTTP client leaves every answer's headers where the request's caller can read them
    (:data:`ragjury.llm.ratelimit.answer_box`): the rate-limit headers pace what follows."""

    forced_mode: str | None = None
    embeddings_unavailable: str | None = None

    def __init__(self, settings: Settings) -> None:
        self.model_name = settings.model
        self.embedding_model = settings.embedding_model
        self._settings = settings
        self._opened: openai.AsyncOpenAI | None = None

    @property
    def _client(self) -> openai.AsyncOpenAI:
        """The client, made (and openai imported, about a second) at the first request: a
        run that sends none (keyword tests only) never loads it."""
        if self._opened is None:
            import openai

            from ragjury.llm._http import http_client

            self._opened = openai.AsyncOpenAI(
                base_url=self._settings.base_url,
                api_key=self._settings.api_key or "not-needed",
                max_retries=0,  # transport retries are LLM's, so that every request is counted
                timeout=self._settings.timeout,
                http_client=http_client(keep_headers),
            )
        return self._opened

    async def chat(self, *, stage: str, **request: JSONData) -> ChatCompletion:
        # The client's documented raw `post`, not `chat.completions.create`: create() walks
        # the whole request through its type-driven transform first, about 1 ms of CPU per
        # request for a body that instructor has already built as plain JSON. The answer is
        # taken as bytes (the client still raises on an error status) and read by
        # :func:`completion`.
        body: bytes = await self._client.post(
            "/chat/completions",
            body=request,
            cast_to=bytes,
            options={"headers": {"x-ragjury-agent": stage}},
        )
        return completion(body)

    async def embed(self, texts: Sequence[str], *, stage: str) -> CreateEmbeddingResponse:
        return await self._client.embeddings.create(
            model=self.embedding_model,
            input=list(texts),
            extra_headers={"x-ragjury-agent": stage},
        )

    async def aclose(self) -> None:
        if self._opened is not None:
            await self._opened.close()
