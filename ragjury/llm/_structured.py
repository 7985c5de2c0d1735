"""instructor's structured call, with the per-model work done once per model.

``instructor.patch(create=...)`` returns a function that, on every call, walks the response
model's whole class hierarchy for async validators four times (about 0.1 ms each) and
re-prepares the model, before it builds the request and runs its validate-and-re-ask loop.
The model is the same on every call of a stage, so :class:`StructuredCreate` prepares it
once (instructor's own ``prepare_response_model``, which also refuses async validators) and
then does per call exactly what the patched function does for our arguments: instructor's
request handler for the mode (the schema in the prompt) and its retry loop
(``retry_async_v2``: parse, validate, re-ask with the error). ragjury passes no instructor
``context`` (its validators read theirs from :func:`ragjury.schemas.responses.checking`),
so instructor's templating, which only acts on one, has nothing to do. The output is
validated and re-asked by instructor as before; only the repeated model preparation is gone.

These are instructor 1.17's internal modules. With an instructor that lays them out
differently the public ``instructor.patch`` is used instead (same behaviour, slower);
``tests/test_llm_structured.py`` checks which one this install uses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import instructor
from pydantic import BaseModel

from ragjury._json import JSONData

T = TypeVar("T", bound=BaseModel)
Send = Callable[..., Awaitable[object]]

try:
    from instructor.v2.core.messages import isolate_retry_kwargs
    from instructor.v2.core.providers import Provider
    from instructor.v2.core.registry import mode_registry
    from instructor.v2.core.response_model import prepare_response_model
    from instructor.v2.core.retry import retry_async_v2

    FAST = True
except ImportError:  # pragma: no cover - another instructor layout: the public path
    FAST = False


class StructuredCreate:
    """``await create(model, messages=..., max_retries=..., **request)``: a validated ``model``
    from ``send`` (the chat request function), re-asked by instructor on invalid output."""

    def __init__(self, send: Send, mode: instructor.Mode, *, fast: bool = FAST) -> None:
        self._send, self._mode, self.fast = send, mode, fast and FAST
        self._prepared: dict[type[BaseModel], type[BaseModel]] = {}
        if self.fast:
            self._handlers = mode_registry.get_handlers(Provider.OPENAI, mode)
        else:
            self._patched: Callable[..., Awaitable[object]] = instructor.patch(
                create=send, mode=mode
            )

    async def __call__(
        self, response_model: type[T], *, max_retries: int, **request: JSONData
    ) -> T:
        if not self.fast:
            return cast(
                T,
                await self._patched(
                    response_model=response_model, max_retries=max_retries, **request
                ),
            )
        prepared = self._prepared.get(response_model)
        if prepared is None:
            prepared = prepare_response_model(response_model) or response_model
            self._prepared[response_model] = prepared
        model, kwargs = self._handlers.request_handler(response_model=prepared, kwargs=request)
        if self._handlers.message_converter and "messages" in kwargs:
            kwargs["messages"] = self._handlers.message_converter(
                kwargs["messages"], autodetect_images=False
            )
        result = await retry_async_v2(
            func=self._send,
            response_model=model,
            provider=Provider.OPENAI,
            mode=self._mode,
            context=None,
            max_retries=max_retries,
            args=(),
            kwargs=isolate_retry_kwargs(kwargs),
            strict=True,
            hooks=None,
            token_budget=None,
        )
        return cast(T, result)
