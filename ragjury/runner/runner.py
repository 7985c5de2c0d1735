"""The runner: intake of queued items, the workers, the bus, and how they start and stop.
``ragjury serve`` (and ``Jury.serve``) runs it until stopped; ``generate``, ``evaluate``,
``calibrate`` and ``Jury`` run it until their job is done (:func:`run_job`).

* **Intake** claims queued items (at most ``--items-in-flight`` started by this process and
  not yet ended), publishes each item's first events and marks it started. It stops taking
  items when the budget is spent: ``--max-tokens`` / ``--max-cost`` count every call
  recorded in the store since this process started, by any process, so daemons that share a
  database stop together. A job that calls no LLM and no RAG target (keyword tests only)
  that a one-shot run submits has its items ended as they are stored
  (:mod:`ragjury.runner.at_once`): the intake finds none of them queued.
* **Workers** (:class:`~ragjury.runner.workers.Workers`) handle the messages of their roles for any
  job. ``--agents`` chooses the roles (``intake`` is one of them).
* **Stopping**: intake stops at once; the items this process started get ``--grace``
  seconds to end; then the workers stop and everything held goes back to the bus for others.
  Nothing finished is lost, and nothing is waited for in memory: whether a job is done is
  asked of the store.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import structlog
from anyio.abc import TaskStatus

from ragjury._json import JSONObject
from ragjury.agents.joins import HeldJoins, joins_held, stored_parts
from ragjury.bus import Bus, DurableBus, MemoryBus, Message
from ragjury.config import Settings
from ragjury.errors import ConfigurationError, EndpointUnreachableError, RagjuryError
from ragjury.evaluation.targets import Target
from ragjury.llm import LLM
from ragjury.metrics import Metric
from ragjury.pipelines import PIPELINES, llm_roles
from ragjury.prompts import Prompt
from ragjury.runner.at_once import JudgeNow
from ragjury.runner.progress import EventListener, Progress, RunCounts
from ragjury.runner.submit import scored_samples, submit_samples
from ragjury.runner.workers import Workers
from ragjury.schemas import Sample, SampleScored
from ragjury.schemas.panel import Panel
from ragjury.store import SQLiteStore
from ragjury.store.base import Item, Job, Store
from ragjury.store.cache import StepCache

if TYPE_CHECKING:
    from ragjury.runner.batching import BatchPollers

log = structlog.get_logger("ragjury.runner")

INTAKE = "intake"


def intake_capacity(settings: Settings) -> int:
    """Items one intake keeps started at once: ``--items-in-flight``, else 2 x concurrency,
    and with ``--batch`` at least ``--batch-size``: a parked item holds no worker, and a
    batch can only be as full as the items started (each round of batches costs the
    provider's turnaround, hours)."""
    if settings.items_in_flight:
        return settings.items_in_flight
    direct = max(4, 2 * settings.concurrency)
    return max(direct, settings.batch_size) if settings.batch else direct


INLINE_ITEMS_IN_FLIGHT = 256
"""Items one intake keeps started at once for jobs that call no LLM (keyword tests only)
whose items are queued (submitted for ``serve``, or left by an older ragjury): they end
where they start, so more of them at once means more of them per group commit, for a few
megabytes."""


def new_owner() -> str:
    """A process's name in the leases it holds."""
    return uuid.uuid4().hex[:12]


class Runner:
    """Intake and workers of one process over ``store``; :meth:`run` until done or stopped.
    Progress reaches the caller through ``on_event`` / ``on_output``."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        llm: LLM,
        *,
        roles: Sequence[str] | None = None,
        intake: bool = True,
        job_ids: Sequence[str] | None = None,
        on_event: EventListener | None = None,
        on_output: EventListener | None = None,
        target: Target | None = None,
        bus: Bus | None = None,
    ) -> None:
        self.settings, self.store, self.llm = settings, store, llm
        self.owner = new_owner()
        self.job_ids = list(job_ids) if job_ids is not None else None
        self.intake = intake
        self._has_target = target is not None
        self.bus: Bus = bus or DurableBus(
            store,
            self.owner,
            lease_seconds=settings.lease_seconds,
            max_deliveries=settings.max_deliveries,
            poll_interval=settings.poll_interval,
            job_ids=self.job_ids,
            run_id=llm.run_id if llm.batch is None else "",
        )
        self.progress = Progress(on_event, on_output)
        self.cache = StepCache(store, enabled=settings.cache)
        self.workers = Workers(
            store,
            self.bus,
            settings,
            llm,
            roles=roles,
            progress=self.progress,
            cache=self.cache,
            target=target,
        )
        self.stopping = anyio.Event()
        self.budget_stopped = False
        self._claimed: dict[int, Item] = {}
        self._started_at = time.time()

    @property
    def counts(self) -> RunCounts:
        return self.progress.counts

    @property
    def agents(self) -> list[str]:
        return ([INTAKE] if self.intake else []) + list(self.workers.roles)

    def stop(self) -> None:
        """Take no new item; give the items this process started the grace period."""
        if not self.stopping.is_set():
            log.info("runner_stopping", owner=self.owner)
        self.stopping.set()

    async def run(
        self,
        *,
        until_done: bool = False,
        stop: anyio.Event | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> RunCounts:
        """Work until stopped (``stop`` set, or :meth:`stop`) or, with ``until_done``, until
        the jobs (``job_ids``, or all) have nothing unfinished."""
        if stop is not None and stop.is_set():  # stopped before it started: take nothing
            self.stop()
        released = await self.store.register_worker(self.owner, self.agents)
        if released:
            log.info("released_from_dead_processes", count=released)
        refused = False
        try:
            batches = await self._batch_pollers()
            async with anyio.create_task_group() as tg:
                if batches is not None:
                    await tg.start(batches.run)
                await tg.start(self.workers.run)
                tg.start_soon(self._heartbeat)
                if stop is not None:
                    tg.start_soon(self._stop_when_set, stop)

                async def refuse() -> None:
                    nonlocal refused
                    await self.llm.fatal.wait()
                    refused = True
                    # info: the ConfigurationError raised below tells the person, once
                    log.info("endpoint_refused", error=str(self.llm.fatal_error))
                    tg.cancel_scope.cancel()

                tg.start_soon(refuse)
                log.info("runner_started", owner=self.owner, agents=self.agents)
                task_status.started()
                if self.intake:
                    async with anyio.create_task_group() as starting:
                        await self._intake(starting, until_done)
                await self._finish()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.bus.aclose()
                if self._claimed:
                    self.counts.released += await self.store.release_items(
                        self.owner, list(self._claimed)
                    )
                await self.store.unregister_worker(self.owner)
        if refused and self.llm.fatal_error is not None:
            # no connection at all: nothing judged (4); a key or model refused: settings (2)
            unreachable = self.llm.fatal_error.status_code is None
            refusal = EndpointUnreachableError if unreachable else ConfigurationError
            raise refusal(
                f"{self.llm.fatal_error.message}. Nothing is lost: unfinished work stays queued "
                f"in {self.store.location}, and the same command resumes it."
            ) from self.llm.fatal_error
        return self.counts

    async def _batch_pollers(self) -> BatchPollers | None:
        """Batch mode: the pollers of the endpoints this run sends batches to (the run's own
        with ``--batch``, checked now; a judge's when its client is made). None without a
        store to park steps in."""
        from ragjury.runner.batching import BatchPollers

        if not isinstance(self.bus, DurableBus):
            if self.settings.batch:
                raise ConfigurationError(
                    "--batch needs a job in the store (--db); Jury.evaluate_one and other "
                    "in-memory runs call the endpoint directly"
                )
            return None
        pollers = BatchPollers(self.store, self.llm, self.owner)
        if self.settings.batch:
            await pollers.check_run_endpoint(self.settings)
        return pollers

    async def _stop_when_set(self, stop: anyio.Event) -> None:
        await stop.wait()
        self.stop()

    async def _heartbeat(self) -> None:
        while True:
            await anyio.sleep(self.settings.lease_seconds / 4)
            await self.store.heartbeat(self.owner)

    async def _budget_spent(self) -> bool:
        """Whether --max-tokens / --max-cost is reached, counting every process's calls."""
        budget = self.llm.budget
        if budget.max_tokens is not None or budget.max_cost is not None:
            totals = await self.store.call_totals(since=self._started_at)
            budget.tokens = max(
                budget.tokens, int(totals["prompt_tokens"]) + int(totals["completion_tokens"])
            )
            budget.cost = max(budget.cost, float(totals["cost_known_usd"] or 0.0))
        return budget.exhausted

    async def calls_no_llm(self) -> bool:
        """Whether every job this runner serves calls no LLM and no RAG target (keyword tests
        only): its items end where they start, in this process."""
        if self._has_target or not self.job_ids:
            return False
        pipelines = [await self.workers.pipeline(job_id) for job_id in self.job_ids]
        return not any(role in llm_roles() for p in pipelines for role in p.steps)

    async def capacity(self) -> int:
        """:func:`intake_capacity`, or :data:`INLINE_ITEMS_IN_FLIGHT` when every job this
        runner serves calls no LLM and no RAG target (and ``--items-in-flight`` is not set)."""
        capacity = intake_capacity(self.settings)
        if self.settings.items_in_flight or not await self.calls_no_llm():
            return capacity
        return max(capacity, INLINE_ITEMS_IN_FLIGHT)

    async def _intake(self, starting: anyio.abc.TaskGroup, until_done: bool) -> None:
        capacity = await self.capacity()
        while not self.stopping.is_set():
            if await self._budget_stop():
                return
            free = capacity - await self.store.unfinished_items(self.owner)
            items = await self._claim(free)
            for item in items:
                starting.start_soon(self._start, item)
            if until_done and not items and await self.store.unfinished(self.job_ids) == 0:
                return
            # an item that ends in another process frees room here too: poll as well
            await self.progress.wait(self.settings.poll_interval, or_when=self.stopping)

    async def _budget_stop(self) -> bool:
        """Whether the budget is spent (then intake stops, saying so once)."""
        if not await self._budget_spent():
            return False
        if not self.budget_stopped:
            # info: each command says so in its own words (what stopped, what is queued)
            log.info("budget_reached", reason=self.llm.budget.reason)
        self.budget_stopped = True
        return True

    async def _claim(self, limit: int) -> list[Item]:
        items = await self.store.claim_items(
            self.owner,
            limit,
            lease_seconds=self.settings.lease_seconds,
            job_ids=self.job_ids,
            max_attempts=self.settings.max_deliveries,
        )
        for item in items:
            self._claimed[item.id] = item
        return items

    async def _start(self, item: Item) -> None:
        """Publish an item's first events (its RAG target asked first, if it needs one)."""
        try:
            messages, held = await self._begin(item)
            await self._publish(item, messages, held)
        except Exception as exc:  # a record that cannot start must not stop the others
            await self._not_started(item, exc)
        finally:
            self._claimed.pop(item.id, None)
        self.counts.started += 1

    async def _begin(self, item: Item) -> tuple[list[Message], HeldJoins | None]:
        """An item's first events dispatched: the messages to publish, and the joins its
        agents made in memory (a first attempt's)."""
        pipeline = await self.workers.pipeline(item.job_id)
        # a first attempt's joins stay in memory until something is published: no other
        # worker can hold a part of the item yet (a retried one may have, from the
        # messages its earlier attempt published, so it joins in the store)
        with joins_held() if item.attempts == 1 else contextlib.nullcontext() as held:
            events = await pipeline.first_events(item)
            messages = await self.workers.dispatch(pipeline, item.job_id, item.key, events)
        return messages, held

    async def _publish(self, item: Item, messages: list[Message], held: HeldJoins | None) -> None:
        """Put an item's first messages on the bus with the joins held for it, and mark it
        running. (No messages: the item has ended already, its agents ran here, and what
        they held is dropped unstored.)"""
        if not messages:
            return
        joins = [(job, key, stored_parts(parts)) for (job, key), parts in (held or {}).items()]
        if isinstance(self.bus, DurableBus):  # marked running as put
            await self.bus.publish(messages, started=[item.id], joins=joins)
        else:
            for job_id, key, parts in joins:
                await self.store.join(job_id, key, parts, "")
            await self.bus.publish(messages)
            await self.store.items_started([item.id])

    async def _not_started(self, item: Item, exc: Exception) -> None:
        """End an item that could not start ``failed`` (it must not stop the others)."""
        log.exception("item_start_failed", job=item.job_id, item=item.key)
        reason = f"{type(exc).__name__}: {exc}"
        await self.workers.fail(item.job_id, item.key, reason, _payload(item))

    async def _finish(self) -> None:
        """Wait for what this process owes once its intake is over (the jobs are done, a
        stop was asked for, or the budget is spent): the items it started, within the grace
        period once stopped. A process without intake owes nothing once stopped."""
        if not self.intake:
            await self.stopping.wait()
            return
        deadline = math.inf
        while await self.store.unfinished_items(self.owner) > 0:
            now = time.monotonic()
            if self.stopping.is_set() and deadline == math.inf:
                deadline = now + self.settings.grace
            if now >= deadline:
                log.info("grace_over", owner=self.owner)
                return
            wait = min(self.settings.poll_interval, deadline - now)
            await self.progress.wait(
                wait, or_when=None if self.stopping.is_set() else self.stopping
            )


@dataclass(frozen=True)
class JobRun:
    """How running a job went in this process."""

    job: Job
    counts: RunCounts
    unfinished: int
    """Items of the job still queued or processing (the run was stopped before the end)."""

    def summary(self) -> dict[str, str | int | bool]:
        """The job's lines in a command's ``--summary``."""
        return {
            "job": self.job.id,
            "resumed": not self.job.created,
            "items_done_now": self.counts.done + self.job.ended,
            "items_failed": self.counts.failed,
            "items_unfinished": self.unfinished,
        }


async def run_job(
    job: Job,
    *,
    settings: Settings,
    store: Store,
    llm: LLM,
    on_event: EventListener | None = None,
    target: Target | None = None,
    stop: anyio.Event | None = None,
) -> JobRun:
    """Work on ``job`` with every agent of its kind until none of its items is left, or
    ``stop`` is set (then the items in flight get the grace period and the rest stays
    queued)."""
    runner = Runner(
        settings,
        store,
        llm,
        roles=PIPELINES[job.kind].known_roles(),
        job_ids=[job.id],
        on_event=on_event,
        target=target,
    )
    counts = await runner.run(until_done=True, stop=stop)
    return JobRun(job, counts, await store.unfinished([job.id]))


async def evaluate_in_memory(
    samples: Sequence[Sample],
    *,
    settings: Settings,
    llm: LLM,
    metrics: Sequence[str],
    prompts: Mapping[str, Prompt] | None = None,
    target: Target | None = None,
    judges: Sequence[Metric] = (),
    panel: Panel | None = None,
) -> list[SampleScored]:
    """Judge ``samples`` with no database file (``Jury.evaluate``): the same runner on an
    in-memory store and bus; results in input order (fewer if the budget ran out).
    :class:`RagjuryError` naming the samples that could not be judged (no record), if any."""
    async with SQLiteStore(":memory:") as store:
        job = await submit_samples(
            store,
            settings,
            samples,
            metrics,
            prompts,
            judges=judges,
            panel=panel,
            judge_now=JudgeNow(llm) if target is None else None,
        )
        runner = Runner(
            settings,
            store,
            llm,
            roles=PIPELINES["evaluate"].known_roles(),
            job_ids=[job.id],
            target=target,
            bus=MemoryBus(settings.bus_buffer, max_deliveries=settings.max_deliveries),
        )
        await runner.run(until_done=True)
        scored = await scored_samples(store, job.id)
        if len(scored) == len(samples) or llm.budget.reason is not None:
            return scored  # (the budget's stop is the caller's to say)
        # a sample that failed once started has its record, its metrics failed; one that
        # could not start has none
        judged = {s.sample.id for s in scored}
        failed = [f for f in await store.failed_items(job.id) if f["item"] not in judged]
        if failed:
            shown = "; ".join(f"{f['item']}: {f['error']}" for f in failed[:3])
            raise RagjuryError(
                f"{len(failed)} of {len(samples)} samples could not be judged ({shown}"
                + (f"; and {len(failed) - 3} more" if len(failed) > 3 else "")
                + "). Mend or leave out those samples and evaluate again"
            )
        return scored


def _payload(item: Item) -> JSONObject | None:
    """The item's payload, or None when it cannot be read (what made its start fail)."""
    try:
        return item.payload
    except (ValueError, TypeError):
        return None
