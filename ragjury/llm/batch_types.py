"""What batch mode keeps in the store, as plain values, and the store role that keeps it.

A request sent through a provider's batch API is a row keyed by a hash of what it asks
(:class:`BatchRequest`); a batch is a row of ours (a *submission*) that becomes the
provider's batch once created (:class:`Submission`, :class:`OpenBatch`); a handler step
that waits for a request's answer is its bus message, parked until the answer lands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

RequestState = Literal["queued", "submitted", "done", "failed"]


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """A request's state; its answer (the chat completion's JSON) or its error once ended."""

    state: RequestState
    response: str | None = None
    error: str | None = None
    booked: bool = False
    """Whether its tokens were already counted (a replay of the step counts them once)."""


@dataclass(frozen=True, slots=True)
class Submission:
    """Requests claimed to go out as one batch. ``resumed``: a submission a process began
    and did not finish (it may have created the batch already)."""

    id: str
    job_id: str
    lines: Sequence[tuple[str, str, str]]
    """(key, stage, body) of each request."""
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class OpenBatch:
    """A batch the provider holds, due to be polled."""

    id: str
    provider_id: str
    polls: int


@dataclass(frozen=True, slots=True)
class Answer:
    """What a batch said of one request: its completion's JSON, or an error."""

    key: str
    response: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CancelledBatches:
    """What ``ragjury batches cancel`` ended in the store: the provider's batches to cancel
    there, as (provider id, endpoint), the submissions not yet created and the requests
    that will now be sent directly."""

    provider: Sequence[tuple[str, str]]
    submitting: int
    requests: int


@dataclass(slots=True)
class BatchInFlight:
    """A row of ``ragjury status``: a batch not yet ended."""

    job_id: str
    provider_id: str | None
    status: str | None
    requests: int
    age_seconds: float
    extra: dict[str, str] = field(default_factory=dict)


class BatchLedger(Protocol):
    """The store's batch role (:class:`~ragjury.store.sql.batches.BatchesSQL`)."""

    async def batch_request(self, key: str) -> BatchRequest | None: ...

    async def queue_batch_request(
        self, key: str, job_id: str, stage: str, body: str, endpoint: str = ""
    ) -> bool:
        """Queue a request (once) for ``endpoint``'s batches; False when the job's batches
        were cancelled (``ragjury batches cancel``): the request is then sent directly."""
        ...

    async def book_batch_request(self, key: str) -> bool:
        """Mark the answer's tokens counted; False when they already were."""
        ...

    async def park_message(self, message_id: int, key: str) -> None:
        """Take the message off the bus until ``key`` has ended (at once if it has)."""
        ...

    async def claim_submission(
        self, owner: str, endpoint: str, *, size: int, wait: float, lease: float
    ) -> Submission | None: ...

    async def batch_created(self, submission: str, provider_id: str, next_poll: float) -> bool:
        """Store the provider's id of a submission; False when the submission was cancelled
        meanwhile (the provider's batch is then to be cancelled too)."""
        ...

    async def due_batches(
        self, owner: str, limit: int, lease: float, endpoint: str | None = None
    ) -> list[OpenBatch]:
        """Open batches due a poll (of ``endpoint``, or any), leased to ``owner``."""
        ...

    async def batch_polled(self, batch_id: str, status: str, next_poll: float) -> None: ...

    async def end_batch(
        self, batch_id: str, status: str, answers: Sequence[Answer], *, max_tries: int
    ) -> None:
        """Store the answers, send the unanswered back to the queue (or fail them after
        ``max_tries``), wake the parked messages whose requests ended, end the batch."""
        ...

    async def batches_in_flight(self) -> list[BatchInFlight]: ...

    async def cancel_batches(self, job_id: str) -> CancelledBatches:
        """End the job's batches as cancelled, drop its unanswered requests and wake the
        messages parked on them; from then on the job's calls are sent directly."""
        ...
