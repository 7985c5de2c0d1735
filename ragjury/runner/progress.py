"""What a run tells its caller, and the one place it is counted.

The intake and the workers of a :class:`~ragjury.runner.Runner` share one
:class:`Progress`: an item that ends is counted here once, its public events go to the
caller's listener from here, and the intake learns here that room was made. Nothing below
the runner reports upward: the pipelines return events and the runner passes them on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio

from ragjury.schemas import BusEvent, ItemFailed, JuryEvent

EventListener = Callable[[str, JuryEvent], Awaitable[None]]
"""Called with (job id, event). ``on_event``: each public event of an item once its results
are stored (``PairJudged``/``DocumentJudged``, ``SampleScored``, ``ItemFailed``);
``on_output``: every event this process's workers produce, as they produce it."""


@dataclass
class RunCounts:
    """How many items this process started, finished, failed and gave back."""

    started: int = 0
    done: int = 0
    failed: int = 0
    released: int = 0
    """Claimed items given back unstarted when the runner stopped."""


class Progress:
    """The counts of one run, the caller's listeners, and a signal for each item's end."""

    def __init__(
        self, on_event: EventListener | None = None, on_output: EventListener | None = None
    ) -> None:
        self.counts = RunCounts()
        self._on_event = on_event
        self._on_output = on_output
        self._ended = anyio.Event()

    async def output(self, job_id: str, event: BusEvent) -> None:
        """A step's output, as this process's workers make it."""
        if self._on_output is not None:
            await self._on_output(job_id, event)

    async def done(self, job_id: str, public: Sequence[BusEvent]) -> None:
        """An item's results are stored (by this process): count it, tell the caller."""
        self.counts.done += 1
        if self._on_event is not None:
            for event in public:
                await self._on_event(job_id, event)
        self.ended()

    async def failed(self, job_id: str, key: str, reason: str) -> None:
        self.counts.failed += 1
        if self._on_event is not None:
            await self._on_event(job_id, ItemFailed(item=key, reason=reason))
        self.ended()

    def ended(self) -> None:
        """An item ended here (or was already ended by another process): wake the intake."""
        self._ended.set()
        self._ended = anyio.Event()

    async def wait(self, seconds: float, *, or_when: anyio.Event | None = None) -> None:
        """Until an item ends here, ``seconds`` pass, or ``or_when`` is set."""
        events = [self._ended, *([or_when] if or_when is not None else [])]
        with anyio.move_on_after(seconds):
            async with anyio.create_task_group() as tg:

                async def wait(event: anyio.Event) -> None:
                    await event.wait()
                    tg.cancel_scope.cancel()

                for event in events:
                    tg.start_soon(wait, event)
