"""The runner's workers: one per agent role and slot, over any bus, for any job.

Each role is a consumer group. A worker takes a delivery, finds the job's pipeline (built
from the job's stored options the first time this process meets the job), asks the role's
agent (or the step cache) for its outputs, and then, in this order:

1. a terminal event (``DocumentJudged``, ``SampleScored``) is stored as the item's results,
   once, whichever process gets there (:meth:`Store.finish_item`);
2. the other outputs are published to the roles the pipeline routes them to, and the
   delivery is acknowledged, in one step (:meth:`Bus.ack`).

On the durable bus the two are one transaction (:meth:`DurableBus.ack_step`), which also
stores the step's cache row and its LLM calls' closing records.

A handler that raises gives the delivery back (:meth:`Bus.nack`); after ``max_deliveries``
the bus takes it out and its item ends ``failed`` with the error. So a message is
acknowledged only after what it caused is stored, a killed worker's messages come back after
their leases, and nothing here counts in memory what another process might be doing.

With a :class:`~ragjury.store.cache.StepCache`, an agent with a fingerprint (every LLM agent)
is asked once per distinct input: a finished step is stored before or with its outputs'
publication, never after, and the same step later (a redelivery, a re-run) replays it
without an LLM call.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence

import anyio
import structlog
from anyio.abc import TaskStatus

from ragjury import logs
from ragjury._json import JSONObject
from ragjury.agents.joins import current_item, seen_joins
from ragjury.bus import Bus, Delivery, DurableBus, Message, Subscription
from ragjury.config import Settings
from ragjury.errors import ConfigurationError
from ragjury.evaluation.targets import Target
from ragjury.llm import tracing
from ragjury.llm.batches import Parked, current_job
from ragjury.llm.client import LLM, current_step, held_call_records, opened_call
from ragjury.llm.usage import CallStats
from ragjury.pipelines import Pipeline, all_roles, build_pipeline, check_workers, llm_roles
from ragjury.runner.progress import Progress
from ragjury.schemas import BusEvent, DocumentJudged, Envelope, SampleScored
from ragjury.store.base import StepWrites, Store
from ragjury.store.cache import StepCache

log = structlog.get_logger("ragjury.runner")

_PIPELINES_KEPT = 64
_JOINS_SEEN = frozenset({"evaluate"})
"""The job kinds whose messages' steps may complete their item's join with the state seen
with the message (an evaluation's sample, joined by its ``SampleAggregator``); a
generation's joins never use it, and its items' states can be large."""


def workers_for(role: str, settings: Settings) -> int:
    """Workers of one role in this process: ``--workers ROLE=N``, else ``--concurrency`` for
    an LLM agent and 1 for the others (they run where their input is made, see
    :meth:`Workers.dispatch`; their workers only take messages an older ragjury left)."""
    return settings.workers.get(role) or (settings.concurrency if role in llm_roles() else 1)


def select_roles(agents: Sequence[str] | None) -> tuple[str, ...]:
    """The roles named by ``--agents`` (all when None), checked."""
    roles = all_roles()
    if agents is None:
        return roles
    unknown = sorted(set(agents) - set(roles))
    if unknown:
        raise ConfigurationError(
            f"--agents names unknown agent(s) {', '.join(unknown)}; "
            f"known agents: intake, {', '.join(roles)}"
        )
    return tuple(role for role in roles if role in agents)


class Workers:
    """Runs workers for ``roles`` over ``bus`` until cancelled; what they finish is told to
    ``progress``."""

    def __init__(
        self,
        store: Store,
        bus: Bus,
        settings: Settings,
        llm: LLM,
        *,
        roles: Sequence[str] | None = None,
        progress: Progress,
        cache: StepCache | None = None,
        target: Target | None = None,
    ) -> None:
        check_workers(settings.workers, all_roles())
        self.store, self.bus, self.settings, self.llm = store, bus, settings, llm
        self.roles = tuple(all_roles() if roles is None else roles)
        self.cache = cache
        self.progress = progress
        self._target = target
        self._target_limiter = anyio.CapacityLimiter(settings.concurrency)
        self._pipelines: OrderedDict[str, Pipeline] = OrderedDict()
        self._building = anyio.Lock()
        self._subscriptions: list[tuple[str, Subscription]] = [
            (role, bus.subscribe(role)) for role in self.roles
        ]
        self._durable = isinstance(bus, DurableBus)
        if isinstance(bus, DurableBus) and cache is not None and cache.enabled:
            bus.step_key = self._claimed_step_key

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start every worker and the lease renewal; report started; run until cancelled."""
        async with anyio.create_task_group() as tg:
            for role, subscription in self._subscriptions:
                for _ in range(workers_for(role, self.settings)):
                    tg.start_soon(self._work, role, subscription)
            tg.start_soon(self._renew)
            task_status.started()

    async def pipeline(self, job_id: str) -> Pipeline:
        """The pipeline of ``job_id``, built once per process from the job's stored options."""
        pipeline = self._pipelines.get(job_id)
        if pipeline is None:
            async with self._building:
                pipeline = self._pipelines.get(job_id)
                if pipeline is None:
                    job = await self.store.job(job_id)
                    pipeline = build_pipeline(
                        job,
                        self.settings,
                        self.llm,
                        self.store,
                        target=self._target,
                        target_limiter=self._target_limiter,
                    )
                    self._pipelines[job_id] = pipeline
                    while len(self._pipelines) > _PIPELINES_KEPT:
                        self._pipelines.popitem(last=False)
        self._pipelines.move_to_end(job_id)
        return pipeline

    async def _renew(self) -> None:
        while True:
            await anyio.sleep(self.settings.lease_seconds / 4)
            await self.bus.renew()

    async def _work(self, role: str, subscription: Subscription) -> None:
        async for delivery in subscription.deliveries():
            await self._handle(role, delivery)

    async def _handle(self, role: str, delivery: Delivery) -> None:
        envelope = delivery.envelope
        calls: list[CallStats] = []
        step_token = current_step.set(calls)
        # on the durable bus the step's cache row and its calls' closing records are stored
        # with its acknowledgement, in one transaction (one statement on PostgreSQL)
        held: list[tuple[CallStats, str | None]] = []
        held_token = held_call_records.set(held if self._durable else None)
        # the call record the bus opened with the message (PostgreSQL): the first call takes
        # it, and one that none took goes with the acknowledgement
        opened = [delivery.call] if delivery.call is not None else []
        opened_token = opened_call.set(opened)
        row: tuple[str, str, str] | None = None
        item_token = current_item.set(envelope.correlation_id)
        # the item's join state as the bus read it with the message (PostgreSQL), which
        # spares an item's last join its statement (see JoinState.add_models)
        seen_token = seen_joins.set(
            None
            if delivery.joined is None
            else (envelope.job_id or "", envelope.correlation_id, delivery.joined)
        )
        if self.llm.batch is not None:
            current_job.set(envelope.job_id or "")
        started = time.perf_counter()
        # bound here and reset in `finally` (structlog's bound_contextvars copies the whole
        # context on every message to save what it rebinds, several times the cost)
        log_tokens = structlog.contextvars.bind_contextvars(
            agent=role, message_id=envelope.id, correlation_id=envelope.correlation_id
        )
        try:
            with tracing.step(
                role, envelope.correlation_id, envelope.job_id or "", delivery.attempt
            ) as traced:
                if logs.enabled("debug"):
                    log.debug("message_received", kind=envelope.kind, attempt=delivery.attempt)
                job_id = envelope.job_id or ""
                try:
                    # every step of handling a delivery is guarded, not the handler alone: a
                    # message whose outputs cannot be dispatched, joined, stored or
                    # acknowledged is retried, then taken out; it never stops the worker
                    pipeline = await self.pipeline(job_id)
                    events, cached, row = await self._step(pipeline, role, delivery)
                    traced["ragjury.cached"] = cached
                    elapsed = time.perf_counter() - started
                    ends: list[tuple[Pipeline, BusEvent]] | None = None
                    if isinstance(self.bus, DurableBus):
                        ends = []  # the item's end goes with the acknowledgement
                    replies = await self.dispatch(
                        pipeline, job_id, envelope.correlation_id, events, envelope, ends=ends
                    )
                    if isinstance(self.bus, DurableBus):
                        end = None
                        if ends:
                            end_pipeline, terminal = ends[0]
                            results = end_pipeline.results(terminal)
                            end = (job_id, envelope.correlation_id, results)
                        writes = StepWrites(row, list(held), end, list(opened))
                        ended = await self.bus.ack_step(delivery, replies, writes)
                        row = None
                        held.clear()
                        opened.clear()
                        if ends:
                            await self.finished(*ends[0], job_id, envelope.correlation_id, ended)
                    else:
                        await self.bus.ack(delivery, replies)
                except Parked as parked:  # batch mode: the step waits for a batch's answer
                    await self._keep(row, held, opened)
                    await self._park(delivery, parked)
                    return
                except Exception as exc:  # an agent bug, a bad message: never the whole run
                    log.exception("step_failed", kind=envelope.kind, attempt=delivery.attempt)
                    await self._keep(row, held, opened)
                    await self._retry_or_fail(role, delivery, exc)
                    return
                if logs.enabled("info"):
                    log.info(
                        "message_handled",
                        kind=envelope.kind,
                        causation_id=envelope.causation_id,
                        attempt=delivery.attempt,
                        ms=round(elapsed * 1000, 1),
                        publish_ms=round((time.perf_counter() - started - elapsed) * 1000, 1),
                        published=len(replies),
                        cached=cached,
                        llm_requests=sum(c.requests for c in calls),
                        prompt_tokens=sum(c.prompt_tokens for c in calls),
                        completion_tokens=sum(c.completion_tokens for c in calls),
                    )
        finally:
            structlog.contextvars.reset_contextvars(**log_tokens)
            current_item.reset(item_token)
            seen_joins.reset(seen_token)
            held_call_records.reset(held_token)
            opened_call.reset(opened_token)
            current_step.reset(step_token)

    async def _keep(
        self,
        row: tuple[str, str, str] | None,
        held: list[tuple[CallStats, str | None]],
        opened: list[int],
    ) -> None:
        """Store what a step that was not acknowledged did: its cache row (a retry replays
        it) and its calls' closing records, and drop the call record opened for it that no
        call took. If that fails too, the calls stay in flight on the books (closed as
        killed by the next run) and the retry asks again."""
        try:
            if row is not None and self.cache is not None:
                await self.cache.store.put_step(*row)
            if held or opened:
                await self.store.close_calls(held, unused=opened)
        except Exception:
            log.exception("step_records_not_stored")
        held.clear()
        opened.clear()

    async def _park(self, delivery: Delivery, parked: Parked) -> None:
        if not isinstance(self.bus, DurableBus):
            raise ConfigurationError(
                "--batch needs the durable bus (a job in --db), not an in-memory one"
            )
        await self.bus.park(delivery, parked.key)
        log.info("message_parked", kind=delivery.envelope.kind, request=parked.key[:12])

    async def _retry_or_fail(self, role: str, delivery: Delivery, exc: Exception) -> None:
        """Give a failed delivery back with its error; past the delivery limit its item ends
        ``failed``. If even that cannot be stored, the lease runs out and it comes back."""
        envelope = delivery.envelope
        reason = f"{role}: {type(exc).__name__}: {exc}"
        try:
            if await self.bus.nack(delivery, reason):
                reason += f" (given up after {delivery.attempt} deliveries)"
                await self.fail(envelope.job_id or "", envelope.correlation_id, reason)
        except Exception:  # the store itself failing: its lease brings the message back
            log.exception("nack_failed", kind=envelope.kind, attempt=delivery.attempt)

    async def _step(
        self, pipeline: Pipeline, role: str, delivery: Delivery
    ) -> tuple[Sequence[BusEvent], bool, tuple[str, str, str] | None]:
        """The agent's outputs for this message, from the cache or handled; and, for a step
        handled on the durable bus, its row for the cache (stored with the acknowledgement;
        on another bus it is stored here, before its outputs go anywhere)."""
        envelope = delivery.envelope
        outputs, cached, row = await self._run_step(
            pipeline, role, envelope.payload, envelope.job_id, delivery
        )
        if row is not None and not self._durable and self.cache is not None:
            await self.cache.store.put_step(*row)
            row = None
        return outputs, cached, row

    async def _run_step(
        self,
        pipeline: Pipeline,
        role: str,
        event: BusEvent,
        job_id: str | None,
        delivery: Delivery | None = None,
    ) -> tuple[Sequence[BusEvent], bool, tuple[str, str, str] | None]:
        step = pipeline.steps.get(role)
        if step is None:
            raise ConfigurationError(f"job {job_id} has no {role} agent")
        cache, key = self.cache, None
        if cache is not None and step.fingerprint is not None:
            if delivery is not None and delivery.step_key:  # the bus looked it up
                key = delivery.step_key
                if delivery.cached is not None and cache.enabled:
                    return cache.replay(delivery.cached), True, None
            else:
                key = cache.key(role, step.fingerprint, event)
                stored = await cache.get(key)
                if stored is not None:
                    return stored, True, None
        events = await step.handle(event)
        row = None if key is None or cache is None else cache.row(key, role, events)
        return events, False, row

    def _step_key(self, pipeline: Pipeline, role: str, payload: str | None) -> str:
        """The step key of a message to an LLM agent (``payload``: its event as JSON; None
        off the durable bus), for the durable bus to look it up as it puts the message ('':
        no cache)."""
        step, cache = pipeline.steps.get(role), self.cache
        if payload is None or cache is None or not cache.enabled or step is None:
            return ""
        if step.fingerprint is None:
            return ""
        return cache.key_of(role, step.fingerprint, payload)

    async def _claimed_step_key(self, role: str, envelope: Envelope) -> str:
        """The step key of a claimed message (see :attr:`DurableBus.step_key`)."""
        pipeline = await self.pipeline(envelope.job_id or "")
        return self._step_key(pipeline, role, envelope.payload.model_dump_json())

    async def dispatch(
        self,
        pipeline: Pipeline,
        job_id: str,
        item_key: str,
        events: Sequence[BusEvent],
        cause: Envelope | None = None,
        *,
        ends: list[tuple[Pipeline, BusEvent]] | None = None,
    ) -> list[Message]:
        """Store a terminal event as its item's results; address the others to the roles the
        pipeline routes them to, as replies to ``cause`` (None: an item's first events).

        An agent that calls no LLM (chunking, joins, keyword tests, the deduplicator's
        decision) is run here, at once, rather than sent over the bus: its work costs less
        than a message's claim and acknowledgement would. Its outputs are dispatched in
        turn, and they are published (or stored) with the message that caused them, so a
        redelivery runs it again: these agents keep their state in the store and give the
        same outputs again."""
        messages: list[Message] = []
        llm = llm_roles()
        for event in events:
            await self.progress.output(job_id, event)
            if isinstance(event, pipeline.terminal):
                if ends is not None and not ends:  # stored with the acknowledgement
                    ends.append((pipeline, event))
                else:
                    await self.finish(pipeline, job_id, item_key, event)
                continue
            envelope: Envelope | None = None  # made for a message only: what goes on the bus
            # the event written once for every step key, the envelope once for every
            # agent it goes to
            payload: str | None = None
            body = ""
            for role in pipeline.routes.get(event.kind, ()):
                if role in llm:
                    if envelope is None:
                        envelope = (
                            cause.reply(event)
                            if cause is not None
                            else Envelope(correlation_id=item_key, job_id=job_id, payload=event)
                        )
                    if self._durable and payload is None:
                        payload = event.model_dump_json()
                        body = envelope.model_dump_json()
                    messages.append(
                        Message(
                            role,
                            envelope,
                            self._step_key(pipeline, role, payload),
                            body,
                            pipeline.kind in _JOINS_SEEN,
                        )
                    )
                    continue
                token = current_item.set(item_key)
                try:
                    outputs, _, row = await self._run_step(pipeline, role, event, job_id)
                    if row is not None and self.cache is not None:  # (no LLM agent has none)
                        await self.cache.store.put_step(*row)
                finally:
                    current_item.reset(token)
                # what this step's outputs send on answers the message that caused it: its
                # own event never travels, so it gets no envelope of its own
                messages += await self.dispatch(
                    pipeline, job_id, item_key, outputs, cause, ends=ends
                )
        return messages

    async def finish(self, pipeline: Pipeline, job_id: str, key: str, terminal: BusEvent) -> None:
        ended = await self.store.finish_item(job_id, key, pipeline.results(terminal))
        await self.finished(pipeline, terminal, job_id, key, ended)

    async def finished(
        self, pipeline: Pipeline, terminal: BusEvent, job_id: str, key: str, ended: bool | None
    ) -> None:
        """Tell of an item's end (``ended``: this process stored it; else it had ended)."""
        if ended:
            if logs.enabled("info"):  # a line per item: asked first (see logs.enabled)
                log.info("item_done", job=job_id, item=key)
            if tracing.enabled():
                tracing.item_done(key, job_id, pipeline.kind, outcome_attributes(terminal))
            await self.progress.done(job_id, pipeline.public(terminal))
        else:
            self.progress.ended()

    async def fail(
        self,
        job_id: str,
        key: str,
        reason: str,
        payload: JSONObject | None = None,
    ) -> None:
        """End an item ``failed`` with ``reason`` (and, for a sample, every metric failed)."""
        results = None
        try:
            if payload is None:
                payload = await self.store.item_payload(job_id, key)
            results = (await self.pipeline(job_id)).failed(key, payload, reason)
        except Exception:  # the job itself may be what is wrong
            log.exception("failed_results_unavailable", job=job_id, item=key)
        try:
            stored = await self.store.fail_item(job_id, key, reason, results)
        except Exception:  # e.g. results the database refuses: end the item on the reason
            log.exception("failed_results_refused", job=job_id, item=key)
            stored = await self.store.fail_item(job_id, key, reason)
        if stored:
            log.warning(
                "item_failed", job=job_id, item=key, reason=reason, say=f"{key}: failed: {reason}"
            )
            await self.progress.failed(job_id, key, reason)
        else:
            self.progress.ended()


def outcome_attributes(terminal: object) -> dict[str, tracing.Attribute]:
    """What an ended item's trace span says of it."""
    if isinstance(terminal, SampleScored):
        found: dict[str, tracing.Attribute] = {}
        if terminal.passing is not None:
            found["ragjury.passing"] = terminal.passing
        for name, result in terminal.metrics.items():
            found[f"ragjury.metric.{name}.outcome"] = result.outcome
            if result.score is not None:
                found[f"ragjury.metric.{name}.score"] = result.score
        return found
    if isinstance(terminal, DocumentJudged):
        outcomes = [pair.outcome for pair in terminal.pairs]
        return {
            "ragjury.chunks": terminal.chunks,
            "ragjury.chunks_failed": terminal.chunks_failed,
            "ragjury.pairs_kept": outcomes.count("kept"),
            "ragjury.pairs_rejected": outcomes.count("rejected"),
            "ragjury.pairs_failed": outcomes.count("failed"),
        }
    return {}
