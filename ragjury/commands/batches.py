"""``ragjury batches cancel JOB``: a job's batches cancelled in the store, then at the
provider.

The store comes first: once the job's batches are ended there (and its unanswered requests
dropped, its parked messages woken), no process polls them or submits their requests again,
whatever the provider does; a batch a process was creating at that moment is cancelled by
that process when it finds the submission ended. The provider is then asked to cancel each
batch; one it cannot cancel (already ended, or the endpoint down) is named, and costs at
most its own answers, which nothing reads.
"""

from __future__ import annotations

import argparse

import openai
from rich.console import Console

from ragjury.commands.queue import _existing_db
from ragjury.config import Settings
from ragjury.errors import ConfigurationError
from ragjury.llm.batch_poller import DEFAULT_ENDPOINT, BatchPoller
from ragjury.store import open_store
from ragjury.urls import redacted


async def batches_command(args: argparse.Namespace, settings: Settings) -> int:
    _existing_db(settings)
    console = Console(stderr=True)
    async with open_store(settings.db, concurrency=settings.concurrency) as store:
        try:
            await store.job(args.job)
        except KeyError:
            raise ConfigurationError(
                f"there is no job {args.job!r} in {settings.db_shown}; `ragjury status` lists "
                "the jobs and their batches"
            ) from None
        cancelled = await store.cancel_batches(args.job)
        failed = 0
        own = redacted(settings.base_url or DEFAULT_ENDPOINT)
        for endpoint in sorted({e for _, e in cancelled.provider}):
            # the run's own endpoint with the key given here; a judge's from the job
            url = (settings.base_url or DEFAULT_ENDPOINT) if endpoint == own else endpoint
            poller = BatchPoller(store, settings.model_copy(update={"base_url": url}))
            try:
                for provider_id in (p for p, e in cancelled.provider if e == endpoint):
                    try:
                        await poller.cancel([provider_id])
                    except openai.APIError as exc:
                        failed += 1
                        console.print(
                            f"ragjury batches: {endpoint} did not cancel batch {provider_id} "
                            f"({exc}); cancel it there if it still runs (its answers are not "
                            "used)",
                            soft_wrap=True,
                            markup=False,
                            highlight=False,
                        )
            finally:
                await poller.aclose()
    batches = len(cancelled.provider) + cancelled.submitting
    console.print(
        f"ragjury batches: cancelled {batches} batch(es) of job {args.job}"
        + (f" ({', '.join(p for p, _ in cancelled.provider)})" if cancelled.provider else "")
        + f"; {cancelled.requests} request(s) not yet answered, and every later call of the "
        "job, go directly at the direct price (the run working the job goes on; or run the "
        "same command again)",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    return 1 if failed else 0
