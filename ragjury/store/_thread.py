"""One thread of its own that runs a store's database calls one at a time, for asyncio.

``anyio.to_thread.run_sync`` with a limiter of one costs about 200 us of CPU a call on the
throughput benchmark's machine (a capacity limiter taken and given back, cancel scopes, a
worker thread found and handed the job through a ``queue.Queue``, the answer sent back):
the SQLite store makes one or two such trips an LLM request, so they were about a twentieth
of ragjury's client CPU per request. Here a call is a tuple on a ``SimpleQueue`` and an
asyncio future set through ``call_soon_threadsafe``: about 60 us alone, under 15 us a call
when many wait (one wake of the loop answers several). Each call runs in a copy of its
caller's context, as anyio's does.

On another event loop than asyncio (trio), :meth:`DatabaseThread.run` is
``anyio.to_thread.run_sync`` with a limiter of one, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")
V = TypeVar("V")


class _Job(Generic[T]):
    __slots__ = ("context", "fn", "future", "loop")

    def __init__(
        self, fn: Callable[[], T], loop: asyncio.AbstractEventLoop, future: asyncio.Future[T]
    ) -> None:
        self.fn = fn
        self.loop = loop
        self.future = future
        self.context = contextvars.copy_context()


class DatabaseThread:
    """``await thread.run(fn)``: ``fn()`` in this object's thread (started at the first call,
    ended by :meth:`stop`), one call at a time, in the order asked."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job[object] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._limiter = anyio.CapacityLimiter(1)  # off asyncio

    async def run(self, fn: Callable[[], T]) -> T:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another backend (trio)
            return await anyio.to_thread.run_sync(fn, limiter=self._limiter)
        if self._thread is None:
            self._start()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(fn, loop, future))  # type: ignore[arg-type]  # T is erased here
        return await future

    def stop(self) -> None:
        """End the thread once the calls asked before have run (it is not waited for)."""
        with self._lock:
            if self._thread is not None:
                self._jobs.put(None)
                self._thread = None

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                # a daemon: a store left open (never closed) does not keep the process alive
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        jobs = self._jobs
        while (job := jobs.get()) is not None:
            try:
                result = job.context.run(job.fn)
            except BaseException as exc:  # the caller's to raise
                _answer(job.loop, _failed, job.future, exc)
            else:
                _answer(job.loop, _done, job.future, result)


def _answer(
    loop: asyncio.AbstractEventLoop,
    setter: Callable[[asyncio.Future[T], V], None],
    future: asyncio.Future[T],
    value: V,
) -> None:
    with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
        loop.call_soon_threadsafe(setter, future, value)


def _done(future: asyncio.Future[T], result: T) -> None:
    if not future.done():  # (a caller cancelled by asyncio itself no longer waits)
        future.set_result(result)


def _failed(future: asyncio.Future[T], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
