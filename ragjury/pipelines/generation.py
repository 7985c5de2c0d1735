"""Dataset generation: documents in, critic-filtered question/answer pairs out.

``DocumentSubmitted -> chunker -> ChunkReady -> generator -> QuestionsDrafted -> deduplicator
-> PairDrafted -> critics -> CritiqueIssued -> aggregator -> PairJudged -> collector ->
DocumentJudged`` (terminal). The critics are three raters and, unless the job's options turn
it off (``--no-answer-check``), the answerability critic. The collector also hears of the
chunks (``DocumentChunked``), failed chunks, drafted questions and dropped duplicates, so it
knows when a document is over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from pydantic import BaseModel

from ragjury._json import JSONData, JSONObject, json_list, json_number
from ragjury.agents import (
    Aggregator,
    Chunker,
    Collector,
    Deduplicator,
    Generator,
    GroundednessCritic,
    ReferenceWriter,
    RelevanceCritic,
    StandaloneCritic,
)
from ragjury.agents.answerability import AnswerabilityCritic
from ragjury.agents.generator import TYPE_PROMPTS
from ragjury.agents.joins import JoinState
from ragjury.config import Settings
from ragjury.job_spec import GenerationSpec, prompt_sources
from ragjury.llm import LLM
from ragjury.output import pair_record
from ragjury.pipelines.base import Step, Steps, transient_failures
from ragjury.pipelines.job_corpus import JobCorpus
from ragjury.prompts import GENERATION_PROMPTS, Prompt
from ragjury.schemas import (
    ANSWERABILITY,
    CRITERIA,
    QUESTION_TYPES,
    BusEvent,
    Document,
    DocumentJudged,
    DocumentSubmitted,
    PairJudged,
)
from ragjury.store.base import Item, ItemResults, Job, JobKind, Store
from ragjury.store.cache import fingerprint, llm_fingerprint

PROMPT_NAMES = GENERATION_PROMPTS


@dataclass
class GenerationCounts:
    """A generation job's counts: the sum of its finished documents' reports."""

    documents: int = 0
    documents_submitted: int = 0
    documents_done: int = 0
    chunks: int = 0
    chunks_failed: int = 0
    pairs_drafted: int = 0
    duplicates_dropped: int = 0
    kept: int = 0
    rejected: int = 0
    failed: int = 0
    chunks_not_drafted: int = 0
    failed_chunks: list[Mapping[str, JSONData]] = field(default_factory=list)

    @property
    def judged(self) -> int:
        return self.kept + self.rejected + self.failed

    def add_report(self, report: Mapping[str, JSONData]) -> None:
        """Add one finished document's report (see :func:`report_of`)."""
        for f in fields(self):
            if f.name in report and f.name != "failed_chunks":
                added = int(json_number(report[f.name]))
                setattr(self, f.name, getattr(self, f.name) + added)
        chunks = json_list(report.get("failed_chunks"))
        self.failed_chunks.extend(chunk for chunk in chunks if isinstance(chunk, Mapping))
        self.documents_done += 1


def report_of(judged: DocumentJudged) -> JSONObject:
    """A finished document's counts, as stored with it."""
    outcomes = [pair.outcome for pair in judged.pairs]
    return {
        "chunks": judged.chunks,
        "chunks_failed": judged.chunks_failed,
        "pairs_drafted": judged.pairs_drafted,
        "duplicates_dropped": judged.duplicates_dropped,
        "kept": outcomes.count("kept"),
        "rejected": outcomes.count("rejected"),
        "failed": outcomes.count("failed"),
        "failed_chunks": list(judged.failed_chunks),
        **({"chunks_not_drafted": judged.chunks_not_drafted} if judged.chunks_not_drafted else {}),
    }


class GenerationPipeline(Steps):
    kind: ClassVar[JobKind] = "generate"
    _roles: ClassVar[tuple[str, ...]] = (
        "chunker",
        "generator",
        "deduplicator",
        "groundedness_critic",
        "relevance_critic",
        "standalone_critic",
        "answerability_critic",
        "aggregator",
        "reference_writer",
        "collector",
    )
    _llm_roles: ClassVar[frozenset[str]] = frozenset(
        {
            "generator",
            "groundedness_critic",
            "relevance_critic",
            "standalone_critic",
            "reference_writer",
            "answerability_critic",
        }
    )

    @classmethod
    def known_roles(cls) -> tuple[str, ...]:
        return cls._roles

    @classmethod
    def llm_roles(cls) -> frozenset[str]:
        return cls._llm_roles

    terminal: ClassVar[type[BaseModel]] = DocumentJudged

    def __init__(self, job: Job, settings: Settings, llm: LLM, store: Store) -> None:
        spec = GenerationSpec.model_validate(job.options)
        options, prompts = spec.generate, spec.custom_prompts(job.id)

        def prompt(name: str) -> Prompt:
            return prompts.get(name) or Prompt.builtin(name)

        joins = JoinState(store, job.id)
        model = llm_fingerprint(settings)
        typed = {
            kind: prompt(TYPE_PROMPTS[kind])
            for kind in QUESTION_TYPES[1:]
            if kind in options.question_types
        }
        drafting: list[JSONData] = [
            model,
            prompt("generator").version,
            options.questions_per_chunk,
            options.answer_style,
        ]
        if typed:  # a default job's fingerprint stays what it always was
            drafting.append({kind: p.version for kind, p in typed.items()})
        relevance: list[JSONData] = [model, prompt("relevance").version, options.audience]
        persona_prompts = None
        if options.personas:  # the persona is in each message; its prompts are here
            persona_prompts = prompt("generator_persona"), prompt("relevance_persona")
            drafting.append({"persona": persona_prompts[0].version})
            relevance.append({"persona": persona_prompts[1].version})
        planned = options.typed or options.max_pairs is not None or bool(options.personas)
        corpus = JobCorpus(store, job.id, options) if planned else None
        checks: dict[str, Step] = {}
        if options.answer_check:
            answering, agreement = prompt("answerability"), prompt("answer_agreement")
            checks["answerability_critic"] = Step(
                AnswerabilityCritic(llm, answering, agreement),
                fingerprint(model, answering.version, agreement.version),
            )
        criteria = (*CRITERIA, ANSWERABILITY) if options.answer_check else CRITERIA
        steps = {
            "chunker": Step(Chunker(options, corpus)),
            "generator": Step(
                Generator(
                    llm,
                    prompt("generator"),
                    options,
                    typed,
                    persona_prompts[0] if persona_prompts else None,
                ),
                fingerprint(*drafting),
            ),
            "deduplicator": Step(Deduplicator(options.dedup_threshold, store, job.id)),
            "groundedness_critic": Step(
                GroundednessCritic(llm, prompt("groundedness")),
                fingerprint(model, prompt("groundedness").version),
            ),
            "relevance_critic": Step(
                RelevanceCritic(
                    llm,
                    prompt("relevance"),
                    audience=options.audience,
                    persona_prompt=persona_prompts[1] if persona_prompts else None,
                ),
                fingerprint(*relevance),
            ),
            "standalone_critic": Step(
                StandaloneCritic(llm, prompt("standalone")),
                fingerprint(model, prompt("standalone").version),
            ),
            **checks,
            "aggregator": Step(
                Aggregator(
                    options.min_score, joins, criteria, multi_hop_strict=options.multi_hop_strict
                )
            ),
            "collector": Step(Collector(joins, references=options.reference_answers)),
        }
        if options.reference_answers:
            steps["reference_writer"] = Step(
                ReferenceWriter(llm, prompt("reference_answer")),
                fingerprint(model, prompt("reference_answer").version),
            )
        self._options = options
        super().__init__(steps)

    @staticmethod
    def spec(settings: Settings, prompts: Mapping[str, Prompt]) -> GenerationSpec:
        """What a generation job is: the options and any custom prompts."""
        return GenerationSpec(generate=settings.generate, prompts=prompt_sources(prompts))

    @staticmethod
    def item(document: Document) -> tuple[str, Document]:
        return document.id, document

    async def first_events(self, item: Item) -> list[BusEvent]:
        return [DocumentSubmitted(document=Document.model_validate(item.payload))]

    def results(self, terminal: DocumentJudged) -> ItemResults:
        return ItemResults(
            pairs=[pair_record(judged, typed=self._options.typed) for judged in terminal.pairs],
            report=report_of(terminal),
            # a chunk the endpoint failed is kept as a plain record, its Failure's fields
            transient_failures=transient_failures([terminal])
            + sum(bool(chunk.get("transient")) for chunk in terminal.failed_chunks),
        )

    def failed(
        self, item_key: str, payload: Mapping[str, Any] | None, reason: str
    ) -> ItemResults | None:
        return None

    def public(self, terminal: DocumentJudged) -> list[BusEvent]:
        return [*terminal.pairs, terminal]


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
        **({"chunks_not_drafted": counts.chunks_not_drafted} if counts.chunks_not_drafted else {}),
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


async def generation_counts(store: Store, job_id: str) -> GenerationCounts:
    """What the store holds of a generation job: the sum of its finished documents' reports."""
    counts = GenerationCounts()
    async for report in store.reports(job_id):
        counts.add_report(report)
    # the stored pairs are what is exported (and what databases of ragjury 0.1 have)
    outcomes = await store.pair_outcomes(job_id)
    counts.kept = outcomes.get("kept", 0)
    counts.rejected = outcomes.get("rejected", 0)
    counts.failed = outcomes.get("failed", 0)
    return counts


__all__ = [
    "PROMPT_NAMES",
    "GenerationCounts",
    "GenerationPipeline",
    "PairJudged",
    "generation_counts",
    "report_of",
    "summarise",
]
