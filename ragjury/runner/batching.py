"""Batch mode in a run: a poller for each endpoint the run sends batches to.

With ``--batch`` every call of the run goes through its endpoint's batch API, checked before
anything runs. A panel judge named in ``--batch-judges`` (or any judge, with ``--batch``)
sends its calls to its own endpoint's batch API: the judge's client asks this hub for a
channel when the job's agents are built, and the hub starts a poller for that endpoint
then. Each poller submits and polls only its endpoint's requests and batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.abc
from anyio.abc import TaskStatus

from ragjury.config import Settings
from ragjury.errors import ConfigurationError, LLMTransportError
from ragjury.llm import LLM
from ragjury.llm.batches import BatchChannel
from ragjury.store.base import Store
from ragjury.urls import redacted

if TYPE_CHECKING:  # a poller is made (and openai imported) only for a run that batches
    from ragjury.llm.batch_poller import BatchPoller


def endpoint_of(settings: Settings) -> str:
    """The endpoint as the store names it (no secret in it)."""
    from ragjury.llm.batch_poller import DEFAULT_ENDPOINT

    return redacted(settings.base_url or DEFAULT_ENDPOINT)


class BatchPollers:
    """The run's batch pollers, one per endpoint; :meth:`channel` is the LLM's ``batching``."""

    def __init__(self, store: Store, llm: LLM, owner: str) -> None:
        self._store, self._llm, self._owner = store, llm, owner
        self._pollers: dict[str, tuple[BatchPoller, bool]] = {}
        self._group: anyio.abc.TaskGroup | None = None

    async def check_run_endpoint(self, settings: Settings) -> None:
        """``--batch``: the run's own calls go through its endpoint's batch API, which is
        checked now (a clear error, and nothing sent, when it has none)."""
        poller = self._add(settings, checked=True)
        try:
            await poller.check()
        except BaseException:
            await poller.aclose()
            raise
        self._llm.batch = self.channel(settings)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Poll until cancelled; channels can be asked for once started."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                for poller, checked in self._pollers.values():
                    group.start_soon(self._poll, poller, checked)
                self._llm.batching = self.channel
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._group = None
            self._llm.batching = self._llm.batch = None
            with anyio.CancelScope(shield=True):
                for poller, _ in self._pollers.values():
                    await poller.aclose()

    def channel(self, settings: Settings) -> BatchChannel:
        """The channel of ``settings``' endpoint, its poller started if it has none."""
        self._add(settings, checked=False)
        return BatchChannel(self._store, endpoint=endpoint_of(settings), reask=settings.batch_reask)

    def _add(self, settings: Settings, *, checked: bool) -> BatchPoller:
        endpoint = endpoint_of(settings)
        found = self._pollers.get(endpoint)
        if found is not None:
            return found[0]
        # the worker's name first: a worker registering after a crash frees its dead polls
        owner = f"{self._owner}:batches:{len(self._pollers)}"
        from ragjury.llm.batch_poller import BatchPoller

        poller = BatchPoller(self._store, settings, owner=owner)
        self._pollers[endpoint] = (poller, checked)
        if self._group is not None:
            self._group.start_soon(self._poll, poller, checked)
        return poller

    async def _poll(self, poller: BatchPoller, checked: bool) -> None:
        if not checked:
            try:
                await poller.check(
                    who="a judge of --batch-judges (or --batch)",
                    fix="send that judge's calls directly (leave it out of --batch-judges)",
                )
            except ConfigurationError as exc:  # the run stops with it, its work kept
                self._llm.fatal_error = LLMTransportError(str(exc), permanent=True)
                self._llm.fatal.set()
                return
        await poller.run()
