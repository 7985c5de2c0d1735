"""The daemon: claims queued items under leases, runs them through their job's pipeline, and
stores each item's results the moment it is complete.

* Intake is bounded: at most ``Settings.items_in_flight`` items are held at once, so memory
  stays flat however long the queue is.
* Leases are renewed while the daemon works. A daemon that dies holds its items only until
  their leases run out; then any daemon (or the restarted one) claims them again, and the
  step cache replays every step that had finished, so no LLM call is repeated for them.
* Finishing an item is one transaction that skips an item already done, so two daemons on
  one database never store an item's results twice.
* :meth:`Daemon.stop` (SIGINT / SIGTERM in ``ragjury serve``) stops intake and gives the
  items in flight ``Settings.grace`` seconds to finish; what is left goes back to the queue.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from ragjury.config import Settings
from ragjury.errors import ConfigurationError
from ragjury.evaluation.targets import Target
from ragjury.jobs import EventListener, JobPipeline, new_owner
from ragjury.llm import LLM
from ragjury.store import Store
from ragjury.store.cache import StepCache
from ragjury.store.queue import Item, Queue

log = structlog.get_logger("ragjury.daemon")


@dataclass
class _Running:
    pipeline: JobPipeline
    scope: anyio.CancelScope
    users: int = 0


def intake_capacity(settings: Settings) -> int:
    """Items a daemon holds at once: ``--items-in-flight``, by default twice the concurrency."""
    return settings.items_in_flight or max(4, 2 * settings.concurrency)


@dataclass
class DaemonCounts:
    claimed: int = 0
    done: int = 0
    failed: int = 0
    skipped: int = 0
    """Items another daemon finished first (their results were not stored twice)."""
    released: int = 0
    item_seconds: list[float] = field(default_factory=list)


class Daemon:
    """Process queued items until stopped (or, with ``until_empty``, until none is left)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        llm: LLM,
        *,
        job_ids: Sequence[str] | None = None,
        on_event: EventListener | None = None,
        on_progress: EventListener | None = None,
        target: Target | None = None,
        owner: str | None = None,
    ) -> None:
        """``on_event`` gets an item's result events once they are stored; ``on_progress``
        gets every event the moment it happens (for progress displays)."""
        self.settings = settings
        self.llm = llm
        self.queue = Queue(store)
        self.cache = StepCache(store, enabled=settings.cache)
        self.owner = owner or new_owner()
        self.job_ids = list(job_ids) if job_ids is not None else None
        self.counts = DaemonCounts()
        self._on_event = on_event
        self._on_progress = on_progress
        self._target = target
        self._target_limiter = anyio.CapacityLimiter(settings.concurrency)
        self._capacity = intake_capacity(settings)
        self._in_flight: dict[int, Item] = {}
        self._pipelines: dict[str, _Running] = {}
        self._pipeline_lock = anyio.Lock()
        self._wake = anyio.Event()
        self._work: TaskGroup | None = None
        self.stopping = anyio.Event()
        self.started = anyio.Event()
        self.budget_stopped = False

    def stop(self) -> None:
        """Stop taking items; let those in flight finish within the grace period."""
        if not self.stopping.is_set():
            log.info("daemon_stopping", owner=self.owner, in_flight=len(self._in_flight))
        self.stopping.set()
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def run(
        self,
        *,
        until_empty: bool = False,
        stop: anyio.Event | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> DaemonCounts:
        """Work until :meth:`stop` or ``stop`` is set (then finish within the grace period)
        or, with ``until_empty``, until the queue (of ``job_ids``) has nothing unfinished."""
        refused = False
        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._renew_leases)
                if stop is not None:
                    outer.start_soon(self._stop_when_set, stop)
                async with anyio.create_task_group() as work:
                    self._work = work

                    async def refuse() -> None:
                        nonlocal refused
                        await self.llm.fatal.wait()
                        refused = True
                        log.error("endpoint_refused", error=str(self.llm.fatal_error))
                        work.cancel_scope.cancel()

                    work.start_soon(refuse)
                    log.info("daemon_started", owner=self.owner, capacity=self._capacity)
                    self.started.set()
                    task_status.started()
                    await self._intake(until_empty)
                    grace = self.settings.grace if self.stopping.is_set() else math.inf
                    with anyio.move_on_after(grace):
                        while self._in_flight:
                            await self._wait_for_change(math.inf)
                    work.cancel_scope.cancel()
                outer.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                left = list(self._in_flight)
                if left:
                    released = await self.queue.release(self.owner, left)
                    self.counts.released += released
                    log.info("items_released", owner=self.owner, count=released)
        if refused and self.llm.fatal_error is not None:
            raise ConfigurationError(
                f"{self.llm.fatal_error.message}. Nothing is lost: unfinished work stays queued "
                f"in {self.settings.db}, and the same command resumes it."
            ) from self.llm.fatal_error
        return self.counts

    async def _stop_when_set(self, stop: anyio.Event) -> None:
        await stop.wait()
        self.stop()

    async def _intake(self, until_empty: bool) -> None:
        lease = self.settings.lease_seconds
        while not self.stopping.is_set():
            if self.llm.budget.exhausted:
                # --max-tokens / --max-cost: take no new item; those in flight finish in full
                if not self.budget_stopped:
                    log.warning("budget_reached", reason=self.llm.budget.reason)
                self.budget_stopped = True
                return
            free = self._capacity - len(self._in_flight)
            items = await self.queue.claim(
                self.owner, free, lease_seconds=lease, job_ids=self.job_ids
            )
            for item in items:
                self._in_flight[item.id] = item
                self.counts.claimed += 1
                assert self._work is not None
                self._work.start_soon(self._process, item)
            if items and len(items) == free:
                await self._wait_for_change(math.inf)
                continue
            if (
                not items
                and until_empty
                and not self._in_flight
                and await self.queue.unfinished(self.job_ids) == 0
            ):
                return
            await self._wait_for_change(self.settings.poll_interval)

    async def _wait_for_change(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self._wake.wait()
        if not self.stopping.is_set():
            self._wake = anyio.Event()

    async def _process(self, item: Item) -> None:
        started = time.perf_counter()
        running: _Running | None = None
        try:
            # The pipeline's tasks serve many items: start them outside this item's log context.
            running = await self._pipeline(item.job_id)
        except Exception as exc:
            log.exception("pipeline_failed", job=item.job_id)
            await self.queue.fail(item, f"{type(exc).__name__}: {exc}")
            self.counts.failed += 1
            del self._in_flight[item.id]
            self._wake.set()
            return
        with structlog.contextvars.bound_contextvars(item=item.key, job=item.job_id):
            try:
                results = await running.pipeline.process(item)
                if await self.queue.finish(self.owner, item, results):
                    self.counts.done += 1
                    self.counts.item_seconds.append(time.perf_counter() - started)
                    log.info(
                        "item_done",
                        item_id=item.id,
                        attempt=item.attempts,
                        seconds=round(time.perf_counter() - started, 3),
                    )
                    if self._on_event is not None:
                        for event in results.events:
                            await self._on_event(item.job_id, event)
                else:
                    self.counts.skipped += 1
                    log.info("item_already_done", item_id=item.id)
                del self._in_flight[item.id]
            except Exception as exc:
                log.exception("item_failed", item_id=item.id)
                await self.queue.fail(item, f"{type(exc).__name__}: {exc}")
                self.counts.failed += 1
                del self._in_flight[item.id]
            finally:
                if running is not None:
                    running.users -= 1
                    if running.users == 0 and self._pipelines.get(item.job_id) is running:
                        del self._pipelines[item.job_id]
                        running.scope.cancel()
                self._wake.set()

    async def _pipeline(self, job_id: str) -> _Running:
        async with self._pipeline_lock:
            running = self._pipelines.get(job_id)
            if running is None:
                job = await self.queue.job(job_id)
                pipeline = JobPipeline(
                    job,
                    self.settings,
                    self.llm,
                    cache=self.cache,
                    on_event=self._on_progress,
                    target=self._target,
                    target_limiter=self._target_limiter,
                )
                if pipeline.deduplicator is not None:
                    pipeline.deduplicator.seed(await self.queue.pair_questions(job_id))
                running = _Running(pipeline, anyio.CancelScope())
                assert self._work is not None
                await self._work.start(self._run_pipeline, running)
                self._pipelines[job_id] = running
            running.users += 1
            return running

    @staticmethod
    async def _run_pipeline(
        running: _Running, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with running.scope:
            await running.pipeline.run(task_status=task_status)

    async def _renew_leases(self) -> None:
        lease = self.settings.lease_seconds
        while True:
            await anyio.sleep(lease / 4)
            if self._in_flight:
                await self.queue.renew(self.owner, lease)
