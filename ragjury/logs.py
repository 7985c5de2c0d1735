"""structlog set-up: JSON lines when stderr is not a terminal, readable lines when it is.

A warning meant for a person (a repaired input, a skipped file, an endpoint gone down, the
tiny bundled model) carries ``say``, a sentence: the commands print that sentence on stderr
(``ragjury: warning: ...``) instead of a log line; ``serve``, whose logs go to a collector,
keeps them as log lines with the sentence in the ``say`` field."""

from __future__ import annotations

import logging
import sys

import structlog

from ragjury.urls import redact_text

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_configured: tuple[object, int] | None = None
"""The wrapper class :func:`configure_logging` set, with its level; None before it runs."""


def configure_logging(
    level: str = "warning", *, json: bool | None = None, sentences: bool = True
) -> None:
    """Route ragjury's structured logs to stderr at ``level``; with ``sentences``, an event
    that carries ``say`` is printed as that sentence."""
    name = level.lower()
    if name not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(_LEVELS)}")
    use_json = not sys.stderr.isatty() if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    global _configured
    wrapper = structlog.make_filtering_bound_logger(_LEVELS[name])
    _configured = (wrapper, _LEVELS[name])
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redact_secrets,
            *([_say_to_people] if sentences else []),
            renderer,
        ],
        wrapper_class=wrapper,
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
    quiet_dependencies()
    _redact_stdlib_records()


def enabled(level: str) -> bool:
    """Whether a line at ``level`` is printed: False only under ragjury's own set-up at a
    higher level. The per-message and per-request lines ask first, because a structlog line
    that is filtered out still costs tens of microseconds (its logger is built each time,
    so that a new level or a new stderr applies); an application's own structlog set-up
    gets every line."""
    if _configured is None:
        return True
    wrapper, minimum = _configured
    return _LEVELS[level] >= minimum or structlog.get_config()["wrapper_class"] is not wrapper


def _redact_stdlib_records() -> None:
    """The libraries' own log records (stdlib logging: an exporter that cannot reach its
    endpoint, a driver) pass the same redaction as ragjury's, whoever prints them; an
    application's own record factory is left alone."""
    if logging.getLogRecordFactory() is logging.LogRecord:
        logging.setLogRecordFactory(_RedactedRecord)


class _RedactedRecord(logging.LogRecord):
    def getMessage(self) -> str:
        return redact_text(super().getMessage())


def _redact_secrets(
    _logger: object, _method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """No password of a URL, nor a secret query parameter, in any logged text (exceptions
    from the HTTP stack quote the URL they failed on)."""
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact_text(value)
    return event


def _say_to_people(
    _logger: object, method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """An event meant for a person (it has ``say``) as one sentence on stderr, not a log line."""
    say = event.get("say")
    if not isinstance(say, str):
        return event
    level = "warning" if method == "warn" else method
    print(f"ragjury: {level}: {say}", file=sys.stderr, flush=True)
    raise structlog.DropEvent


def _stderr_logger(*args: object) -> structlog.PrintLogger:
    """A logger on whatever sys.stderr is now, not on the one set up at configure time
    (an application or a test harness may swap it, and the old one may be closed)."""
    return structlog.PrintLogger(file=sys.stderr)


def configure_if_unset(level: str = "warning") -> None:
    """For library use: set up ragjury's logging only if the application has not set up
    structlog itself; structlog's own default would print every info line to stdout."""
    if not structlog.is_configured():
        configure_logging(level)
    quiet_dependencies()


def quiet_dependencies() -> None:
    """instructor and the HTTP stack log every retried call at ERROR through stdlib logging;
    ragjury reports those itself (llm_retry, failed outcomes), so keep them quiet."""
    # pypdf warns about broken files ("EOF marker not found"): the loaders report those;
    # asyncpg prints a traceback at each try to refill its pool while the server is down:
    # the store says database_unreachable once, then database_reachable_again
    for noisy in ("instructor", "openai", "httpx", "httpx2", "httpcore", "pypdf", "asyncpg"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
