"""The embedding API: ragjury inside an async application.

::

    async with Jury(settings) as jury:
        result = await jury.evaluate_one(question=..., answer=..., contexts=[...])
        result.passing, result.reason, result.feedback  # True only if every metric passed
        result.faithfulness.statements                 # typed, per metric

        await jury.submit_documents(paths)           # or jury.submit_samples(samples)
        async for event in jury.events():            # PairJudged, SampleScored, ... as they happen
            ...

    # or run the daemon inside the application: await task_group.start(jury.serve)

It runs the same agents as the CLI, in the caller's event loop (no ``asyncio.run`` inside),
and shares one LLM client (one concurrency limit) across calls. Queued work lives in the
database ``settings.db``, exactly as with ``ragjury submit`` / ``ragjury serve``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from ragjury._json import JSONData
from ragjury._task_groups import only_the_callers
from ragjury.api_inputs import SampleInput, as_samples
from ragjury.config import Settings
from ragjury.errors import ConfigurationError, InputError, RagjuryError
from ragjury.evaluation.panel import panel_metrics
from ragjury.ingest import DocumentReader
from ragjury.llm import LLM, tracing
from ragjury.logs import configure_if_unset
from ragjury.metrics import Metric
from ragjury.pipelines.evaluation import MetricPlan, plan_metrics
from ragjury.prompts import Prompt
from ragjury.results import EvaluationResult, is_result_event
from ragjury.runner import Runner, evaluate_in_memory, submit_documents, submit_samples
from ragjury.schemas import JuryEvent, Sample
from ragjury.schemas.panel import REPEAT_TEMPERATURE, Panel
from ragjury.store import Store, open_store


class Jury:
    """Judge samples and work the queue from Python. Use as ``async with Jury(settings)``."""

    def __init__(
        self,
        settings: Settings,
        *,
        prompts: dict[str, Prompt] | None = None,
        judges: Sequence[str | Path | Metric] = (),
        panel: Panel | None = None,
    ) -> None:
        """``judges``: judge files (paths) or :class:`~ragjury.metrics.Metric` declarations
        whose metrics ``metrics=[...]`` may name, beside the built-in and plugin ones.
        ``panel``: every LLM-judged metric asked of these judges, each ``repeats`` times,
        combined per sample (``Panel(judges=(PanelJudge(name="a", model="gpt-4o-mini"),
        ...), repeats=3)``; a judge declared in ``settings.panel`` brings its key and
        limits), as ``--judges`` and ``--repeats`` do; None: the settings' model, once."""
        self.settings = settings
        self._panel = panel
        self._prompts = prompts or {}
        self._judges = [j if isinstance(j, Metric) else str(j) for j in judges]
        self._llm: LLM | None = None
        self._store: Store | None = None
        self._store_lock = anyio.Lock()
        self._tasks: TaskGroup | None = None
        self._listeners: dict[MemoryObjectSendStream[JuryEvent], bool] = {}
        """Each listener's stream, and whether it wants internal events too."""
        self._submitted: list[str] = []
        self._serving = 0

    async def __aenter__(self) -> Jury:
        configure_if_unset(self.settings.log_level)
        if self.settings.otel:
            tracing.use_global()  # the application's tracer provider, if it set one
        self._llm = LLM(self.settings)
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._tasks is not None:
                for send in list(self._listeners):
                    send.close()
                self._tasks.cancel_scope.cancel()
                try:
                    await self._tasks.__aexit__(exc_type, exc, tb)
                except BaseExceptionGroup as group:
                    if not only_the_callers(group, exc):
                        raise
        finally:
            self._tasks = None
            with anyio.CancelScope(shield=True):
                if self._store is not None:
                    await self._store.__aexit__(None, None, None)
                    self._store = None
                if self._llm is not None:
                    await self._llm.aclose()
                    self._llm = None

    @property
    def llm(self) -> LLM:
        if self._llm is None:
            raise RuntimeError("use the jury inside 'async with Jury(settings) as jury'")
        return self._llm

    async def store(self) -> Store:
        """The database ``settings.db`` (opened on first use)."""
        self.llm  # noqa: B018 - raises outside 'async with'
        async with self._store_lock:
            if self._store is None:
                self._store = await open_store(
                    self.settings.db,
                    concurrency=self.settings.concurrency,
                    reconnect=self.settings.db_reconnect,
                ).__aenter__()
        return self._store

    async def evaluate_one(
        self,
        sample: SampleInput | None = None,
        /,
        *,
        metrics: Sequence[str] | None = None,
        **fields: JSONData,
    ) -> EvaluationResult:
        """Judge one answer, given as keywords (``question=..., answer=..., contexts=[...],
        must_contain="Paris"``), as a dict or as a ``Sample``, with the field names a file
        may use (RAGAS's and DeepEval's too). A string where a list goes is one item (one
        context, one keyword); ``None`` means the field is absent."""
        if sample is not None and fields:
            raise InputError(
                "give the sample as one argument (a dict or a Sample) or as keywords, not "
                f"both; got a {type(sample).__name__} and {', '.join(sorted(fields))}"
            )
        item = fields if sample is None else sample
        if isinstance(item, Mapping):
            item = {name: value for name, value in item.items() if value is not None}
        return (await self.evaluate([item], metrics=metrics))[0]

    def _plan(self, samples: Sequence[Sample], metrics: Sequence[str] | None) -> MetricPlan:
        return plan_metrics(self.settings, samples, self._judges, metrics)

    async def evaluate(
        self, samples: Sequence[SampleInput], *, metrics: Sequence[str] | None = None
    ) -> list[EvaluationResult]:
        """Judge many samples (``Sample`` objects or dicts, ids optional) concurrently, in
        memory (no queue); results in input order."""
        samples = as_samples(samples)
        plan = self._plan(samples, metrics)
        results = await evaluate_in_memory(
            samples,
            settings=self.settings,
            llm=self.llm,
            metrics=plan.names,
            prompts=self._prompts,
            judges=plan.judges,
            panel=self._checked_panel(plan),
        )
        if len(results) < len(samples):
            raise RagjuryError(
                f"budget reached: {self.llm.budget.reason}; {len(samples) - len(results)} of "
                f"{len(samples)} samples were not judged. Raise Settings.max_tokens / max_cost "
                "or use a new Jury"
            )
        return [EvaluationResult.from_scored(r) for r in results]

    async def submit_documents(self, paths: Sequence[str | Path]) -> str:
        """Queue the documents under ``paths`` for dataset generation; the job id.

        Uses ``settings.generate``; the same documents and options make the same job."""
        options = self.settings.generate
        documents = DocumentReader(
            paths, globs=options.globs, text_field=options.text_field, id_field=options.id_field
        )  # read a file at a time on each pass, never all held
        if next(documents(), None) is None:
            reasons = "; ".join(f"{s.path}: {s.reason}" for s in documents.skipped[:5])
            raise InputError(
                f"no readable documents in {', '.join(map(str, paths))}"
                + (f" (skipped: {reasons})" if reasons else "")
            )
        job = await submit_documents(await self.store(), self.settings, documents, self._prompts)
        self._submitted.append(job.id)
        return job.id

    async def submit_samples(
        self, samples: Sequence[SampleInput], *, metrics: Sequence[str] | None = None
    ) -> str:
        """Queue ``samples`` (``Sample`` objects or dicts, ids optional) for evaluation; the
        job id."""
        samples = as_samples(samples)
        plan = self._plan(samples, metrics)
        job = await submit_samples(
            await self.store(),
            self.settings,
            samples,
            plan.names,
            self._prompts,
            judges=plan.judges,
            panel=self._checked_panel(plan),
        )
        self._submitted.append(job.id)
        return job.id

    def _checked_panel(self, plan: MetricPlan) -> Panel | None:
        """The jury's panel, at a temperature above 0 for repeats; a clear error when no
        metric of ``plan`` is judged by an LLM."""
        if self._panel is None:
            return None
        if not panel_metrics(plan.chosen):
            raise ConfigurationError(
                f"the jury's panel asks LLM judges, but none of the metrics chosen "
                f"({', '.join(plan.names)}) is judged by an LLM; choose one with metrics=[...]"
            )
        panel = self._panel
        if panel.repeats > 1 and panel.temperature == 0:
            panel = panel.model_copy(update={"temperature": REPEAT_TEMPERATURE})
        return panel

    async def events(self, *, internal: bool = False) -> AsyncGenerator[JuryEvent, None]:
        """Result events, each once its item's results are stored: PairJudged (each pair of a
        finished document), DocumentJudged (the document's end, with its failed chunks),
        SampleScored, and ItemFailed for an item that failed as a whole. ``internal=True``
        adds every step's output as this process's workers make it (ChunkReady,
        PairDrafted, ...; steps other processes work are not seen).

        While :meth:`serve` runs, this follows the workers until the jury closes. Otherwise it
        works the jobs this jury submitted (every queued job if none) and ends when they are
        done."""
        if self._tasks is None:
            raise RuntimeError("use the jury inside 'async with Jury(settings) as jury'")
        send, receive = anyio.create_memory_object_stream[JuryEvent](self.settings.bus_buffer)
        self._listeners[send] = internal
        if not self._serving:
            jobs = list(self._submitted) or None
            self._tasks.start_soon(self._work_then_close, jobs, send)
        try:
            async with receive:
                async for event in receive:
                    if internal or is_result_event(event):
                        yield event
        finally:
            self._listeners.pop(send, None)
            send.close()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Work the queue until cancelled (``await task_group.start(jury.serve)``)."""
        runner = Runner(
            self.settings,
            await self.store(),
            self.llm,
            on_event=self._broadcast,
            on_output=self._broadcast_internal,
        )
        self._serving += 1
        try:
            await runner.run(task_status=task_status)
        finally:
            self._serving -= 1

    async def _work_then_close(
        self, jobs: list[str] | None, send: MemoryObjectSendStream[JuryEvent]
    ) -> None:
        try:
            runner = Runner(
                self.settings,
                await self.store(),
                self.llm,
                job_ids=jobs,
                on_event=self._broadcast,
                on_output=self._broadcast_internal,
            )
            await runner.run(until_done=True)
        finally:
            send.close()

    async def _broadcast(self, job_id: str, event: JuryEvent, *, internal: bool = False) -> None:
        for send, wants_internal in list(self._listeners.items()):
            if internal and not wants_internal:
                continue
            try:
                await send.send(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._listeners.pop(send, None)

    async def _broadcast_internal(self, job_id: str, event: JuryEvent) -> None:
        """A step's output as this process's workers make it (for ``events(internal=True)``)."""
        if any(self._listeners.values()):
            await self._broadcast(job_id, event, internal=True)
