"""Dataset generation: documents in, critic-filtered question/answer pairs out.

The agents of the generation pipeline (chunker, generator, deduplicator, three critics and
aggregator), the counts a run reports, and its summary. :mod:`ragjury.jobs` wires the agents
on a bus per job; :mod:`ragjury.runs` runs a batch of documents as a job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
from ragjury.config import Settings
from ragjury.llm import LLM
from ragjury.prompts import Prompt
from ragjury.runtime import AgentSpec, agent_specs
from ragjury.schemas import (
    ChunkFailed,
    ChunkReady,
    DuplicateDropped,
    PairJudged,
    QuestionsDrafted,
    StepFailed,
)
from ragjury.store.cache import fingerprint, llm_fingerprint

log = structlog.get_logger("ragjury.generation")


@dataclass
class GenerationCounts:
    """What the run has seen so far; the progress display and the summary read it."""

    documents: int = 0
    documents_submitted: int = 0
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

    def observe(self, event: Any) -> None:
        """Count one event of a running job (for the progress display)."""
        if isinstance(event, ChunkReady):
            self.chunks += 1
        elif isinstance(event, QuestionsDrafted):
            self.chunks_done += 1
            self.pairs_drafted += len(event.pairs)
        elif isinstance(event, ChunkFailed):
            self.chunks_done += 1
            self.chunks_failed += 1
            log.warning("chunk_failed", chunk_id=event.chunk.id, error=event.error.message)
        elif isinstance(event, DuplicateDropped):
            self.duplicates_dropped += 1
        elif isinstance(event, StepFailed):
            self.steps_failed += 1
        elif isinstance(event, PairJudged):
            setattr(self, event.outcome, getattr(self, event.outcome) + 1)

    def add_report(self, report: dict[str, Any]) -> None:
        """Add a finished item's stored report (a resumed job's earlier work)."""
        self.chunks += report.get("chunks", 0)
        self.chunks_done += report.get("chunks", 0)
        self.chunks_failed += report.get("chunks_failed", 0)
        self.pairs_drafted += report.get("pairs_drafted", 0)
        self.duplicates_dropped += report.get("duplicates_dropped", 0)
        self.steps_failed += report.get("steps_failed", 0)
        self.failed_chunks.extend(report.get("failed_chunks", []))


ProgressCallback = Callable[[GenerationCounts], None]


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
    model = llm_fingerprint(settings)
    fingerprints = {
        "generator": fingerprint(
            model, prompt("generator").version, options.questions_per_chunk, options.answer_style
        ),
        "groundedness_critic": fingerprint(model, prompt("groundedness").version),
        "relevance_critic": fingerprint(model, prompt("relevance").version, options.audience),
        "standalone_critic": fingerprint(model, prompt("standalone").version),
    }
    return agent_specs(agents, settings.workers, fingerprints)


def summarise(
    counts: GenerationCounts, llm: LLM, *, wall_seconds: float, skipped: Sequence[dict[str, str]]
) -> dict[str, Any]:
    """The ``--summary`` JSON."""
    return {
        "documents": counts.documents,
        "documents_skipped": len(skipped),
        "documents_not_submitted": counts.documents - counts.documents_submitted,
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
