"""Items that end where they are taken in: a job that calls no LLM and no RAG target (keyword
tests, retrieval figures) has nothing to wait for, so each of its items is judged as the
store takes it in and stored ended, in the same transaction (:data:`~ragjury.store.base.
ItemEnds`): no claim, no second read of its payload, no update of its row at the end.

The item's start is the pipeline's own (its first events, then each agent the pipeline
routes them to, as :meth:`~ragjury.runner.workers.Workers.dispatch` runs the agents that
call no LLM), run to its end at once: nothing in it waits (its joins are held in memory,
see :func:`~ragjury.agents.joins.joins_held`), and a start that would wait, or fails, leaves
its item queued for the runner, which starts it as any other and says why it failed.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog

from ragjury import logs
from ragjury.agents.joins import current_item, joins_held
from ragjury.llm import LLM, tracing
from ragjury.pipelines import Pipeline, llm_roles
from ragjury.runner.workers import outcome_attributes
from ragjury.schemas import BusEvent
from ragjury.store.base import Item, ItemEnds, ItemResults

T = TypeVar("T")
log = structlog.get_logger("ragjury.runner")


class _WouldWait(Exception):
    """A coroutine run at once awaited something that is not ready."""


def at_once(coroutine: Coroutine[object, object, T]) -> T:
    """The result of ``coroutine`` run to its end now, in this thread, with no event loop;
    :class:`_WouldWait` (and the coroutine closed) if it awaits anything that waits."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]  # the coroutine's own result
    coroutine.close()
    raise _WouldWait


def _never() -> bool:
    return False


def _unseen(judged: int) -> None:
    pass


@dataclass(frozen=True)
class JudgeNow:
    """How the run that works a job in this process at once (``evaluate``, ``Jury.evaluate``)
    has a job that calls no LLM judged as it is stored. Both functions are called in the
    store's own thread."""

    llm: LLM
    stopped: Callable[[], bool] = _never
    """True once a stop is asked for (a signal): the rest are stored queued, unjudged, so the
    job is stored at once with what was judged, and the same command judges the rest."""
    judged: Callable[[int], None] = _unseen
    """Told how many samples are judged so far, every :data:`PROGRESS_EVERY` (a progress
    bar)."""


PROGRESS_EVERY = 250


@dataclass(frozen=True)
class AtOnce:
    """What :meth:`~ragjury.store.base.Queue.submit` is given to end a job's items as it
    takes them in: ``end`` judges one, and ``told`` is called once those ended so far are
    stored, to tell of them as a runner tells of an item it ends (the ``item_done`` log
    line at info level, the item's trace span)."""

    end: ItemEnds
    told: Callable[[str], None]


def ends_at_once(pipeline: Pipeline, now: JudgeNow) -> AtOnce | None:
    """How the items of ``pipeline``'s job end where they are taken in; None when one of its
    agents calls an LLM (its items are queued, for workers)."""
    llm = llm_roles()
    if any(role in llm for role in pipeline.steps):
        return None
    judged = 0
    ended: dict[str, BusEvent] = {}  # since last told (by key: a write run again ends again)

    def end(key: str, stored: str) -> ItemResults | None:
        nonlocal judged
        if now.stopped():
            return None
        judged += 1
        if judged % PROGRESS_EVERY == 0:
            now.judged(judged)
        item = Item(id=0, job_id="", key=key, position=0, stored=stored, attempts=1)
        token = current_item.set(key)  # whose joins the agents add to
        try:
            with joins_held():
                terminal = at_once(_terminal(pipeline, item))
        except Exception:  # queued: the runner starts it again, and fails it with the reason
            log.debug("item_left_queued", item=key, exc_info=True)
            return None
        finally:
            current_item.reset(token)
        if terminal is None:
            return None
        if tracing.enabled() or logs.enabled("info"):
            ended[key] = terminal
        return pipeline.results(terminal)

    def told(job_id: str) -> None:
        for key, terminal in ended.items():
            if logs.enabled("info"):
                log.info("item_done", job=job_id, item=key)
            if tracing.enabled():
                tracing.item_done(key, job_id, pipeline.kind, outcome_attributes(terminal))
        ended.clear()

    return AtOnce(end, told)


async def _terminal(pipeline: Pipeline, item: Item) -> BusEvent | None:
    """The item's terminal event, as its start and the agents it reaches make it."""
    ends: list[BusEvent] = []
    await _run(pipeline, await pipeline.first_events(item), ends)
    return ends[0] if ends else None


async def _run(pipeline: Pipeline, events: Sequence[BusEvent], ends: list[BusEvent]) -> None:
    for event in events:
        if isinstance(event, pipeline.terminal):
            ends.append(event)
            continue
        for role in pipeline.routes.get(event.kind, ()):
            await _run(pipeline, await pipeline.steps[role].handle(event), ends)
