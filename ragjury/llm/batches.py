"""Batch mode: chat requests answered through a provider's batch API, hours later, at about
half the price.

No worker waits for a batch. When an agent's call needs a request that has no answer yet,
:meth:`BatchChannel.answer` queues it in the store (once: its key is a hash of the endpoint
and the request) and raises :class:`Parked`; the runner then parks the message the agent
was handling (:meth:`~ragjury.llm.batch_types.BatchLedger.park_message`) and takes the
next. :class:`~ragjury.llm.batch_poller.BatchPoller` gathers queued requests into batches,
polls them, and stores their answers, which makes the parked messages available again. The
agent handles its message once more, from the start: every request it already made is
answered from the store at once, instructor validates the answer as it always does, and
the step goes on to its next request, or ends. A re-ask (an answer that did not validate)
is a new request: it goes in the next batch, or with ``--batch-reask direct`` straight to
the endpoint.

With batch mode off none of this runs: :class:`~ragjury.llm.client.LLM` has no channel.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Literal

from ragjury.errors import LLMTransportError, Parked
from ragjury.llm.batch_types import BatchLedger
from ragjury.llm.usage import CallStats

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

__all__ = ["BatchChannel", "Parked", "current_job"]

current_job: ContextVar[str] = ContextVar("ragjury_batch_job", default="")
"""The job whose message is being handled (set by the runner in batch mode)."""


class BatchChannel:
    """Answers an LLM's chat requests from batches (see the module docstring)."""

    def __init__(
        self,
        ledger: BatchLedger,
        *,
        endpoint: str,
        reask: Literal["batch", "direct"] = "batch",
    ) -> None:
        self.ledger = ledger
        self.endpoint = endpoint
        self.reask = reask

    def key(self, request: Mapping[str, object]) -> str:
        text = json.dumps(request, sort_keys=True, default=str)
        return hashlib.sha256(f"{self.endpoint}\n{text}".encode()).hexdigest()

    async def answer(
        self, stats: CallStats, request: Mapping[str, object]
    ) -> tuple[ChatCompletion, bool] | None:
        """The batch's answer to ``request`` and whether this is its first use (its tokens
        count then, and only then); None: send it directly (a re-ask, with ``--batch-reask
        direct``; any call of a job whose batches were cancelled). Raises :class:`Parked`
        while it is not answered, and :class:`~ragjury.errors.LLMTransportError` when its
        batch failed it for good."""
        key = self.key(request)
        found = await self.ledger.batch_request(key)
        if found is None:
            if self.reask == "direct" and stats.statuses:
                return None  # this call already had an answer: this is a re-ask
            body = json.dumps(request, default=str)
            queued = await self.ledger.queue_batch_request(
                key, current_job.get(), stats.stage, body, self.endpoint
            )
            if not queued:
                return None  # the job's batches were cancelled: its calls go directly
            raise Parked(key, stats.stage)
        if found.state == "failed":
            raise LLMTransportError(
                f"{stats.stage}: the batch API failed the request: {found.error}",
                permanent=True,
            )
        if found.state != "done" or found.response is None:
            raise Parked(key, stats.stage)
        from openai.types.chat import ChatCompletion

        completion = ChatCompletion.model_validate_json(found.response)
        first = not found.booked and await self.ledger.book_batch_request(key)
        return completion, first
