"""One exception tree for ragjury. Every message says what happened, the offending value,
and what to do next.

::

    RagjuryError
    ├── ConfigurationError        bad or missing settings (no endpoint, bad option value,
    │                             an API key or model the endpoint rejects)
    ├── EndpointUnreachableError  the LLM endpoint could not be reached at all: the run
    │                             stopped with nothing judged (exit code 4)
    ├── InputError                input files or records that cannot be used
    ├── StoreUnavailableError     the database server stayed out of reach past
    │                             --db-reconnect (exit code 7)
    ├── BusError                  the bus is closed or misused
    ├── TargetError               your RAG system (--target) was unreachable, failed or
    │                             answered in a shape ragjury cannot read
    ├── MetricNotRequested        result["name"] of a metric the sample was not judged on
    │                             (also a KeyError and an AttributeError)
    └── LLMError
        ├── LLMTransportError     429 / 5xx / timeouts that outlived every retry, or a 4xx
        ├── LLMOutputError        output that never parsed or validated
        └── LLMUnavailableError   the configured model cannot do this (embeddings on --llm local)

Outside the tree, ``Parked`` is no error: in batch mode it tells the runner that a step
waits for a batch's answer, and the runner parks the step's message in the store.

A result that is not a number is not an exception: a judgement that failed is a
``MetricResult`` with ``outcome="failed"`` and its ``Failure`` record.
"""

from __future__ import annotations


class RagjuryError(Exception):
    """Base class of every error ragjury raises on purpose."""


class ConfigurationError(RagjuryError):
    """Settings are missing or invalid; the message names the setting and how to fix it."""


class EndpointUnreachableError(RagjuryError):
    """The LLM endpoint refused or never answered a connection in this run; the run stopped
    with its work queued, nothing judged."""


class InputError(RagjuryError):
    """An input path or record cannot be used."""


class StoreUnavailableError(RagjuryError):
    """The database server stayed out of reach longer than ragjury waits for it."""


class BusError(RagjuryError):
    """The bus was used after it closed, or in a way it does not support."""


class TargetError(RagjuryError):
    """The target could not be reached, failed, or replied in a shape ragjury cannot read."""


class MetricNotRequested(RagjuryError, KeyError, AttributeError):
    """``result[name]`` or ``result.name`` of a metric the sample was not judged on."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class LLMError(RagjuryError):
    """An LLM call did not produce a usable result.

    ``attempts`` counts every request sent for the call, retries included;
    ``last_raw_output`` is the text of the last completion, if any arrived.
    """

    def __init__(
        self, message: str, *, attempts: int = 0, last_raw_output: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.attempts = attempts
        self.last_raw_output = last_raw_output


class LLMTransportError(LLMError):
    """The endpoint kept failing (429, 5xx, timeouts) or refused the request (other 4xx)."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        attempts: int = 0,
        last_raw_output: str | None = None,
        permanent: bool = False,
        unsent: bool = False,
    ) -> None:
        super().__init__(message, attempts=attempts, last_raw_output=last_raw_output)
        self.status_code = status_code
        self.permanent = permanent
        """The same request would fail again (a 4xx other than 408/409/429, a prompt too
        large for the model): it is not retried in this run."""
        self.unsent = unsent
        """Nothing was sent (refused here, over --max-prompt-tokens): a re-run tries the step
        again, which costs nothing when it is refused again and lets a raised limit count."""


class LLMOutputError(LLMError):
    """The model's output never parsed or validated within the allowed retries."""


class LLMUnavailableError(LLMError):
    """The configured backend cannot do what was asked (no request was sent)."""


class Parked(Exception):
    """Batch mode: the step asked for a request no batch has answered yet (it is queued)."""

    def __init__(self, key: str, stage: str) -> None:
        super().__init__(f"{stage}: waiting for the answer to batched request {key[:12]}")
        self.key = key
        self.stage = stage
