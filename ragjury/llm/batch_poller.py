"""Gathers queued requests into batches, submits them, polls them, stores their answers.

Several processes on one database may each run a poller: submissions and polls are
claimed under leases in the store. A submission is written to the store before anything is
sent, and its id goes to the provider as the batch's ``metadata``: a process killed after
creating a batch and before storing its id leaves a submission whose lease runs out, and
the process that takes it over finds the batch by that id among the provider's batches
instead of submitting it again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Sequence
from typing import Literal

import anyio
import openai
import structlog
from openai.types import Batch

from ragjury.config import Settings
from ragjury.errors import ConfigurationError
from ragjury.llm.batch_types import Answer, BatchLedger, OpenBatch, Submission
from ragjury.urls import redacted

log = structlog.get_logger("ragjury.llm.batches")

CHAT_URL: Literal["/v1/chat/completions"] = "/v1/chat/completions"
_RUNNING = ("validating", "in_progress", "finalizing", "cancelling")
_LEASE = 120.0
_MAX_POLL = 600.0
_METADATA = "ragjury_submission"
DEFAULT_ENDPOINT = "https://api.openai.com/v1"
"""Where the openai client sends a run's calls when no --base-url is given."""


class BatchPoller:
    """Submits and polls one endpoint's batches for the requests in ``ledger``."""

    def __init__(self, ledger: BatchLedger, settings: Settings, *, owner: str = "") -> None:
        self.ledger = ledger
        self.settings = settings
        self.endpoint = redacted(settings.base_url or DEFAULT_ENDPOINT)
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:batches"
        self._failed: dict[str, tuple[Submission, int]] = {}
        """Submissions the endpoint failed, with how often, to be tried again."""
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "not-needed",
            timeout=settings.timeout,
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def check(self, *, who: str = "--batch", fix: str = "run without --batch") -> None:
        """Raise a :class:`ConfigurationError` naming the endpoint when it has no Files or
        Batch API (before anything is queued for it); ``who`` asked for batches there."""
        await _check(self._client, self.endpoint, who, fix)

    async def run(self) -> None:
        """Submit and poll until cancelled."""
        tick = min(1.0, self.settings.batch_poll, max(self.settings.batch_wait, 0.05))
        while True:
            busy = await self.step()
            if not busy:
                await anyio.sleep(tick)

    async def step(self) -> bool:
        """Submit what is due and poll what is due, once; whether anything was done.

        The endpoint failing a submission (a 5xx, a timeout, a refused upload) is retried
        at the next step, as a resumed submission (the batch may have been made before the
        error), up to ``--max-transport-retries`` times; then its batch ends unanswered and
        its requests are queued again or failed as the retry policy says. A poll that fails
        is made again when its lease runs out."""
        done = False
        retried, self._failed = self._failed, {}
        for failed, failures in retried.values():
            await self._submit(dataclasses.replace(failed, resumed=True), failures)
        while (submission := await self._claim()) is not None:
            await self._submit(submission, 0)
            done = True
        for batch in await self.ledger.due_batches(self.owner, 20, _LEASE, self.endpoint):
            try:
                await self.poll(batch)
            except openai.APIError as exc:
                log.warning("batch_poll_failed", batch=batch.provider_id, error=str(exc))
            done = True
        return done

    async def _submit(self, submission: Submission, failures: int) -> None:
        try:
            await self.submit(submission)
        except openai.APIError as exc:
            failures += 1
            log.warning(
                "batch_submit_failed", submission=submission.id, failures=failures, error=str(exc)
            )
            tries = self.settings.max_transport_retries + 1
            if failures < tries:
                self._failed[submission.id] = (submission, failures)
            else:
                await self.ledger.end_batch(
                    submission.id, f"not submitted: {exc}", [], max_tries=tries
                )

    async def _claim(self) -> Submission | None:
        return await self.ledger.claim_submission(
            self.owner,
            self.endpoint,
            size=self.settings.batch_size,
            wait=self.settings.batch_wait,
            lease=_LEASE,
        )

    async def submit(self, submission: Submission) -> None:
        """Upload the requests and create their batch (or find the one made before a crash)."""
        if submission.resumed:
            found = await self._created_before(submission.id)
            if found is not None:
                log.info("batch_found", submission=submission.id, batch=found)
                await self._created(submission, found)
                return
        lines = [
            json.dumps(
                {"custom_id": f"{stage}:{key}", "method": "POST", "url": CHAT_URL,
                 "body": json.loads(body)}
            )
            for key, stage, body in submission.lines
        ]  # fmt: skip
        content = ("\n".join(lines) + "\n").encode("utf-8")
        upload = await self._client.files.create(
            file=(f"ragjury-{submission.id}.jsonl", content), purpose="batch"
        )
        batch = await self._client.batches.create(
            input_file_id=upload.id,
            endpoint=CHAT_URL,
            completion_window="24h",
            metadata={_METADATA: submission.id, "ragjury_job": submission.job_id},
        )
        await self._created(submission, batch.id)
        log.info("batch_submitted", job=submission.job_id, batch=batch.id, requests=len(lines))

    async def _created(self, submission: Submission, provider_id: str) -> None:
        if not await self.ledger.batch_created(
            submission.id, provider_id, self.settings.batch_poll
        ):  # cancelled (ragjury batches cancel) while it was being submitted
            log.info("batch_cancelled_while_submitted", batch=provider_id)
            await self._client.batches.cancel(provider_id)

    async def _created_before(self, submission: str) -> str | None:
        async for batch in self._client.batches.list(limit=100):
            if (batch.metadata or {}).get(_METADATA) == submission:
                return batch.id
        return None

    async def poll(self, open_batch: OpenBatch) -> None:
        """Ask how a batch is doing; store its answers when it has ended."""
        batch = await self._client.batches.retrieve(open_batch.provider_id)
        if batch.status in _RUNNING:
            wait = min(self.settings.batch_poll * 2 ** min(open_batch.polls, 8), _MAX_POLL)
            await self.ledger.batch_polled(open_batch.id, batch.status, wait)
            return
        answers = await self._answers(batch)
        await self.ledger.end_batch(
            open_batch.id,
            batch.status,
            answers,
            max_tries=self.settings.max_transport_retries + 1,
        )
        log.info("batch_ended", batch=batch.id, status=batch.status, answered=len(answers))

    async def cancel(self, provider_ids: Sequence[str]) -> None:
        for provider_id in provider_ids:
            await self._client.batches.cancel(provider_id)

    async def _answers(self, batch: Batch) -> list[Answer]:
        answers: list[Answer] = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                text = (await self._client.files.content(file_id)).text
                answers += parse_lines(text.splitlines())
        return answers


async def check_batch_api(settings: Settings, *, who: str, fix: str) -> None:
    """:meth:`BatchPoller.check` of ``settings``' endpoint, without a poller."""
    client = openai.AsyncOpenAI(
        base_url=settings.base_url, api_key=settings.api_key or "not-needed", timeout=30.0
    )
    try:
        await _check(client, redacted(settings.base_url or DEFAULT_ENDPOINT), who, fix)
    finally:
        await client.close()


async def _check(client: openai.AsyncOpenAI, endpoint: str, who: str, fix: str) -> None:
    for path, probe in (
        ("/v1/files", lambda: client.files.list(purpose="batch")),
        ("/v1/batches", lambda: client.batches.list(limit=1)),
    ):
        try:
            await probe()
        except openai.NotFoundError as exc:
            raise ConfigurationError(
                f"{who} needs the endpoint's {path} (OpenAI's Files and Batch APIs), and "
                f"{endpoint} answered 404 there; use an endpoint that has them (OpenAI, "
                f"Azure OpenAI, a vLLM or LiteLLM batch server) or {fix}"
            ) from exc


def parse_lines(lines: Sequence[str]) -> list[Answer]:
    """The answers in a batch's output or error file. A line that cannot be read, and an
    answer that may succeed if asked again (429, 5xx, a request the batch did not reach),
    is left out: its request goes back to the queue. Another HTTP error fails it."""
    answers: list[Answer] = []
    for line in lines:
        try:
            entry = json.loads(line)
            custom_id = str(entry["custom_id"])
        except (ValueError, KeyError, TypeError):
            if line.strip():
                log.warning("batch_line_unreadable", line=line[:200])
            continue
        key = custom_id.split(":", 1)[-1]
        response = entry.get("response") or {}
        status = response.get("status_code")
        if status == 200 and isinstance(response.get("body"), dict):
            answers.append(Answer(key, response=json.dumps(response["body"])))
        elif isinstance(status, int) and 400 <= status < 500 and status != 429:
            answers.append(Answer(key, error=f"{status}: {_message(response.get('body'))}"))
    return answers


def _message(body: object) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return str(body)[:300]
