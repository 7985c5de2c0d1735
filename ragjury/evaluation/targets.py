"""Ask the user's live RAG system for answers: over HTTP, or by calling a Python function.

``--target`` takes either an ``http://``/``https://`` URL (:class:`HttpTarget`: POST the
question as JSON, read the answer and contexts from the JSON reply) or
``package.module:function`` (:class:`CallableTarget`: call the function with the question).
Both give back a :class:`TargetAnswer`; every way of failing raises :class:`TargetError`, whose
message names the target, what went wrong and what to change.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self, TypedDict, TypeVar, Unpack, runtime_checkable

import anyio
import anyio.to_thread
import structlog

from ragjury._json import JSONObject, JSONValue
from ragjury.errors import ConfigurationError, TargetError
from ragjury.text import clean_value
from ragjury.urls import redact_text, redacted, remember_secret, remember_secrets, secret_header

__all__ = [
    "CallableTarget",
    "HttpTarget",
    "Target",
    "TargetAnswer",
    "TargetError",
    "target_from_spec",
]

_SNIPPET = 200
_CONTEXT_TEXT_FIELDS = ("text", "page_content")
_CONTEXT_ID_FIELDS = ("id", "chunk_id", "node_id", "id_")

log = structlog.get_logger("ragjury.target")
T = TypeVar("T")


@dataclass(frozen=True)
class TargetAnswer:
    """What the RAG system answered, the contexts it retrieved (best first), their ids where
    it gave them (``()`` when it gave none; None for a context without one), and token
    logprobs if known."""

    answer: str
    contexts: tuple[str, ...]
    logprobs: tuple[float, ...] | None = None
    context_ids: tuple[str | None, ...] = ()


def repaired(reply: TargetAnswer, target: str) -> TargetAnswer:
    """``reply`` with text no later step could encode repaired, as file input is (a lone
    surrogate becomes U+FFFD, NUL and other control characters go), with a warning."""
    answer, answer_repairs = clean_value(reply.answer)
    contexts, context_repairs = clean_value(reply.contexts)
    context_ids, id_repairs = clean_value(reply.context_ids)
    repairs = answer_repairs + context_repairs + id_repairs
    if not repairs:
        return reply
    log.warning(
        "target_reply_repaired",
        target=target,
        repairs="; ".join(repairs),
        say=f"the reply of {target}: {'; '.join(repairs)}, so the text can be stored and sent",
    )
    return dataclasses.replace(reply, answer=answer, contexts=contexts, context_ids=context_ids)


@runtime_checkable
class Target(Protocol):
    """A RAG system that answers questions."""

    @property
    def name(self) -> str:
        """How messages refer to the target: its URL or ``module:function``."""
        ...

    async def answer(self, question: str) -> TargetAnswer:
        """Ask one question; raises TargetError when no usable answer comes back."""
        ...

    async def aclose(self) -> None:
        """Release connections; the target is not used afterwards."""
        ...


class HttpTarget:
    """POSTs ``{question_field: question}`` as JSON to ``url`` and reads the JSON reply.

    The reply must hold ``answer_field`` (a string) and ``contexts_field``: a list of strings,
    a list of objects with a ``text`` or ``page_content`` field (and optionally an ``id``,
    ``chunk_id`` or ``node_id``, which retrieval metrics match), or one string, best first.
    An optional ``logprobs`` list of numbers is kept. ``timeout`` (seconds) bounds each
    whole request.
    """

    def __init__(
        self,
        url: str,
        *,
        question_field: str = "question",
        answer_field: str = "answer",
        contexts_field: str = "contexts",
        timeout: float = 60.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not url.lower().startswith(("http://", "https://")):
            raise ConfigurationError(
                f"target URL {redacted(url)!r} must start with http:// or https://; "
                "give the full address, such as http://localhost:8000/ask"
            )
        if timeout <= 0:
            raise ConfigurationError(f"target timeout must be > 0 seconds, got {timeout!r}; try 60")
        self.url = remember_secrets(url) or url  # where a target's URL enters
        for header, value in (headers or {}).items():
            if secret_header(header):
                remember_secret(value)
        self.question_field = question_field
        self.answer_field = answer_field
        self.contexts_field = contexts_field
        self.timeout = timeout
        import httpx2  # only a run with a URL target needs the HTTP client (0.2 s to import)

        self._client = httpx2.AsyncClient(
            headers={"accept": "application/json", **(headers or {})}, timeout=timeout
        )

    @property
    def name(self) -> str:
        return redacted(self.url)  # what messages, logs and results may show

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def answer(self, question: str) -> TargetAnswer:
        reply = await self._post({self.question_field: question})
        if not isinstance(reply, dict):
            raise self._error(
                f"the reply is {_type_name(reply)}, not a JSON object; "
                f"reply with an object holding {self.answer_field!r} and {self.contexts_field!r}"
            )
        answer = self._field(reply, self.answer_field, "--target-answer-field")
        if not isinstance(answer, str):
            raise self._error(
                f"the reply's {self.answer_field!r} field is {_type_name(answer)}, not a string; "
                "reply with the answer text, or name the right field with --target-answer-field"
            )
        raw_contexts = self._field(reply, self.contexts_field, "--target-contexts-field")
        try:
            contexts, ids = _contexts_from(raw_contexts)
        except ValueError as exc:
            raise self._error(f"in the reply's {self.contexts_field!r} field, {exc}") from exc
        try:
            logprobs = _logprobs_from(reply.get("logprobs"))
        except ValueError as exc:
            raise self._error(f"in the reply, {exc}") from exc
        return repaired(
            TargetAnswer(answer=answer, contexts=contexts, logprobs=logprobs, context_ids=ids),
            self.name,
        )

    async def _post(self, payload: dict[str, str]) -> JSONValue:
        import httpx2  # (imported by __init__ already)

        try:
            with anyio.fail_after(self.timeout):
                response = await self._client.post(self.url, json=payload)
        except (TimeoutError, httpx2.TimeoutException) as exc:
            raise self._error(
                f"no reply within {self.timeout:g} s; check that the service is healthy, "
                "or allow longer with --target-timeout"
            ) from exc
        except httpx2.ConnectError as exc:
            raise self._error(
                f"cannot connect ({exc}); check the URL and that the service is running"
            ) from exc
        except httpx2.HTTPError as exc:
            raise self._error(
                f"the request failed ({type(exc).__name__}: {exc}); "
                "check the URL and that the service speaks HTTP"
            ) from exc
        if not response.is_success:
            fix = (
                "check the service's logs"
                if response.status_code >= 500
                else "check the URL, the request fields (--target-question-field) and any "
                "headers it needs"
            )
            raise self._error(
                f"it answered HTTP {response.status_code} {response.reason_phrase}: "
                f"{_snippet(response.text)}; {fix}"
            )
        try:
            reply: JSONValue = response.json()
        except ValueError as exc:
            kind = response.headers.get("content-type", "no content type")
            raise self._error(
                f"the reply is not JSON ({kind}): {_snippet(response.text)}; "
                "reply with a JSON object"
            ) from exc
        return reply

    def _field(self, reply: JSONObject, field: str, option: str) -> JSONValue:
        if field not in reply:
            raise self._error(
                f"the reply has no {field!r} field (fields: {sorted(reply)}); "
                f"name the field that holds it with {option}"
            )
        return reply[field]

    def _error(self, what: str) -> TargetError:
        # the underlying error may quote the URL too: every password and secret parameter out
        return TargetError(redact_text(f"target {self.name}: {what}"))


# what a user's function returns is read by isinstance and getattr (LangChain documents,
# LlamaIndex nodes, dicts, tuples): any Python object
TargetFunction = Callable[[str], Any]
"""A user's function: question in; TargetAnswer, {answer, contexts} or (answer, contexts) out."""


class HttpOptions(TypedDict, total=False):
    """:class:`HttpTarget`'s keyword arguments."""

    question_field: str
    answer_field: str
    contexts_field: str
    timeout: float
    headers: Mapping[str, str] | None


class CallableTarget:
    """Calls a Python function with each question.

    The function may return a :class:`TargetAnswer`, a mapping with ``answer`` and
    ``contexts`` (and optionally ``logprobs``) keys, or an ``(answer, contexts)`` tuple.
    Contexts may be strings or objects with a ``text`` or ``page_content`` attribute or key
    (LangChain documents, LlamaIndex nodes), and an ``id``, ``chunk_id``, ``node_id`` or
    ``id_`` that retrieval metrics match. Sync functions run in a worker thread so they
    never block the event loop; async functions are awaited.
    """

    def __init__(self, function: TargetFunction, *, name: str | None = None) -> None:
        self.function = function
        self._name = name or getattr(function, "__qualname__", None) or repr(function)
        self._is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            type(function).__call__  # an object whose __call__ is async
        )

    @classmethod
    def from_spec(cls, spec: str) -> CallableTarget:
        """Import ``package.module:function`` (the attribute may be dotted: ``mod:obj.ask``)."""
        return cls(_import_function(spec), name=spec)

    @property
    def name(self) -> str:
        return self._name

    async def aclose(self) -> None:
        """Nothing to release: the function owns its resources."""

    async def answer(self, question: str) -> TargetAnswer:
        try:
            if self._is_async:
                result = await self.function(question)
            else:
                result = await anyio.to_thread.run_sync(self.function, question)
                if inspect.isawaitable(result):
                    result = await _awaited(result)
        except Exception as exc:
            raise TargetError(
                f"target function {self._name} raised {type(exc).__name__}: {exc}; "
                f"fix the function (it failed on the question {_snippet(question)})"
            ) from exc
        try:
            return repaired(_answer_from(result), self._name)
        except ValueError as exc:
            raise TargetError(
                f"target function {self._name} returned {exc}; return a TargetAnswer, "
                "a dict with 'answer' and 'contexts', or an (answer, contexts) tuple"
            ) from exc


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def target_identity(target: Target) -> str:
    """What makes the target part of a job's identity: its name and, for an HTTP target, the
    reply fields it reads when they are not the defaults (reading another field gives other
    answers, so another job). A URL's password is never in it."""
    if not isinstance(target, HttpTarget):
        return target.name
    fields = [
        f"{role} field {value!r}"
        for role, value, default in (
            ("question", target.question_field, "question"),
            ("answer", target.answer_field, "answer"),
            ("contexts", target.contexts_field, "contexts"),
        )
        if value != default
    ]
    return target.name + (f" ({', '.join(fields)})" if fields else "")


def target_from_spec(spec: str, **http_options: Unpack[HttpOptions]) -> Target:
    """An :class:`HttpTarget` for an ``http(s)://`` URL, else a :class:`CallableTarget`.

    ``http_options`` are :class:`HttpTarget` keyword arguments; they are ignored for a
    function, which has no fields to name.
    """
    if spec.strip().lower().startswith(("http://", "https://")):
        return HttpTarget(spec.strip(), **http_options)
    return CallableTarget.from_spec(spec.strip())


def _import_function(spec: str) -> TargetFunction:
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigurationError(
            f"--target expects an http(s):// URL or package.module:function, got {spec!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            f"--target {spec!r}: cannot import module {module_name!r} ({exc}); check the "
            "spelling, and that the module is importable (installed, or on PYTHONPATH)"
        ) from exc
    except Exception as exc:
        raise ConfigurationError(
            f"--target {spec!r}: importing module {module_name!r} failed with "
            f"{type(exc).__name__}: {exc}; fix the module"
        ) from exc
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            names = sorted(n for n in dir(found) if not n.startswith("_"))
            raise ConfigurationError(
                f"--target {spec!r}: {module_name!r} has no attribute {attribute!r} "
                f"(it has: {', '.join(names[:20]) or 'nothing public'}); check the name after ':'"
            )
        found = getattr(found, part)
    if not callable(found):
        raise ConfigurationError(
            f"--target {spec!r}: {attribute!r} is {type(found).__name__}, not a function; "
            "name a function that takes the question and returns the answer and contexts"
        )
    function: TargetFunction = found
    return function


def _answer_from(result: Any) -> TargetAnswer:
    """Normalise what a target function returned; raises ValueError saying what it was."""
    if isinstance(result, TargetAnswer):
        if not isinstance(result.answer, str):
            raise ValueError(f"an answer that is {_type_name(result.answer)}, not a string")
        texts, ids = _contexts_from(result.contexts)
        if result.context_ids and len(result.context_ids) != len(texts):
            raise ValueError(
                f"a TargetAnswer with {len(result.context_ids)} context_ids for "
                f"{len(texts)} contexts (give one id per context, None where it has none)"
            )
        return TargetAnswer(
            answer=result.answer,
            contexts=texts,
            logprobs=_logprobs_from(result.logprobs),
            context_ids=result.context_ids or ids,
        )
    if isinstance(result, Mapping):
        missing = [key for key in ("answer", "contexts") if key not in result]
        if missing:
            raise ValueError(f"a mapping without {missing} (keys: {sorted(map(str, result))})")
        answer, contexts, logprobs = result["answer"], result["contexts"], result.get("logprobs")
    elif isinstance(result, tuple) and len(result) == 2:
        answer, contexts, logprobs = result[0], result[1], None
    else:
        raise ValueError(_type_name(result))
    if not isinstance(answer, str):
        raise ValueError(f"an answer that is {_type_name(answer)}, not a string")
    texts, ids = _contexts_from(contexts)
    return TargetAnswer(
        answer=answer, contexts=texts, logprobs=_logprobs_from(logprobs), context_ids=ids
    )


def _contexts_from(value: Any) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """Contexts as strings, and their ids (``()`` when none has one); raises
    ValueError('contexts ... ') when they are not readable."""
    if isinstance(value, str):
        return (value,), ()
    if not isinstance(value, list | tuple):
        raise ValueError(f"contexts are {_type_name(value)}; give a list of strings")
    texts = tuple(_context_text(item, index) for index, item in enumerate(value))
    ids = tuple(context_id(item) for item in value)
    return texts, ids if any(i is not None for i in ids) else ()


def context_id(item: Any) -> str | None:
    """A retrieved context's id: its ``id``, ``chunk_id``, ``node_id`` or ``id_`` (a string
    or an integer), as an attribute or a key; None for a plain string or one without."""
    if isinstance(item, str):
        return None
    for field in _CONTEXT_ID_FIELDS:
        value = item.get(field) if isinstance(item, Mapping) else getattr(item, field, None)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


def _context_text(item: Any, index: int) -> str:
    if isinstance(item, str):
        return item
    for field in _CONTEXT_TEXT_FIELDS:
        text = item.get(field) if isinstance(item, Mapping) else getattr(item, field, None)
        if isinstance(text, str):
            return text
    raise ValueError(
        f"contexts item {index} is {_type_name(item)}; give strings, or objects with a "
        "'text' or 'page_content' string"
    )


def _logprobs_from(value: Any) -> tuple[float, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(
        isinstance(item, int | float) and not isinstance(item, bool) for item in value
    ):
        raise ValueError(f"logprobs are {_type_name(value)}; give a list of numbers or leave out")
    return tuple(float(item) for item in value)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"a string ({_snippet(value)})"
    if isinstance(value, bool):
        return f"a boolean ({value!r})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, Mapping):
        return f"an object (keys: {sorted(map(str, value))[:10]})"
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= _SNIPPET else text[:_SNIPPET] + "...")
