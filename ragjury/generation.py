"""Dataset generation: documents in, critic-filtered question/answer pairs out.

Wires the chunker, generator, deduplicator, three critics and aggregator on a bus, feeds the
documents, and collects what comes out. The run ends when every delivery on the bus has been
acknowledged after the last document went in (``bus.wait_idle``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
import structlog

from ragjury.agents import (
    Agent,
    Aggregator,
    Chunker,
    Deduplicator,
    Generator,
    GroundednessCritic,
    RelevanceCritic,
    StandaloneCritic,
)
from ragjury.bus import MemoryBus
from ragjury.config import Settings
from ragjury.llm import LLM
from ragjury.output import RecordWriter, pair_record
from ragjury.prompts import Prompt
from ragjury.runtime import AgentSpec, Runtime, agent_specs, run_to_completion
from ragjury.schemas import (
    ChunkFailed,
    ChunkReady,
    Document,
    DocumentSubmitted,
    DuplicateDropped,
    Envelope,
    PairJudged,
    QuestionsDrafted,
    StepFailed,
)
from ragjury.store import Store

log = structlog.get_logger("ragjury.generation")


@dataclass
class GenerationCounts:
    """What the run has seen so far; the progress display and the summary read it."""

    documents: int = 0
    chunks: int = 0
    chunks_done: int = 0
    chunks_failed: int = 0
    pairs_drafted: int = 0
    duplicates_dropped: int = 0
    kept: int = 0
    rejected: int = 0
    failed: int = 0
    steps_failed: int = 0
    failed_chunks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def judged(self) -> int:
        return self.kept + self.rejected + self.failed


ProgressCallback = Callable[[GenerationCounts], None]


class _Collector:
    """The sink of the pipeline: counts, writes each judged pair, stores it."""

    role: ClassVar[str] = "collector"
    consumes: ClassVar[tuple[type[Any], ...]] = (
        ChunkReady,
        ChunkFailed,
        QuestionsDrafted,
        DuplicateDropped,
        PairJudged,
        StepFailed,
    )
    max_workers: ClassVar[int] = 1

    def __init__(
        self,
        counts: GenerationCounts,
        kept: RecordWriter | None,
        rejected: RecordWriter | None,
        store: Store,
        run_id: str,
        on_progress: ProgressCallback | None,
    ) -> None:
        self.counts = counts
        self._kept, self._rejected = kept, rejected
        self._store, self._run_id = store, run_id
        self._on_progress = on_progress

    async def handle(self, event: Any) -> list[Any]:
        counts = self.counts
        if isinstance(event, ChunkReady):
            counts.chunks += 1
        elif isinstance(event, QuestionsDrafted):
            counts.chunks_done += 1
            counts.pairs_drafted += len(event.pairs)
        elif isinstance(event, ChunkFailed):
            counts.chunks_done += 1
            counts.chunks_failed += 1
            counts.failed_chunks.append(
                {
                    "chunk_id": event.chunk.id,
                    "source": event.chunk.source,
                    **event.error.model_dump(),
                }
            )
            log.warning("chunk_failed", chunk_id=event.chunk.id, error=event.error.message)
        elif isinstance(event, DuplicateDropped):
            counts.duplicates_dropped += 1
        elif isinstance(event, StepFailed):
            counts.steps_failed += 1
        elif isinstance(event, PairJudged):
            await self.write(event)
        if self._on_progress is not None:
            self._on_progress(counts)
        return []

    async def write(self, judged: PairJudged) -> None:
        record = pair_record(judged)
        setattr(self.counts, judged.outcome, getattr(self.counts, judged.outcome) + 1)
        writer = self._kept if judged.outcome == "kept" else self._rejected
        if writer is not None:
            writer.write(record)
        await self._store.save_pair(self._run_id, record)


def build_agents(
    llm: LLM, settings: Settings, prompts: dict[str, Prompt] | None = None
) -> list[AgentSpec]:
    """The generation agents with their worker counts (``Settings.workers`` overrides)."""
    options = settings.generate
    prompts = prompts or {}

    def prompt(name: str) -> Prompt:
        return prompts.get(name) or Prompt.builtin(name)

    llm_workers = settings.concurrency
    agents: list[tuple[Agent, int]] = [
        (Chunker(options), 1),
        (Generator(llm, prompt("generator"), options), llm_workers),
        (Deduplicator(options.dedup_threshold), 1),
        (GroundednessCritic(llm, prompt("groundedness")), llm_workers),
        (RelevanceCritic(llm, prompt("relevance"), audience=options.audience), llm_workers),
        (StandaloneCritic(llm, prompt("standalone")), llm_workers),
        (Aggregator(options.min_score), 1),
    ]
    return agent_specs(agents, settings.workers)


async def run_generation(
    documents: Iterable[Document],
    *,
    settings: Settings,
    llm: LLM,
    store: Store,
    run_id: str,
    kept: RecordWriter | None = None,
    rejected: RecordWriter | None = None,
    on_progress: ProgressCallback | None = None,
    prompts: dict[str, Prompt] | None = None,
) -> GenerationCounts:
    """Run the generation pipeline over ``documents``; return what happened.

    ``documents`` may be a lazy iterable (``ragjury.ingest.iter_documents``): each is taken
    only when the bus has room for it, so memory stays flat however many there are.
    """
    counts = GenerationCounts()
    bus = MemoryBus(settings.bus_buffer)
    specs = build_agents(llm, settings, prompts)
    collector = _Collector(counts, kept, rejected, store, run_id, on_progress)
    runtime = Runtime(bus, [*specs, AgentSpec(collector)])
    aggregator = next(s.agent for s in specs if isinstance(s.agent, Aggregator))
    assert isinstance(aggregator, Aggregator)

    async def feed() -> None:
        async for document in _pulled(documents):
            counts.documents += 1
            await bus.publish(
                Envelope(correlation_id=document.id, payload=DocumentSubmitted(document=document))
            )

    async def drain() -> None:
        for judged in aggregator.flush_incomplete():
            await collector.write(judged)

    await run_to_completion(runtime, llm, feed=feed, drain=drain)
    return counts


async def _pulled(documents: Iterable[Document]) -> AsyncIterator[Document]:
    """The documents one by one; a lazy iterable (which reads files) is advanced in a worker
    thread, so reading a large file never stalls the event loop and the calls in flight."""
    if isinstance(documents, Sequence):
        for document in documents:
            yield document
        return
    iterator = iter(documents)
    while (document := await anyio.to_thread.run_sync(next, iterator, None)) is not None:
        yield document


def summarise(
    counts: GenerationCounts, llm: LLM, *, wall_seconds: float, skipped: Sequence[dict[str, str]]
) -> dict[str, Any]:
    """The ``--summary`` JSON."""
    return {
        "documents": counts.documents,
        "documents_skipped": len(skipped),
        "chunks": counts.chunks,
        "chunks_failed": counts.chunks_failed,
        "pairs_drafted": counts.pairs_drafted,
        "duplicates_dropped": counts.duplicates_dropped,
        "kept": counts.kept,
        "rejected": counts.rejected,
        "failed": counts.failed,
        "llm_calls": llm.usage.requests,
        "prompt_tokens": llm.usage.prompt_tokens,
        "completion_tokens": llm.usage.completion_tokens,
        "wall_seconds": round(wall_seconds, 3),
        "by_stage": llm.usage.by_stage(),
        "skipped": list(skipped),
        "failed_chunks": counts.failed_chunks,
        "model": llm.settings.model,
    }
