"""SIGINT / SIGTERM for long commands: the first asks for a graceful stop, the second stops
at once (what is finished is in the database either way)."""

from __future__ import annotations

import signal
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
from anyio.abc import TaskStatus
from rich.console import Console

from ragjury.commands._display import EvaluationProgressBar
from ragjury.commands._run import RecordedRun, retried_text
from ragjury.commands.early_signals import early_signals
from ragjury.config import Settings
from ragjury.evaluation.targets import Target
from ragjury.runner import EventListener, JobRun, RunCounts, run_job
from ragjury.schemas import SampleScored
from ragjury.store.base import Job

T = TypeVar("T")


@dataclass
class Outcome(Generic[T]):
    """A result or the exception instead, carried out of a task group unwrapped."""

    value: T | None = None
    error: Exception | None = None

    def unwrap(self) -> T:
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


async def capture(awaitable: Awaitable[T]) -> Outcome[T]:
    """Await inside a task group without the group wrapping an error in an ExceptionGroup."""
    try:
        return Outcome(value=await awaitable)
    except Exception as exc:
        return Outcome(error=exc)


async def stop_on_signals(
    stop: anyio.Event,
    scope: anyio.CancelScope,
    console: Console,
    grace: float,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Set ``stop`` on the first signal; cancel ``scope`` on the second (started, with
    ``task_group.start``, once the signals are caught)."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        for signum in early_signals():  # sent while the command was starting: the first
            name = f"{signal.Signals(signum).name} (sent while starting)"
            _taking_no_new_work(console, name, grace)
            stop.set()
        async for signum in signals:
            name = signal.Signals(signum).name
            if not stop.is_set():
                _taking_no_new_work(console, name, grace)
                stop.set()
            else:
                console.print(f"ragjury: {name} again: stopping now", markup=False, soft_wrap=True)
                scope.cancel()
                return


def _taking_no_new_work(console: Console, name: str, grace: float) -> None:
    console.print(
        f"ragjury: {name}: taking no new work; in-flight items get up to {grace:g}s to "
        "finish (send it again to stop at once)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


async def run_job_until_signalled(
    run: RecordedRun,
    settings: Settings,
    job: Job,
    console: Console,
    on_progress: EventListener,
    target: Target | None = None,
) -> JobRun:
    """Work ``job`` in this process; the first SIGINT/SIGTERM stops intake (grace period),
    a second stops at once. Either way the unfinished items stay queued."""
    stop = anyio.Event()
    outcome: Outcome[JobRun] | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signals, stop, tg.cancel_scope, console, settings.grace)
        outcome = await capture(
            run_job(
                job,
                settings=settings,
                store=run.store,
                llm=run.llm,
                on_event=on_progress,
                target=target,
                stop=stop,
            )
        )
        tg.cancel_scope.cancel()
    if outcome is None:  # stopped at once by a second signal
        return JobRun(job, RunCounts(), await run.store.unfinished([job.id]))
    return outcome.unwrap()


async def judge_samples(
    run: RecordedRun,
    settings: Settings,
    job: Job,
    console: Console,
    total: int,
    target: Target | None = None,
    bar: EvaluationProgressBar | None = None,
) -> JobRun:
    """Work an evaluation job of ``total`` samples until done or signalled (``evaluate``,
    ``calibrate``): say so when it resumes, and show a progress bar of judged samples
    (``bar``, when the samples judged as the job was stored had it already)."""
    if bar is None:
        with EvaluationProgressBar(console, total) as own:
            return await judge_samples(run, settings, job, console, total, target, own)
    await run.store.note_run_job(run.run_id, job.id)
    done = (await run.store.counts([job.id]))["done"]
    if not job.created:  # those this call judged as it stored the rest are not "already"
        console.print(
            f"ragjury: resuming job {job.id} from {settings.db_shown}: {done - job.ended} of "
            f"{total} "
            f"sample(s) already judged{retried_text(job, 'sample')}",
            markup=False,
            highlight=False,
        )
    bar.update(done)

    async def on_event(job_id: str, event: object) -> None:
        nonlocal done
        if isinstance(event, SampleScored):
            done += 1
            bar.update(done)

    return await run_job_until_signalled(run, settings, job, console, on_event, target)
