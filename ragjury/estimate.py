"""``--dry-run``: what a ``generate`` or ``evaluate`` run would cost, before any LLM call.

Documents are loaded and chunked, samples loaded, and the real prompts rendered for each
call the pipeline would make; prompt tokens are estimated from their length (see
:mod:`ragjury.llm.tokens`) plus the response schema instructor sends with them. Completion
sizes are assumptions (:data:`COMPLETION_GUESS`). The estimate assumes no retries, no
duplicate dropped and, for faithfulness, one statement per sentence of the answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from ragjury._json import JSONData
from ragjury.agents.critics import (
    GroundednessCritique,
    RelevanceCritique,
    StandaloneCritique,
    pair_context,
)
from ragjury.agents.generator import TYPE_PROMPTS, draft_messages
from ragjury.agents.question_plan import chunks_of, draft_plan, drawn_type
from ragjury.config import GenerationOptions, Settings
from ragjury.ingest.related import RelatedChunks
from ragjury.llm.tokens import estimate_prompt_tokens
from ragjury.metrics import EstimateContext, Metric
from ragjury.metrics.declaration import schema_tokens
from ragjury.pricing import PRICES_AS_OF, PriceTable
from ragjury.prompts import Prompt
from ragjury.schemas import MULTI_CHUNK_TYPES, Chunk, ChunkReady, Document, QAPair, Sample
from ragjury.schemas.drafts import DRAFT_MODELS

COMPLETION_GUESS = {"pair_factoid": 45, "pair_detailed": 140, "critique": 80, "pair_quotes": 60}
"""Assumed completion tokens of generation: per drafted pair, per critique (each metric's
own assumptions are in its declaration's ``estimate``)."""
_ASSUMED_TARGET_ANSWER = "A typical answer of three sentences. " * 3
_ASSUMED_CONTEXT = "A retrieved passage of typical length. " * 25
_CRITICS = (
    ("groundedness_critic", "groundedness", GroundednessCritique),
    ("relevance_critic", "relevance", RelevanceCritique),
    ("standalone_critic", "standalone", StandaloneCritique),
)
# What a drafted pair looks like to a critic: a question and an answer of typical length.
_TYPICAL_QUESTION = "Which setting controls the behaviour described in this section of the docs?"
_TYPICAL_ANSWER = {"factoid": "The value named in the text.", "detailed": "An explanation. " * 25}


@dataclass
class StageEstimate:
    model: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, prompt_tokens: int, completion_tokens: int, calls: int = 1) -> None:
        self.calls += calls
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens


@dataclass
class Estimate:
    """Estimated LLM calls and tokens by stage, and their cost where the model has a price."""

    command: str
    items: dict[str, int]
    stages: dict[str, StageEstimate] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)

    def stage(self, name: str, model: str) -> StageEstimate:
        return self.stages.setdefault(name, StageEstimate(model))

    def as_dict(self, prices: PriceTable) -> dict[str, JSONData]:
        by_stage: dict[str, dict[str, JSONData]] = {}
        costs: list[float] = []
        unpriced_models: set[str] = set()
        for name, s in sorted(self.stages.items()):
            cost = _round(prices.cost(s.model, s.prompt_tokens, s.completion_tokens))
            if cost is None:
                unpriced_models.add(s.model)
            else:
                costs.append(cost)
            by_stage[name] = {
                "model": s.model,
                "llm_calls": s.calls,
                "prompt_tokens": s.prompt_tokens,
                "completion_tokens": s.completion_tokens,
                "cost_usd": cost,
            }
        unpriced = sorted(unpriced_models)
        return {
            "dry_run": True,
            "command": self.command,
            **self.items,
            "llm_calls": sum(s.calls for s in self.stages.values()),
            "prompt_tokens": sum(s.prompt_tokens for s in self.stages.values()),
            "completion_tokens": sum(s.completion_tokens for s in self.stages.values()),
            "cost_usd": None if unpriced else _round(sum(costs)),
            "unpriced_models": unpriced,
            "prices_as_of": PRICES_AS_OF,
            "by_stage": by_stage,
            "assumptions": self.assumptions,
        }


def estimate_generation(
    documents: Iterable[Document], settings: Settings, prompts: Mapping[str, Prompt]
) -> Estimate:
    """One generator call per chunk and three critic calls per drafted pair. ``documents``
    is read once, a document at a time; with ``--question-types`` other than factoid the
    job's chunks are kept (their related chunks are found among all of them), and each
    chunk is estimated with its type's prompt and its related chunk, as the run plans it."""
    options, model = settings.generate, settings.model
    wanted = options.questions_per_chunk
    pair_guess = COMPLETION_GUESS[f"pair_{options.answer_style}"]
    estimate = Estimate("generate", {"documents": 0, "chunks": 0})
    estimate.assumptions = [
        "no retries or re-asks",
        "no near-duplicate question dropped",
        f"{pair_guess} completion tokens per drafted pair, "
        f"{COMPLETION_GUESS['critique']} per critique",
    ]
    if options.typed:
        estimate.assumptions.append(
            f"{COMPLETION_GUESS['pair_quotes']} more completion tokens per pair of a type "
            "other than factoid (its quotes)"
        )
    critics = [
        (role, prompts.get(name) or Prompt.builtin(name), schema, extra)
        for (role, name, schema), extra in zip(
            _CRITICS, ({}, {"audience": options.audience}, {}), strict=True
        )
    ]
    drafting = {
        kind: prompts.get(name) or Prompt.builtin(name) for kind, name in TYPE_PROMPTS.items()
    }
    planned = _planned(documents, options, estimate)
    for event in planned:
        chunk, plan = event.chunk, event.plan
        kind = "factoid" if plan is None else plan.question_type
        completion = pair_guess + (0 if plan is None else COMPLETION_GUESS["pair_quotes"])
        estimate.stage("generator", model).add(
            _prompt(draft_messages(event, drafting, options), DRAFT_MODELS[kind]),
            completion * wanted,
        )
        typical = QAPair(
            id="",
            question=_TYPICAL_QUESTION,
            answer=_TYPICAL_ANSWER[options.answer_style],
            context=chunk.text,
            source=chunk.source,
            chunk_id=chunk.id,
            related=() if plan is None else plan.related,
        )
        for role, prompt, schema, extra in critics:
            messages = prompt.render(
                question=typical.question,
                answer=typical.answer,
                context=pair_context(typical),
                contexts=list(typical.contexts),
                **extra,
            )
            estimate.stage(role, model).add(
                _prompt(messages, schema) * wanted,
                COMPLETION_GUESS["critique"] * wanted,
                calls=wanted,
            )
    return estimate


def _planned(
    documents: Iterable[Document], options: GenerationOptions, estimate: Estimate
) -> Iterator[ChunkReady]:
    """Each chunk as the chunker would hand it to the generator (a document at a time when
    every question is a factoid; after reading every chunk, to relate them, otherwise)."""
    chunks: list[Chunk] = []
    for document in documents:
        estimate.items["documents"] += 1
        found = chunks_of(document, options)
        estimate.items["chunks"] += len(found)
        if not options.typed:
            yield from (ChunkReady(chunk=chunk) for chunk in found)
        else:
            chunks.extend(found)
    if not chunks:
        return
    index = RelatedChunks.of(chunks)
    by_id = {chunk.id: chunk for chunk in chunks}
    for chunk in chunks:
        kind = drawn_type(chunk, options)
        relation = index.related(chunk.id) if kind in MULTI_CHUNK_TYPES else None
        related = by_id.get(relation.chunk_id) if relation is not None else None
        yield ChunkReady(chunk=chunk, plan=draft_plan(kind, relation, related))


def estimate_evaluation(
    samples: Iterable[Sample],
    metrics: Sequence[Metric],
    settings: Settings,
    prompts: Mapping[str, Prompt],
    *,
    has_target: bool,
) -> Estimate:
    """The calls each metric makes for each sample, as its declaration estimates them.
    ``samples`` is read once, a sample at a time (a :class:`~ragjury.evaluation.inputs.
    SampleFile`)."""
    options, model = settings.evaluate, settings.model
    estimate = Estimate("evaluate", {"samples": 0})
    estimate.assumptions = [
        "no retries or re-asks",
        "statements: one per sentence of the text split; every context window judges "
        "every statement",
    ]
    if has_target:
        estimate.assumptions.append(
            "samples without an answer get a three-sentence answer from --target, with their "
            "reference contexts as the retrieved ones (or three of 1,000 characters)"
        )

    def add(stage: str, model: str, prompt_tokens: int, completion: int, calls: int) -> None:
        estimate.stage(stage, model).add(prompt_tokens, completion, calls)

    for sample in samples:
        estimate.items["samples"] += 1
        answered = sample.answer is None and has_target
        contexts = [c for c in sample.contexts if c.strip()]
        if answered and not contexts:
            contexts = [c for c in sample.reference_contexts if c.strip()] or [_ASSUMED_CONTEXT] * 3
        context = EstimateContext(
            sample=sample,
            answer=_ASSUMED_TARGET_ANSWER if answered else sample.answer,
            contexts=contexts,
            options=options,
            model=model,
            embedding_model=settings.embedding_model,
            prompts=prompts,
            add=add,
        )
        for metric in metrics:
            if metric.estimate is not None:
                context.metric = metric
                metric.estimate(context)
    return estimate


def _prompt(messages: Sequence[Mapping[str, JSONData]], schema: type[BaseModel]) -> int:
    """The rendered messages plus the JSON schema instructor sends with them."""
    return estimate_prompt_tokens(messages) + schema_tokens(schema)


def _round(cost: float | None) -> float | None:
    return None if cost is None else round(cost, 6)
