"""OpenTelemetry traces of a run, for Phoenix, Langfuse, LangSmith or any OTLP collector.

Off unless asked for (``--otel``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` on the command line, or
``Settings(otel=True)`` for :class:`~ragjury.jury.Jury`), and then three kinds of span:

* ``ragjury.step {agent}``: one handled message (agent, item, job, attempt, whether it came
  from the step cache);
* ``chat {model}``: one LLM call inside it, with the GenAI semantic conventions' attributes
  (``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` /
  ``output_tokens``, ``error.type``) and ragjury's own (requests sent with retries, cost);
* ``ragjury.item {id}``: a document or sample whose results were stored, with its outcome
  (for a sample: passing, and each metric's outcome and score), from the first step this
  process handled for it. Where several processes share a job (``serve`` workers, a resumed
  run) that is the first step the finishing process handled, so its duration is that
  process's share of the item; the outcome is the stored one.

The command line exports them itself (OTLP over HTTP, to ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
http://localhost:4318); an application that embeds a ``Jury`` has its own tracer provider,
which ragjury then uses. The ``otel`` extra brings the packages.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ragjury.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_first_seen: dict[str, int] = {}
_FIRST_SEEN_KEPT = 100_000

Attribute = str | int | float | bool


def _missing(exc: ImportError) -> ConfigurationError:
    return ConfigurationError(
        f"traces need the otel extra ({exc.name} is not installed): "
        "pip install 'ragjury[otel]', or drop --otel / OTEL_EXPORTER_OTLP_ENDPOINT"
    )


def export(service: str = "ragjury") -> None:
    """Send this process's spans over OTLP/HTTP (the command line's own provider); the
    exporter reads the standard ``OTEL_EXPORTER_OTLP_*`` variables."""
    global _tracer, _provider
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise _missing(exc) from exc
    from ragjury import __version__

    _remember_exporter_secrets()
    _provider = TracerProvider(resource=Resource.create({"service.name": service}))
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _tracer = _provider.get_tracer("ragjury", __version__)


def _remember_exporter_secrets() -> None:
    """Where the OTLP endpoint enters: its password and the credentials among its headers
    are hidden in any text (the exporter logs its endpoint when it cannot reach it)."""
    from urllib.parse import unquote

    from ragjury.urls import remember_secret, remember_secrets, secret_header

    for kind in ("", "TRACES_"):
        remember_secrets(os.environ.get(f"OTEL_EXPORTER_OTLP_{kind}ENDPOINT"))
        for pair in os.environ.get(f"OTEL_EXPORTER_OTLP_{kind}HEADERS", "").split(","):
            name, _, value = pair.partition("=")
            if value and secret_header(unquote(name)):
                remember_secret(unquote(value).strip())


def use_global() -> None:
    """Trace with the application's tracer provider (``Jury`` with ``Settings(otel=True)``)."""
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise _missing(exc) from exc
    from ragjury import __version__

    _tracer = trace.get_tracer("ragjury", __version__)


def flush() -> None:
    """Send what is buffered and stop exporting (the end of a command)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer, _provider = None, None
    _first_seen.clear()


def enabled() -> bool:
    return _tracer is not None


@contextmanager
def step(agent: str, item: str, job: str, attempt: int) -> Iterator[dict[str, Attribute]]:
    """A span around one handled message; the caller may add attributes to the dict it
    gets (set when the span ends)."""
    extra: dict[str, Attribute] = {}
    if _tracer is None:
        yield extra
        return
    if item not in _first_seen and len(_first_seen) < _FIRST_SEEN_KEPT:
        _first_seen[item] = time.time_ns()
    attributes: dict[str, Attribute] = {
        "ragjury.agent": agent,
        "ragjury.item": item,
        "ragjury.job": job,
        "ragjury.attempt": attempt,
    }
    with _tracer.start_as_current_span(f"ragjury.step {agent}", attributes=attributes) as span:
        yield extra
        span.set_attributes(extra)


def llm_call(
    *,
    agent: str,
    model: str | None,
    seconds: float,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    cost_usd: float | None,
    error: str | None,
) -> None:
    """One LLM call that has ended, as a client span of the current step."""
    if _tracer is None:
        return
    from opentelemetry.trace import SpanKind, Status, StatusCode

    end = time.time_ns()
    attributes: dict[str, Attribute] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": model or "",
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "ragjury.agent": agent,
        "ragjury.requests": requests,
    }
    if cost_usd is not None:
        attributes["ragjury.cost_usd"] = cost_usd
    span = _tracer.start_span(
        f"chat {model or 'unknown'}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        start_time=end - int(seconds * 1e9),
    )
    if error is not None:
        span.set_attribute("error.type", error.split(":", 1)[0])
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=end)


def item_done(item: str, job: str, kind: str, outcome: Mapping[str, Attribute]) -> None:
    """A document or sample whose results are stored, with ``outcome``'s attributes."""
    if _tracer is None:
        return
    end = time.time_ns()
    span = _tracer.start_span(
        f"ragjury.item {item}",
        attributes={"ragjury.item": item, "ragjury.job": job, "ragjury.kind": kind, **outcome},
        start_time=_first_seen.pop(item, end),
    )
    span.end(end_time=end)
