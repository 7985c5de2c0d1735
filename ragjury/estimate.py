"""``--dry-run``: what a ``generate`` or ``evaluate`` run would cost, before any LLM call.

Documents are loaded and chunked, samples loaded, and the real prompts rendered for each
call the pipeline would make; prompt tokens are estimated from their length (see
:mod:`ragjury.llm.tokens`) plus the response schema instructor sends with them. Completion
sizes are assumptions (:data:`COMPLETION_GUESS`). The estimate assumes no retries, no
duplicate dropped and, for faithfulness, one statement per sentence of the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pydantic import BaseModel

from ragjury._json import JSONData
from ragjury.agents.answerability import (
    AGREEMENT_STAGE,
    ANSWER_STAGE,
    AnswerAgreement,
    OwnAnswer,
)
from ragjury.agents.balance import Candidate, drafted_chunks
from ragjury.agents.critics import (
    GroundednessCritique,
    RelevanceCritic,
    RelevanceCritique,
    StandaloneCritique,
    pair_context,
    relevance_messages,
)
from ragjury.agents.generator import TYPE_PROMPTS, draft_messages
from ragjury.agents.question_plan import chunks_of, draft_plan, drawn_type
from ragjury.agents.reference_writer import reference_messages
from ragjury.config import GenerationOptions, Settings
from ragjury.ingest.related import RelatedChunks
from ragjury.llm.tokens import estimate_prompt_tokens
from ragjury.metrics import EstimateContext, Metric
from ragjury.metrics.declaration import schema_tokens
from ragjury.pricing import PRICES_AS_OF, PriceTable
from ragjury.prompts import Prompt
from ragjury.schemas import (
    MULTI_CHUNK_TYPES,
    Chunk,
    ChunkReady,
    Document,
    Persona,
    QAPair,
    Sample,
)
from ragjury.schemas.drafts import DRAFT_MODELS
from ragjury.schemas.panel import Panel
from ragjury.schemas.responses import ProposedPersonas, ReferenceAnswer, counted

COMPLETION_GUESS = {
    "pair_factoid": 45,
    "pair_detailed": 140,
    "critique": 80,
    "pair_quotes": 60,
    "reference_answer": 150,
    "persona": 70,
    "own_answer": 40,
}
"""Assumed completion tokens of generation: per drafted pair, per critique, per reference
answer, per proposed persona, per answer of the answerability critic (each metric's own
assumptions are in its declaration's ``estimate``)."""
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


class ModeEstimate(TypedDict):
    """The estimate's calls and cost in one mode (direct, or through a batch API)."""

    llm_calls: int
    cost_usd: float | None


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

    def as_dict(
        self, prices: PriceTable, batched: Callable[[str], bool] = lambda stage: False
    ) -> dict[str, Any]:
        """The estimate as ``--dry-run`` prints it; the stages ``batched`` names (``--batch``)
        at the model's batch price, with ``mode`` saying which."""
        by_stage: dict[str, Any] = {}
        for name, s in sorted(self.stages.items()):
            mode = "batch" if batched(name) else "direct"
            price = prices.batch_cost if mode == "batch" else prices.cost
            cost = _round(price(s.model, s.prompt_tokens, s.completion_tokens))
            direct = _round(prices.cost(s.model, s.prompt_tokens, s.completion_tokens))
            by_stage[name] = {
                "model": s.model,
                "mode": mode,
                "llm_calls": s.calls,
                "prompt_tokens": s.prompt_tokens,
                "completion_tokens": s.completion_tokens,
                "cost_usd": cost,
                "direct_cost_usd": direct,
            }
        costs = [stage["cost_usd"] for stage in by_stage.values()]
        unpriced = sorted({s["model"] for s in by_stage.values() if s["cost_usd"] is None})

        def mode_totals(mode: str) -> ModeEstimate:
            stages = [stage for stage in by_stage.values() if stage["mode"] == mode]
            spent = [stage["cost_usd"] for stage in stages]
            return ModeEstimate(
                llm_calls=sum(stage["llm_calls"] for stage in stages),
                cost_usd=None if None in spent else _round(sum(spent)),
            )

        direct_costs = [stage["direct_cost_usd"] for stage in by_stage.values()]
        return {
            "dry_run": True,
            "command": self.command,
            **self.items,
            "llm_calls": sum(s.calls for s in self.stages.values()),
            "prompt_tokens": sum(s.prompt_tokens for s in self.stages.values()),
            "completion_tokens": sum(s.completion_tokens for s in self.stages.values()),
            "cost_usd": None if unpriced else _round(sum(costs)),
            "calls_by_mode": {"direct": mode_totals("direct"), "batch": mode_totals("batch")},
            "direct_cost_usd": None if unpriced else _round(sum(direct_costs)),
            "unpriced_models": unpriced,
            "prices_as_of": PRICES_AS_OF,
            "by_stage": by_stage,
            "assumptions": self.assumptions,
        }


def estimate_generation(
    documents: Iterable[Document],
    settings: Settings,
    prompts: Mapping[str, Prompt],
    *,
    proposed_personas: int = 0,
    persona_sample: list[dict[str, str]] | None = None,
) -> Estimate:
    """One generator call per chunk and three critic calls per drafted pair. ``documents``
    is read once, a document at a time; with ``--question-types`` other than factoid or
    ``--max-pairs`` the job's chunks are kept (their related chunks are found among all of
    them; the chunks to draft are chosen as the run chooses them), and each chunk is
    estimated with its type's prompt, its related chunk and its persona, as the run plans
    it. ``proposed_personas`` (``--personas auto:N``): one more call, reading
    ``persona_sample`` (:func:`ragjury.persona_proposal.corpus_sample`), and N personas of
    a typical length in the drafting and relevance prompts. ``--reference-answers``: one
    call per drafted pair, as if every pair were kept (an upper bound). The answerability
    check: two calls per pair (an own answer, then the comparison; a multi-hop pair one
    more answer per chunk, assumed not to answer alone)."""
    model = settings.model
    options = settings.generate
    if proposed_personas and not options.personas:
        description = "A reader of these documents with a typical background and need. " * 3
        placeholders = tuple(
            Persona(name=f"persona {n}", description=description.strip())
            for n in range(1, proposed_personas + 1)
        )
        options = options.model_copy(update={"personas": placeholders})
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

    def prompt(name: str) -> Prompt:
        return prompts.get(name) or Prompt.builtin(name)

    if proposed_personas:
        messages = prompt("personas").render(excerpts=persona_sample or [], count=proposed_personas)
        schema = counted(ProposedPersonas, "personas", proposed_personas)
        estimate.stage("persona_proposer", model).add(
            _prompt(messages, schema), COMPLETION_GUESS["persona"] * proposed_personas
        )
        estimate.assumptions.append(
            f"{proposed_personas} proposed personas of a typical length; "
            f"{COMPLETION_GUESS['persona']} completion tokens per persona"
        )
    if options.reference_answers:
        estimate.assumptions.append(
            "every drafted pair kept, so written a reference answer (an upper bound), "
            f"{COMPLETION_GUESS['reference_answer']} completion tokens each"
        )
    if options.answer_check:
        estimate.assumptions.append(
            "the answerability critic answers every question from its contexts (then compares "
            "its answer with the drafted one), and no chunk of a multi-hop question answers it "
            "alone (each such chunk would add a comparison)"
        )
    critics = [
        (role, prompt(name), schema, extra)
        for (role, name, schema), extra in zip(
            _CRITICS, ({}, {"audience": options.audience}, {}), strict=True
        )
    ]
    drafting = {kind: prompt(name) for kind, name in TYPE_PROMPTS.items()}
    answering, agreement = prompt("answerability"), prompt("answer_agreement")
    planned = _planned(documents, options, estimate)
    for event in planned:
        chunk, plan = event.chunk, event.plan
        kind = "factoid" if plan is None else plan.question_type
        completion = pair_guess + (0 if plan is None else COMPLETION_GUESS["pair_quotes"])
        estimate.stage("generator", model).add(
            _prompt(
                draft_messages(event, drafting, options, prompt("generator_persona")),
                DRAFT_MODELS[kind],
            ),
            completion * wanted,
        )
        typical = QAPair(
            id="",
            question=_TYPICAL_QUESTION,
            answer=_TYPICAL_ANSWER[options.answer_style],
            context=chunk.text,
            source=chunk.source,
            chunk_id=chunk.id,
            question_type=kind,
            related=() if plan is None else plan.related,
            persona=event.persona,
        )
        for role, critic_prompt, schema, extra in critics:
            messages = (
                relevance_messages(
                    critic_prompt, prompt("relevance_persona"), typical, options.audience
                )
                if role == RelevanceCritic.role
                else critic_prompt.render(
                    question=typical.question,
                    answer=typical.answer,
                    context=pair_context(typical),
                    contexts=list(typical.contexts),
                    **extra,
                )
            )
            estimate.stage(role, model).add(
                _prompt(messages, schema) * wanted,
                COMPLETION_GUESS["critique"] * wanted,
                calls=wanted,
            )
        if options.reference_answers:
            messages = reference_messages(prompt("reference_answer"), typical)
            estimate.stage("reference_writer", model).add(
                _prompt(messages, ReferenceAnswer) * wanted,
                COMPLETION_GUESS["reference_answer"] * wanted,
                calls=wanted,
            )
        if options.answer_check:
            _estimate_check(estimate, model, typical, answering, agreement, wanted)
    return estimate


def _estimate_check(
    estimate: Estimate,
    model: str,
    pair: QAPair,
    answering: Prompt,
    agreement: Prompt,
    wanted: int,
) -> None:
    """The answerability critic's calls for ``wanted`` pairs like ``pair``: an own answer
    from every context and its comparison, and a multi-hop pair's answer from each chunk."""
    texts = [pair_context(pair)]
    if pair.question_type == "multi_hop" and pair.related:
        texts += list(pair.contexts)
    for text in texts:
        messages = answering.render(question=pair.question, context=text)
        estimate.stage(ANSWER_STAGE, model).add(
            _prompt(messages, OwnAnswer) * wanted,
            COMPLETION_GUESS["own_answer"] * wanted,
            calls=wanted,
        )
    messages = agreement.render(
        question=pair.question, answer=pair.answer, own_answer=_TYPICAL_ANSWER["factoid"]
    )
    estimate.stage(AGREEMENT_STAGE, model).add(
        _prompt(messages, AnswerAgreement) * wanted,
        COMPLETION_GUESS["critique"] * wanted,
        calls=wanted,
    )


def _planned(
    documents: Iterable[Document], options: GenerationOptions, estimate: Estimate
) -> Iterator[ChunkReady]:
    """Each chunk as the chunker would hand it to the generator (a document at a time when
    every question is a factoid and every chunk is drafted; after reading every chunk, to
    relate them or choose among them, otherwise)."""
    chunks: list[Chunk] = []
    whole = options.typed or options.max_pairs is not None or bool(options.personas)
    for document in documents:
        estimate.items["documents"] += 1
        found = chunks_of(document, options)
        estimate.items["chunks"] += len(found)
        if not whole:
            yield from (ChunkReady(chunk=chunk) for chunk in found)
        else:
            chunks.extend(found)
    if not chunks:
        return
    candidates = [Candidate(c.id, c.document_id, drawn_type(c, options)) for c in chunks]
    chosen = drafted_chunks(candidates, options)
    drafted = [chunk for chunk in chunks if chunk.id in chosen]
    if options.max_pairs is not None:
        estimate.items["chunks_drafted"] = len(drafted)

    def persona(chunk: Chunk) -> Persona | None:
        index = chosen[chunk.id]
        return None if index is None else options.personas[index]

    index = RelatedChunks.of(chunks) if options.typed else None
    by_id = {chunk.id: chunk for chunk in chunks}
    for chunk in drafted:
        plan = None
        if index is not None:
            kind = drawn_type(chunk, options)
            relation = index.related(chunk.id) if kind in MULTI_CHUNK_TYPES else None
            related = by_id.get(relation.chunk_id) if relation is not None else None
            plan = draft_plan(kind, relation, related)
        yield ChunkReady(chunk=chunk, plan=plan, persona=persona(chunk))


def estimate_evaluation(
    samples: Iterable[Sample],
    metrics: Sequence[Metric],
    settings: Settings,
    prompts: Mapping[str, Prompt],
    *,
    has_target: bool,
    panel: Panel | None = None,
    judged: Sequence[str] = (),
    command: str = "evaluate",
) -> Estimate:
    """The calls each metric makes for each sample, as its declaration estimates them.
    ``samples`` is read once, a sample at a time (a :class:`~ragjury.evaluation.inputs.
    SampleFile`). With a ``panel``, each metric in ``judged`` is estimated once per judge
    and repeat, at the judge's model, its stages named ``role@judge`` as the run books them."""
    options, model = settings.evaluate, settings.model
    estimate = Estimate(command, {"samples": 0})
    estimate.assumptions = [
        "no retries or re-asks",
        "statements: one per sentence of the text split; every context window judges "
        "every statement",
    ]
    if panel is not None and judged:
        estimate.assumptions.append(
            f"{', '.join(judged)}: asked of {len(panel.judges)} judge(s) "
            f"({', '.join(panel.names)}) {panel.repeats} time(s) each"
        )
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
            if metric.estimate is None:
                continue
            context.metric = metric
            if panel is None or metric.name not in judged:
                context.model, context.add = model, add
                metric.estimate(context)
                continue
            for judge in panel.judges:
                context.model, context.add = judge.model, _judge_add(add, judge.name)
                for _ in range(panel.repeats):
                    metric.estimate(context)
    return estimate


def _judge_add(
    add: Callable[[str, str, int, int, int], None], judge: str
) -> Callable[[str, str, int, int, int], None]:
    """``add`` for one judge of a panel: its stages named ``role@judge``."""

    def judged(stage: str, model: str, prompt_tokens: int, completion: int, calls: int) -> None:
        add(f"{stage}@{judge}", model, prompt_tokens, completion, calls)

    return judged


def _prompt(messages: Sequence[Mapping[str, JSONData]], schema: type[BaseModel]) -> int:
    """The rendered messages plus the JSON schema instructor sends with them."""
    return estimate_prompt_tokens(messages) + schema_tokens(schema)


def _round(cost: float | None) -> float | None:
    return None if cost is None else round(cost, 6)
