"""instructor's structured call, without the work that is the same on every call.

``instructor.patch(create=...)`` returns a function that, on every call, walks the response
model's whole class hierarchy for async validators four times (about 0.1 ms each), prepares
the model again, and runs its retry loop through tenacity with a usage total it deep-copies
per response: about 1 ms of CPU a call before any HTTP, more than the openai client's own
request. :class:`StructuredCreate` prepares each model once (instructor's
``prepare_response_model``, which also refuses async validators) and then, per call, uses
instructor's handlers for the mode exactly as its retry loop does: the request handler
builds the request (the schema in the prompt; in JSON mode its note to the model, the schema
dumped with an indent, is written once per model and placed as the handler places it), the
response parser parses and validates the
answer (raising on invalid output, or on a cut-off one), and the re-ask handler adds the
error to the conversation for the next attempt, up to ``max_retries`` re-asks; then
:class:`InstructorRetryException` from the last error, as instructor raises it. Token usage
is counted by :class:`ragjury.llm.LLM` itself, so instructor's running total is not kept.
ragjury passes no instructor ``context`` (its validators read theirs from
:func:`ragjury.schemas.responses.checking`), so instructor's templating has nothing to do.

These are instructor 1.17's internal modules. With another instructor version (or one that
lays them out differently) the public ``instructor.patch`` is used instead (same requests,
slower); ``tests/test_llm_structured.py`` checks that both send the same requests and
re-asks, and which one this install uses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import instructor
from instructor.core import IncompleteOutputException, InstructorRetryException
from pydantic import BaseModel

from ragjury._json import JSONData

T = TypeVar("T", bound=BaseModel)
Send = Callable[..., Awaitable[object]]
Messages = list[dict[str, JSONData]]

VERIFIED = (1, 17)
"""The instructor (major, minor) whose internal handlers this module was checked against; any
other uses the public path until ``tests/test_llm_structured.py`` passes with it."""

try:
    if tuple(int(part) for part in instructor.__version__.split(".")[:2]) != VERIFIED:
        raise ImportError(f"instructor {instructor.__version__} is not {VERIFIED}")
    from instructor.v2.core.messages import (
        copy_messages_for_mutation,
        isolate_retry_kwargs,
        merge_consecutive_messages,
    )
    from instructor.v2.core.providers import Provider
    from instructor.v2.core.registry import mode_registry
    from instructor.v2.core.response_model import prepare_response_model
    from instructor.v2.core.retry import _RETRYABLE_PARSE_ERRORS

    FAST = True
except (ImportError, ValueError):  # pragma: no cover - another instructor: the public path
    FAST = False


class StructuredCreate:
    """``await create(model, messages=..., max_retries=..., **request)``: a validated ``model``
    from ``send`` (the chat request function), re-asked by instructor on invalid output."""

    def __init__(self, send: Send, mode: instructor.Mode, *, fast: bool = FAST) -> None:
        self._send, self._mode, self.fast = send, mode, fast and FAST
        self._prepared: dict[type[BaseModel], type[BaseModel]] = {}
        self._json_notes: dict[type[BaseModel], str] = {}
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
        handlers = self._handlers
        kwargs: dict[str, JSONData]
        if self._mode is instructor.Mode.JSON:
            model, kwargs = prepared, self._json_request(prepared, request)
        else:
            built, kwargs = handlers.request_handler(response_model=prepared, kwargs=request)
            model = built or prepared
        if handlers.message_converter and "messages" in kwargs:
            kwargs["messages"] = handlers.message_converter(
                cast(Messages, kwargs["messages"]), autodetect_images=False
            )
        kwargs = isolate_retry_kwargs(kwargs)
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._send(**kwargs)
            except IncompleteOutputException:
                raise
            except Exception as exc:
                raise InstructorRetryException(
                    str(exc), last_completion=None, n_attempts=attempt, total_usage=0,
                    create_kwargs=kwargs,
                ) from exc  # fmt: skip
            try:
                parsed = handlers.response_parser(
                    response=response,
                    response_model=model,
                    validation_context=None,
                    strict=True,
                    stream=False,
                    is_async=True,
                )
            except IncompleteOutputException:
                raise
            except _RETRYABLE_PARSE_ERRORS as exc:
                if attempt > max_retries:
                    raise InstructorRetryException(
                        str(exc), last_completion=response, n_attempts=attempt,
                        total_usage=0, create_kwargs=kwargs,
                    ) from exc  # fmt: skip
                kwargs = handlers.reask_handler(kwargs=kwargs, response=response, exception=exc)
                continue
            return cast(T, parsed)

    def _json_request(
        self, model: type[BaseModel], request: dict[str, JSONData]
    ) -> dict[str, JSONData]:
        """What instructor's JSON-mode request handler builds, its note to the model (the
        schema, dumped with an indent) written once per model instead of once per call: the
        note asked of the handler for no messages, then placed as the handler places it."""
        note = self._json_notes.get(model)
        if note is None:
            _, alone = self._handlers.request_handler(response_model=model, kwargs={"messages": []})
            note = self._json_notes[model] = alone["messages"][0]["content"]
        kwargs = {**request, "response_format": {"type": "json_object"}}
        messages = copy_messages_for_mutation(cast(Messages, request.get("messages", [])))
        first = messages[0] if messages else None
        if first is None or first["role"] != "system":
            messages.insert(0, {"role": "system", "content": note})
        elif isinstance(first["content"], str):
            first["content"] += f"\n\n{note}"
        elif isinstance(first["content"], list):
            first["content"][0]["text"] += f"\n\n{note}"
        else:
            messages.insert(0, {"role": "system", "content": note})
        kwargs["messages"] = merge_consecutive_messages(messages)
        return kwargs
