"""The runtime: wires agents to the bus, runs N workers per agent, and stops cleanly.

Each agent role is a consumer group. For every kind the agent consumes, the runtime starts
that role's workers on the group's subscription; workers compete for deliveries. A worker
handles a delivery, publishes what the agent returned (each as a reply to the delivery), and
only then acknowledges it, so ``bus.wait_idle()`` cannot return while work is still owed.
An agent that raises does not kill the run: the runtime publishes :class:`StepFailed`.

With a :class:`~ragjury.store.cache.StepCache`, an agent that has a fingerprint (every LLM
agent) is asked only once per distinct input: a finished step is stored before its output is
published, and the same step later (a re-run, a restart after a crash) replays the stored
output without an LLM call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from ragjury.agents.base import Agent
from ragjury.bus import Bus, Delivery, Subscription
from ragjury.errors import ConfigurationError
from ragjury.llm.client import LLM, current_step
from ragjury.llm.usage import CallStats
from ragjury.schemas import Envelope, Failure, StepFailed, kind_of
from ragjury.store.cache import StepCache, carries_failure

log = structlog.get_logger("ragjury.runtime")

StepObserver = Callable[[str, Envelope, float, Sequence[CallStats]], Awaitable[None]]


@dataclass(frozen=True)
class AgentSpec:
    """An agent and how many concurrent workers it gets."""

    agent: Agent
    workers: int = 1
    fingerprint: str | None = None
    """What shapes the agent's output besides its input (prompt version, model, options).
    Agents with a fingerprint have their steps cached; the others are cheap or stateful."""

    def __post_init__(self) -> None:
        limit: int | None = getattr(self.agent, "max_workers", None)
        if self.workers < 1:
            raise ConfigurationError(
                f"workers for {self.agent.role} must be >= 1, got {self.workers}"
            )
        if limit is not None and self.workers > limit:
            raise ConfigurationError(
                f"{self.agent.role} keeps state in memory and runs at most {limit} worker(s), "
                f"got {self.workers}; remove it from --workers"
            )


class Runtime:
    """Runs agents over a bus until cancelled."""

    def __init__(
        self,
        bus: Bus,
        specs: Sequence[AgentSpec],
        *,
        on_step: StepObserver | None = None,
        cache: StepCache | None = None,
    ) -> None:
        self.bus = bus
        self.cache = cache
        self._specs = list(specs)
        self._on_step = on_step
        self._subscriptions: list[tuple[AgentSpec, Subscription]] = [
            (spec, bus.subscribe(kind_of(kind), spec.agent.role))
            for spec in self._specs
            for kind in spec.agent.consumes
        ]

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start every worker; report started; run until the bus closes or we are cancelled."""
        async with anyio.create_task_group() as tg:
            for spec, subscription in self._subscriptions:
                for _ in range(spec.workers):
                    tg.start_soon(self._work, spec, subscription)
            task_status.started()

    async def _work(self, spec: AgentSpec, subscription: Subscription) -> None:
        async for delivery in subscription.deliveries():
            await self._handle(spec, delivery)

    async def _handle(self, spec: AgentSpec, delivery: Delivery) -> None:
        agent = spec.agent
        envelope = delivery.envelope
        calls: list[CallStats] = []
        token = current_step.set(calls)
        started = time.perf_counter()
        try:
            with structlog.contextvars.bound_contextvars(
                agent=agent.role, message_id=envelope.id, correlation_id=envelope.correlation_id
            ):
                events, cached = await self._step(spec, envelope)
                elapsed = time.perf_counter() - started
                for event in events:
                    await self.bus.publish(envelope.reply(event))
                log.info(
                    "message_handled",
                    kind=envelope.kind,
                    causation_id=envelope.causation_id,
                    attempt=envelope.attempt,
                    ms=round(elapsed * 1000, 1),
                    publish_ms=round((time.perf_counter() - started - elapsed) * 1000, 1),
                    published=len(events),
                    cached=cached,
                    llm_requests=sum(c.requests for c in calls),
                    prompt_tokens=sum(c.prompt_tokens for c in calls),
                    completion_tokens=sum(c.completion_tokens for c in calls),
                )
            if self._on_step is not None:
                await self._on_step(agent.role, envelope, elapsed, calls)
        finally:
            current_step.reset(token)
            await self.bus.ack(delivery)

    async def _step(self, spec: AgentSpec, envelope: Envelope) -> tuple[Sequence[Any], bool]:
        """The agent's output for this message: from the cache, or handled (and cached)."""
        agent, cache = spec.agent, self.cache
        key = None
        if cache is not None and spec.fingerprint is not None:
            key = cache.key(agent.role, spec.fingerprint, envelope.payload)
            stored = await cache.get(key)
            if stored is not None:
                return stored, True
        try:
            events: Sequence[Any] = await agent.handle(envelope.payload)
        except Exception as exc:  # an agent bug must not stall the run
            log.exception("step_failed", kind=envelope.kind)
            return [_step_failed(agent.role, envelope, exc)], False
        if key is not None and cache is not None and not any(map(carries_failure, events)):
            await cache.put(key, agent.role, events)
        return events, False


def _step_failed(role: str, envelope: Envelope, exc: Exception) -> StepFailed:
    return StepFailed(
        agent=role,
        input_kind=envelope.kind,
        input_id=envelope.id,
        error=Failure(stage=role, attempts=0, message=f"{type(exc).__name__}: {exc}"),
    )


def agent_specs(
    agents: Sequence[tuple[Agent, int]],
    workers: Mapping[str, int],
    fingerprints: Mapping[str, str] | None = None,
) -> list[AgentSpec]:
    """Pair each agent with its worker count (``workers``, from --workers, overrides) and,
    for agents whose steps are cached, its fingerprint."""
    fingerprints = fingerprints or {}
    known = {agent.role for agent, _ in agents}
    unknown = sorted(set(workers) - known)
    if unknown:
        raise ConfigurationError(
            f"--workers names unknown agent(s) {', '.join(unknown)}; "
            f"known agents: {', '.join(sorted(known))}"
        )
    return [
        AgentSpec(agent, workers.get(agent.role, n), fingerprints.get(agent.role))
        for agent, n in agents
    ]


async def run_to_completion(
    runtime: Runtime,
    llm: LLM,
    *,
    feed: Callable[[], Awaitable[None]],
    drain: Callable[[], Awaitable[None]],
) -> None:
    """Start the agents, ``feed`` the pipeline, wait until every delivery is acknowledged,
    ``drain`` what is left in join state, and stop. If the endpoint refused us outright
    (401, 403, 404), stop at once and raise a :class:`ConfigurationError` saying why."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(_stop_when_refused, llm, tg.cancel_scope)
        await tg.start(runtime.run)
        await feed()
        await runtime.bus.wait_idle()
        await drain()
        await runtime.bus.aclose()
        tg.cancel_scope.cancel()
    if llm.fatal_error is not None:
        raise ConfigurationError(llm.fatal_error.message) from llm.fatal_error


async def _stop_when_refused(llm: LLM, scope: anyio.CancelScope) -> None:
    await llm.fatal.wait()
    log.error("endpoint_refused", error=llm.fatal_error and llm.fatal_error.message)
    scope.cancel()
