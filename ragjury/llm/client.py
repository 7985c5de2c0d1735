"""The one LLM client every agent uses: a chat backend wrapped by instructor.

The backend (:mod:`ragjury.llm.backends`) is an OpenAI-compatible endpoint or a local GGUF
model (:mod:`ragjury.llm.local`), chosen by :func:`ragjury.llm.resolve.choose_llm`;
everything below is the same for both.

Two kinds of retry, kept apart:

* validation retries belong to instructor: when the output does not parse or validate, it
  re-asks the model with the error (``Settings.max_retries``);
* transport retries belong to us: every HTTP request goes through :meth:`LLM._send`, which
  retries 429, 5xx, timeouts and connection errors with exponential backoff and jitter,
  honouring ``Retry-After`` (``Settings.max_transport_retries``), under the endpoint's
  :class:`~ragjury.llm.limiter.AdaptiveLimiter` (AIMD concurrency; pacing to the endpoint's
  rate-limit headers and to rpm/tpm, shared across processes when given a ledger) and its
  :class:`~ragjury.llm.breaker.CircuitBreaker` (an endpoint that is down is probed, not
  hammered).

Because every request passes through ``_retrying``, every attempt's tokens are counted, priced
and added to the run's :class:`~ragjury.llm.budget.Budget`.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.lowlevel
import structlog
from pydantic import BaseModel

from ragjury import logs
from ragjury._json import JSONData
from ragjury.config import Settings
from ragjury.errors import (
    ConfigurationError,
    LLMOutputError,
    LLMTransportError,
    LLMUnavailableError,
)
from ragjury.llm import tracing
from ragjury.llm._transport import backoff, is_retryable, retry_after, status_of
from ragjury.llm.backends import ChatBackend
from ragjury.llm.batches import BatchChannel, Parked
from ragjury.llm.breaker import CircuitBreaker, Health
from ragjury.llm.budget import Budget
from ragjury.llm.judge_endpoints import judge_endpoint
from ragjury.llm.limiter import AdaptiveLimiter, Clock, Outcome
from ragjury.llm.ratelimit import HeaderBox, RateLedger, answer_box
from ragjury.llm.resolve import open_backend
from ragjury.llm.tokens import (
    COMPLETION_RESERVE,
    DEFAULT_MAX_PROMPT_TOKENS,
    context_of,
    estimate_prompt_tokens,
    estimate_tokens,
)
from ragjury.llm.usage import IN_FLIGHT, CallStats, UsageLedger
from ragjury.pricing import PriceTable
from ragjury.schemas.responses import CheckContext, checking
from ragjury.urls import redacted

if TYPE_CHECKING:  # openai and instructor are imported on the first call, not before: a run
    # that calls no model (keyword tests only) never loads them (about a second)
    import openai
    from openai.types import CreateEmbeddingResponse
    from openai.types.chat import ChatCompletion

    from ragjury.llm._structured import StructuredCreate

T = TypeVar("T", bound=BaseModel)
R = TypeVar("R")
Message = dict[str, str]
Sleep = Callable[[float], Awaitable[None]]
CallObserver = Callable[[CallStats, str | None], Awaitable[None]]
StartObserver = Callable[[CallStats], Awaitable[int | None]]
"""Told of a call before its first request; returns the call's record (kept on the stats), so
a call in flight when the process is killed is still on the books."""

_MODES = {"json": "JSON", "tools": "TOOLS", "json_schema": "JSON_SCHEMA", "md_json": "MD_JSON"}
"""``--mode`` to the name of instructor's ``Mode``."""

_current_call: ContextVar[CallStats | None] = ContextVar("ragjury_llm_call", default=None)
current_step: ContextVar[list[CallStats] | None] = ContextVar("ragjury_step_calls", default=None)
"""The runtime sets a list here while an agent handles a message; each call appends its stats."""
held_call_records: ContextVar[list[tuple[CallStats, str | None]] | None] = ContextVar(
    "ragjury_held_call_records", default=None
)
"""The runtime sets a list here while an agent handles a message whose acknowledgement stores
the step's call records: a finished call that has an in-flight record (``stats.record``) is
appended here, with its error, instead of being told to ``on_call``. The runtime stores them
with the acknowledgement, in one transaction, or on their own if the step does not end in
one."""
opened_call: ContextVar[list[int] | None] = ContextVar("ragjury_opened_call", default=None)
"""The runtime sets a list here while an agent handles a message for which the bus opened the
first call's in-flight record (PostgreSQL does as it puts the message): the first call that
would open a record takes it instead. The runtime drops a record no call took."""
log = structlog.get_logger("ragjury.llm")

_FATAL_HINTS = {
    401: "the endpoint rejected the API key; check OPENAI_API_KEY / --api-key",
    403: "the API key may not use this model or endpoint",
    404: "the model or URL was not found; check --model and --base-url (it usually ends in /v1)",
}


class LLM:
    """Structured calls to a chat model, with retries and accounting."""

    def __init__(
        self,
        settings: Settings,
        *,
        sleep: Sleep = anyio.sleep,
        clock: Clock = time.monotonic,
        on_call: CallObserver | None = None,
        on_start: StartObserver | None = None,
        seed: int | None = None,
        require_endpoint: bool = True,
        backend: ChatBackend | None = None,
        ledger: RateLedger | None = None,
        breaker: CircuitBreaker | None = None,
        run_id: str = "",
    ) -> None:
        """``ledger``: where the endpoint's rate buckets are kept (the store, so that every
        process on one database shares them); None: in this process. ``breaker``: the
        endpoint's circuit breaker (a test gives one on a clock of its own); None: one on
        ``clock`` and ``sleep`` with the settings' backoff. ``run_id``: the run whose books
        ``on_start`` puts the calls on ('': none said), so that the durable bus can open a
        step's first call's record as it puts the step's message (:data:`opened_call`)."""
        self.run_id = run_id
        self._backend: ChatBackend = backend or open_backend(settings, required=require_endpoint)
        if self._backend.model_name != settings.model:
            settings = settings.model_copy(update={"model": self._backend.model_name})
        self.settings = settings
        self.usage = UsageLedger()
        self.prices = PriceTable(settings.prices)
        if settings.max_cost is not None and self.prices.price(settings.model) is None:
            raise ConfigurationError(
                f"--max-cost needs a price for the model {settings.model!r}, and ragjury has "
                "none; add it under [prices] in ragjury.toml or in a --prices FILE, e.g. "
                f'"{settings.model}" = {{ input = 0.15, output = 0.60 }} (USD per million '
                "tokens), or use --max-tokens instead"
            )
        self.budget = Budget(settings.max_tokens, settings.max_cost)
        self._sleep = sleep
        self._clock = clock
        self._ledger = ledger
        self._siblings: dict[str, LLM] = {}
        self._run: LLM | None = None  # a panel judge's: the run's own client
        self.judge: str | None = None
        """The panel judge this client is (its calls' stages end in ``@judge``); None for
        the run's own client."""
        self._on_call = on_call
        self._on_start = on_start
        self._rng = random.Random(seed)
        endpoint = redacted(settings.base_url or "openai")
        self.limiter = AdaptiveLimiter(
            settings.concurrency,
            rpm=settings.rpm,
            tpm=settings.tpm,
            clock=clock,
            sleep=sleep,
            ledger=ledger,
            key=f"{endpoint} {self._backend.model_name}",
        )
        self.breaker = breaker or CircuitBreaker(
            base=settings.backoff_base,
            cap=settings.backoff_max,
            clock=clock,
            sleep=sleep,
            name=endpoint,
        )
        self._completions: dict[str, float] = {}
        """Completion tokens per stage, a running average: what a tpm reservation assumes."""
        mode = self._backend.forced_mode or settings.mode
        self._mode = _MODES[mode]
        self._structured: StructuredCreate | None = None  # made on the first call
        known = context_of(settings.model)
        self.max_prompt_tokens = settings.max_prompt_tokens or known or DEFAULT_MAX_PROMPT_TOKENS
        self._context_note = (
            ""
            if settings.max_prompt_tokens
            else f" ({settings.model}'s context)"
            if known
            else " (the default for a model whose context ragjury does not know)"
        )
        self.fatal_error: LLMTransportError | None = None
        self.fatal = anyio.Event()
        """Set when the endpoint refuses us outright (401, 403, 404), or could never be reached
        at all (every request of a call failed to connect and none has ever succeeded): no
        call can succeed, so the run stops and leaves its work queued. A panel judge's client
        shares the run's (its error is the run's, naming the judge's stage)."""
        self._reached = False  # has any request ever been answered?
        self.batch: BatchChannel | None = None
        """Batch mode's channel (the runner attaches one with ``--batch``); None: direct."""
        self.batching: Callable[[Settings], BatchChannel] | None = None
        """The runner's maker of a batch channel for an endpoint (its batches submitted and
        polled by the run); None where there is no store to park steps in."""

    def sibling(
        self,
        judge: str,
        model: str,
        base_url: str | None,
        temperature: float,
        *,
        batch: bool = False,
    ) -> LLM:
        """A client of another model or endpoint for the same run (``judge`` of a panel):
        its own limiter, breaker and prices (with the key, concurrency, rpm, tpm and price
        of the judge when ragjury.toml declares it as ``[panel.NAME]`` with this model and
        endpoint), the run's budget, usage ledger and call records;
        its calls' stages end in ``@judge``, so the books show each judge's calls and cost.
        Its calls go through its endpoint's batch API with ``batch`` (``--batch-judges``) or
        when this client's do (``--batch``). Made once per judge and closed with this one."""
        key = f"{judge}\n{model}\n{base_url}\n{temperature}\n{batch}"
        found = self._siblings.get(key)
        if found is None:
            update: dict[str, object] = {
                "model": model,
                "base_url": base_url,
                "temperature": temperature,
                **judge_endpoint(self.settings, judge, model, base_url),
            }
            found = LLM(
                self.settings.model_copy(update=update),
                sleep=self._sleep,
                clock=self._clock,
                on_call=self._on_call,
                on_start=self._on_start,
                ledger=self._ledger,
                run_id=self.run_id,
            )
            found.usage, found.budget, found.judge = self.usage, self.budget, judge
            found._run = self  # a judge's endpoint that refuses us stops the run
            if self.batching is not None and (batch or self.batch is not None):
                found.batch = self.batching(found.settings)
            self._siblings[key] = found
        return found

    def _refused(self, error: LLMTransportError) -> None:
        """The endpoint refused us for good: stop the run (:attr:`fatal`)."""
        for client in (self, self._run):
            if client is not None and client.fatal_error is None:
                client.fatal_error = error
                client.fatal.set()

    async def aclose(self) -> None:
        for sibling in self._siblings.values():
            await sibling.aclose()
        await self._backend.aclose()

    async def __aenter__(self) -> LLM:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def structured(
        self,
        response_model: type[T],
        messages: Sequence[Message],
        *,
        stage: str,
        context: CheckContext | None = None,
    ) -> T:
        """Ask for ``response_model``; re-ask on invalid output; retry transport failures.

        ``context`` holds what the response model's validators check the output against
        (the number of pairs asked for, the contexts quotes must come from).

        Raises :class:`LLMOutputError` when the output never validated and
        :class:`LLMTransportError` when the endpoint kept failing.
        """
        result, _ = await self.structured_call(
            response_model, messages, stage=stage, context=context
        )
        return result

    async def _create(self, response_model: type[T], *, max_retries: int, **request: JSONData) -> T:
        """instructor's structured call (prepared on the first one)."""
        if self._structured is None:
            import instructor

            from ragjury.llm._structured import StructuredCreate

            self._structured = StructuredCreate(self._send, instructor.Mode[self._mode])
        result: T = await self._structured(response_model, max_retries=max_retries, **request)
        return result

    async def structured_call(
        self,
        response_model: type[T],
        messages: Sequence[Message],
        *,
        stage: str,
        context: CheckContext | None = None,
    ) -> tuple[T, CallStats]:
        """Like :meth:`structured`, and also what the call cost (requests, tokens, logprobs)."""
        if self.judge is not None:
            stage = f"{stage}@{self.judge}"
        stats = CallStats(stage=stage, model=self.settings.model)
        if self._on_start is not None and self.batch is None:
            # (in batch mode a call is recorded when it ends: most calls park at first)
            opened = opened_call.get()
            stats.record = opened.pop() if opened else await self._on_start(stats)
        token = _current_call.set(stats)
        error: str | None = None
        parked = False
        extra: dict[str, bool] = {"logprobs": True} if self.settings.logprobs else {}
        from instructor.core import IncompleteOutputException, InstructorRetryException

        try:
            with checking(context):
                result: T = await self._create(
                    _response_schema(response_model),
                    model=self.settings.model,
                    messages=list(messages),
                    max_retries=self.settings.max_retries,
                    temperature=self.settings.temperature,
                    **extra,
                )
            return result, stats
        except InstructorRetryException as exc:
            cause = exc.__cause__
            if isinstance(cause, Parked):
                parked = True
                raise cause from None
            if isinstance(cause, LLMTransportError):
                error = cause.message
                raise LLMTransportError(
                    cause.message,
                    status_code=cause.status_code,
                    attempts=stats.requests,
                    last_raw_output=stats.last_raw_output,
                    permanent=cause.permanent,
                    unsent=cause.unsent,
                ) from cause
            error = _explain_validation(cause or exc)
            raise LLMOutputError(
                f"{stage}: the model's output did not validate after {stats.requests} "
                f"request(s): {error}",
                attempts=stats.requests,
                last_raw_output=stats.last_raw_output,
            ) from exc
        except IncompleteOutputException as exc:
            error = (
                f"{stage}: the model reached its token limit before finishing its output "
                f"(request {stats.requests}); a local model's limit is --local-max-tokens"
            )
            raise LLMOutputError(
                error, attempts=stats.requests, last_raw_output=stats.last_raw_output
            ) from exc
        except LLMTransportError as exc:
            error = exc.message
            exc.attempts = stats.requests
            raise
        finally:
            _current_call.reset(token)
            if not parked:
                await self._close_call(stats, error)

    @property
    def embedding_model(self) -> str:
        """The model that gives this client's embeddings (an endpoint's, or the offline one)."""
        return self._backend.embedding_model

    async def embed(self, texts: Sequence[str], *, stage: str) -> list[list[float]]:
        """Embeddings of ``texts`` from the endpoint's embeddings API (same retries, same books).

        Raises :class:`LLMUnavailableError`, sending nothing, when the backend cannot embed.
        """
        if self._backend.embeddings_unavailable is not None:
            raise LLMUnavailableError(f"{stage}: {self._backend.embeddings_unavailable}")
        if self.judge is not None:
            stage = f"{stage}@{self.judge}"
        stats = CallStats(stage=stage, model=self.embedding_model)
        token = _current_call.set(stats)
        error: str | None = "cancelled"
        try:
            response: CreateEmbeddingResponse = await self._retrying(
                stats,
                lambda: self._backend.embed(texts, stage=stage),
                estimate=sum(estimate_tokens(t) for t in texts),
            )
            error = None
        except LLMTransportError as exc:
            error = exc.message
            exc.attempts = stats.requests
            raise
        finally:
            _current_call.reset(token)
            await self._close_call(stats, error)
        if response.usage is not None:
            self._add_tokens(stats, response.usage.prompt_tokens, 0)
        vectors = [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
        if len(vectors) != len(texts):
            raise LLMTransportError(
                f"{stage}: asked for {len(texts)} embeddings, the endpoint returned {len(vectors)}"
            )
        return vectors

    async def _close_call(self, stats: CallStats, error: str | None) -> None:
        usage = self.usage.stage(stats.stage)
        usage.calls += 1
        usage.failed_calls += error is not None
        step = current_step.get()
        if step is not None:
            step.append(stats)
        tracing.llm_call(
            agent=stats.stage,
            model=stats.model or self.settings.model,
            seconds=stats.latency_seconds,
            requests=stats.requests,
            input_tokens=stats.prompt_tokens,
            output_tokens=stats.completion_tokens,
            cost_usd=stats.cost_usd,
            error=error,
        )
        held = held_call_records.get()
        if held is not None and stats.record is not None:
            held.append((stats, error))
        elif self._on_call is not None:
            await self._on_call(stats, error)

    async def _send(self, **kwargs: JSONData) -> ChatCompletion:
        """One chat request for instructor: sent, and re-sent while the failure is transient."""
        stats = _current_call.get()
        if stats is None:
            raise ConfigurationError("LLM._send was called outside LLM.structured")
        if self.batch is not None:
            answered = await self.batch.answer(stats, kwargs)
            if answered is not None:
                return self._batch_answer(stats, *answered)
        elif stats.requests and stats.record is not None and self._on_call is not None:
            # a re-ask: the answers so far go on the books before the next request, so a
            # process killed while it is in flight leaves them counted
            await self._on_call(stats, IN_FLIGHT)
        messages = kwargs.get("messages")
        prompt = estimate_prompt_tokens(
            m for m in (messages if isinstance(messages, list) else ()) if isinstance(m, Mapping)
        )
        if prompt > self.max_prompt_tokens:
            raise LLMTransportError(
                f"{stats.stage}: the prompt is about {prompt:,} tokens, more than "
                f"--max-prompt-tokens {self.max_prompt_tokens:,}"
                f"{self._context_note}; nothing was sent. Shorten the input (a long answer or "
                "context, or lower --chunk-size / --context-window-chars), or raise "
                "--max-prompt-tokens if the model takes more",
                permanent=True,
                unsent=True,
            )
        completion = round(self._completions.get(stats.stage, COMPLETION_RESERVE))
        response: ChatCompletion = await self._retrying(
            stats,
            lambda: self._backend.chat(stage=stats.stage, **kwargs),
            estimate=prompt + completion,
        )
        self._account(stats, response)
        if response.usage is not None:
            seen = float(response.usage.completion_tokens)
            average = self._completions.get(stats.stage)
            self._completions[stats.stage] = seen if average is None else 0.8 * average + 0.2 * seen
        return response

    async def _retrying(
        self, stats: CallStats, send: Callable[[], Awaitable[R]], *, estimate: int
    ) -> R:
        """Send when the limiter admits it; retry 429/5xx/timeouts; fail fast on other 4xx.

        ``estimate`` is the request's token estimate, reserved against ``--tpm``.
        """
        import openai

        usage = self.usage.stage(stats.stage)
        usage.model = stats.model
        retries = self.settings.max_transport_retries
        attempt = 0  # failed requests that count against --max-transport-retries
        throttled_since: float | None = None  # a 429 waits on time, not on attempts
        while True:
            health: Health = "unknown"
            # A run being stopped (cancelled: the endpoint refused it, Ctrl-C) stops here, not
            # after its next request is out: when the limiter has room nothing below waits
            # before the request is written, and aiohttp writes it before its first wait.
            await anyio.lowlevel.checkpoint_if_cancelled()
            while True:
                probe = await self.breaker.admit()
                try:
                    permit = await self.limiter.acquire(estimate)
                except BaseException:
                    self.breaker.record(health, probe=probe, sent=self.breaker.sent())
                    raise
                if probe or not self.breaker.is_open:
                    break
                # the endpoint went down while this request waited for room: not sent
                self.limiter.release(permit, "failed")
            outcome: Outcome = "failed"
            pause: float | None = None
            used = 0
            box = HeaderBox()
            box_token = answer_box.set(box)
            started = time.monotonic()
            sent = self.breaker.sent()
            stats.requests += 1
            usage.requests += 1
            if logs.enabled("debug"):
                log.debug(
                    "llm_request",
                    stage=stats.stage,
                    attempt=stats.requests,
                    estimated_tokens=estimate,
                    limit=self.limiter.limit,
                )
            try:
                response = await send()
            except openai.APIError as exc:
                failure: openai.APIError = exc
                health = "down" if _down(exc) else "answered"
                if isinstance(exc, openai.APIStatusError):
                    box.headers = exc.response.headers
                if status_of(exc) == 429:
                    outcome, pause = "throttled", retry_after(exc)
            else:
                outcome, health = "ok", "answered"
                tokens = getattr(response, "usage", None)
                used = getattr(tokens, "total_tokens", 0) or 0
                stats.statuses.append(200)
                self._reached = True
                return response
            finally:
                answer_box.reset(box_token)
                elapsed = time.monotonic() - started
                stats.latency_seconds += elapsed
                usage.latency_seconds += elapsed
                self.breaker.record(health, probe=probe, sent=sent)
                cut = self.limiter.release(
                    permit, outcome, retry_after=pause, tokens_used=used, headers=box.headers
                )
                if cut:
                    log.info("llm_limit_lowered", stage=stats.stage, limit=self.limiter.limit)
            status = status_of(failure)
            stats.statuses.append(status)
            if not is_retryable(failure):
                error = LLMTransportError(
                    f"{stats.stage}: {_fatal_message(failure)}",
                    status_code=_code(failure),
                    permanent=True,
                )
                if error.status_code in _FATAL_HINTS:
                    self._refused(error)
                raise error
            timed_out = isinstance(failure, openai.APITimeoutError)
            if status == 429:
                # waiting out a rate limit is not a failed attempt: it is bounded by time
                now = time.monotonic()
                throttled_since = now if throttled_since is None else throttled_since
                waited = now - throttled_since
                if waited >= self.settings.max_throttle_wait:
                    raise LLMTransportError(
                        f"{stats.stage}: the endpoint still answered 429 (rate limited) after "
                        f"{waited:.0f} s of waiting; lower --rpm / --tpm or --concurrency, or "
                        "wait longer with --max-throttle-wait",
                        status_code=429,
                    )
            elif attempt == retries or (timed_out and stats.statuses.count("timeout") > 1):
                # a hung endpoint is asked twice, not --max-transport-retries times: each
                # try costs a whole --timeout
                error = LLMTransportError(
                    f"{stats.stage}: {self._failed_text(failure, stats.requests)}",
                    status_code=_code(failure),
                )
                if _unreachable(failure) and not self._reached:
                    self._refused(error)
                raise error
            else:
                attempt += 1
            delay = retry_after(failure)
            if delay is None:
                delay = backoff(
                    stats.requests - 1,
                    base=self.settings.backoff_base,
                    cap=self.settings.backoff_max,
                    rng=self._rng,
                )
            log.info(
                "llm_retry",
                stage=stats.stage,
                status=status,
                attempt=stats.requests,
                wait=delay,
                limit=self.limiter.limit,
            )
            await self._sleep(delay)

    def _failed_text(self, failure: openai.APIError, requests: int) -> str:
        """Why a call gave up, and what to check."""
        import openai

        where = redacted(self.settings.base_url or "the endpoint")
        if isinstance(failure, openai.APITimeoutError):
            return (
                f"the endpoint did not answer within --timeout {self.settings.timeout:g} s "
                f"({requests} request(s)); check that {where} is up and not overloaded, or raise "
                "--timeout for a slow model"
            )
        last = f"(last: {status_of(failure)}: {_short(_cause(failure))})"
        if _unreachable(failure):
            return (
                f"the endpoint still failed after {requests} request(s) {last}; check that "
                f"{where} is up and that --base-url is right"
            )
        return (
            f"the endpoint still failed after {requests} request(s) {last}; raise "
            "--max-transport-retries or lower --concurrency"
        )

    def _batch_answer(
        self, stats: CallStats, response: ChatCompletion, first: bool
    ) -> ChatCompletion:
        """A batch's answer, booked at batch prices the first time it is used."""
        stats.statuses.append("batch")
        if first:
            stats.requests += 1
            usage = self.usage.stage(stats.stage)
            usage.requests += 1
            usage.model = stats.model
            usage.batch_requests += 1
        self._account(stats, response, batch=True, count=first)
        return response

    def _add_tokens(
        self, stats: CallStats, prompt: int, completion: int, *, batch: bool = False
    ) -> None:
        """Book one response's tokens and cost on the call, its stage and the budget."""
        usage = self.usage.stage(stats.stage)
        model = stats.model or self.settings.model
        cost = (self.prices.batch_cost if batch else self.prices.cost)(model, prompt, completion)
        if batch:
            usage.add_batch_cost(cost)
            usage.batch_prompt_tokens += prompt
            usage.batch_completion_tokens += completion
        stats.prompt_tokens += prompt
        stats.completion_tokens += completion
        stats.cost_usd = None if cost is None or stats.cost_usd is None else stats.cost_usd + cost
        usage.prompt_tokens += prompt
        usage.completion_tokens += completion
        usage.add_cost(cost)
        self.budget.add(prompt + completion, cost)

    def _account(
        self, stats: CallStats, response: ChatCompletion, *, batch: bool = False, count: bool = True
    ) -> None:
        if response.usage is not None and count:
            tokens = response.usage
            self._add_tokens(stats, tokens.prompt_tokens, tokens.completion_tokens, batch=batch)
        if response.choices:
            message = response.choices[0].message
            raw = message.content
            if raw is None and message.tool_calls:
                # in tools mode the answer is the first call's arguments (custom calls have none)
                function = getattr(message.tool_calls[0], "function", None)
                raw = function.arguments if function is not None else None
            stats.last_raw_output = raw
            content = response.choices[0].logprobs and response.choices[0].logprobs.content
            stats.logprobs = [(t.token, t.logprob) for t in content] if content else None


@functools.cache
def _response_schema(response_model: type[T]) -> type[T]:
    """instructor's wrapper of a response model, built once: instructor builds a new model
    class on every call for a plain pydantic model (about 2 ms of CPU), but reuses one that
    is already its schema type. The result is still an instance of ``response_model``."""
    import instructor

    schema: type[T] = instructor.openai_schema(response_model)
    return schema


def _code(exc: openai.APIError) -> int | None:
    import openai

    return exc.status_code if isinstance(exc, openai.APIStatusError) else None


def _short(exc: BaseException | str, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _down(exc: openai.APIError) -> bool:
    """A failure that says the endpoint is down: no connection, no answer in time, a 5xx."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError)


def _unreachable(exc: openai.APIError) -> bool:
    """A connection that could not be made at all (refused, no route, bad host), as opposed
    to one that was made and timed out."""
    import openai

    return isinstance(exc, openai.APIConnectionError) and not isinstance(
        exc, openai.APITimeoutError
    )


def _cause(exc: openai.APIError) -> BaseException:
    """What to quote for a failure: the HTTP layer's own words for a connection error
    ("All connection attempts failed"), which say more than openai's "Connection error."."""
    import openai

    if isinstance(exc, openai.APIConnectionError) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def _fatal_message(exc: openai.APIError) -> str:
    code = _code(exc)
    hint = _FATAL_HINTS.get(
        code or 0, "the same request would be refused again, so it is not retried"
    )
    return f"the endpoint answered {code}: {_endpoint_says(exc)} ({hint})"


def _endpoint_says(exc: openai.APIError) -> str:
    """The endpoint's own message (OpenAI's ``{"error": {"message": ...}}``), quoted."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if isinstance(message, str) and message.strip():
            return repr(_short(message))
    return _short(exc)


def _explain_validation(exc: BaseException) -> str:
    return _short(exc, limit=600)
