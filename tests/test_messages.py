"""Every message kind round-trips through JSON unchanged (a broker-backed bus serialises)."""

from __future__ import annotations

import pytest

from ragjury.schemas import (
    ENVELOPE_ADAPTER,
    EVENT_TYPES,
    Chunk,
    ChunkFailed,
    ChunkReady,
    CritiqueIssued,
    CritiqueResult,
    Document,
    DocumentChunked,
    DocumentJudged,
    DocumentSubmitted,
    DraftPlan,
    DuplicateDropped,
    Envelope,
    Event,
    Failure,
    MetricResult,
    MetricScored,
    PairDrafted,
    PairJudged,
    Persona,
    QAPair,
    QuestionsDrafted,
    ReferenceWritten,
    Sample,
    SampleScored,
    SampleSubmitted,
    StatementsSplit,
    kind_of,
)

DOC = Document(id="docs/a.md", source="docs/a.md", text="Alpha is 1.\n\nBeta — ünïcode.")
CHUNK = Chunk(id="docs/a.md::0", document_id=DOC.id, source=DOC.source, index=0, text=DOC.text)
PAIR = QAPair(
    id="p1",
    question="What is alpha?",
    answer="1",
    context=CHUNK.text,
    source=DOC.source,
    chunk_id=CHUNK.id,
)
OTHER = Chunk(id="docs/b.md::2", document_id="docs/b.md", source="docs/b.md", index=2, text="Beta.")
PLAN = DraftPlan(question_type="multi_hop", related=(OTHER,), shared_terms=("beta",))
MULTI_HOP = PAIR.model_copy(
    update={
        "id": "p2",
        "question_type": "multi_hop",
        "related": (OTHER,),
        "shared_terms": ("beta",),
    }
)
PERSONA = Persona(name="new user", description="Installed it today; wants a first result.")
WITH_PERSONA = PAIR.model_copy(update={"id": "p3", "persona": PERSONA})
FAILURE = Failure(stage="generator", attempts=4, last_raw_output="{not json", message="bad")
CRITIQUE = CritiqueResult(rating=4, rationale="fine")
SAMPLE = Sample(
    id="s1",
    question="What is the capital of France?",
    answer="Paris.",
    contexts=("Paris is the capital of France.",),
    reference="Paris",
    must_contain=("Paris",),
    answer_logprobs=(-0.1, -0.02),
)
SCORED = MetricResult(
    outcome="scored",
    score=0.5,
    passing=False,
    details={"statements": [{"text": "Paris", "supported": True, "evidence": "Paris"}]},
    llm_calls=2,
)

SAMPLES: list[Event] = [
    DocumentSubmitted(document=DOC),
    ChunkReady(chunk=CHUNK),
    ChunkReady(chunk=CHUNK, plan=PLAN),
    ChunkReady(chunk=CHUNK, plan=DraftPlan(question_type="reasoning")),
    ChunkReady(chunk=CHUNK, persona=PERSONA),
    QuestionsDrafted(chunk=CHUNK, pairs=(PAIR, MULTI_HOP)),
    ChunkFailed(chunk=CHUNK, error=FAILURE),
    DuplicateDropped(pair=PAIR, duplicate_of="p0", similarity=0.97),
    PairDrafted(pair=PAIR),
    PairDrafted(pair=MULTI_HOP),
    PairDrafted(pair=WITH_PERSONA),
    CritiqueIssued(pair_id="p1", criterion="groundedness", critique=CRITIQUE),
    CritiqueIssued(pair_id="p1", criterion="relevance", error=FAILURE),
    PairJudged(pair=PAIR, outcome="kept", critiques={"groundedness": CRITIQUE}),
    PairJudged(pair=PAIR, outcome="failed", critiques={}, error=FAILURE),
    ReferenceWritten(
        judged=PairJudged(
            pair=WITH_PERSONA,
            outcome="kept",
            critiques={"relevance": CRITIQUE},
            reference_answer="Alpha is 1, as the first line says.",
        )
    ),
    DocumentChunked(document_id="d", chunk_ids=("d::0", "d::1")),
    DocumentChunked(document_id="d", chunk_ids=("d::1",), not_drafted=1),
    DocumentJudged(
        document_id="d",
        pairs=(PairJudged(pair=PAIR, outcome="kept", critiques={"groundedness": CRITIQUE}),),
        chunks=2,
        chunks_failed=1,
        pairs_drafted=2,
        duplicates_dropped=1,
        failed_chunks=({"chunk_id": "d::1", "message": "no"},),
    ),
    SampleSubmitted(sample=SAMPLE, metrics=("faithfulness", "keywords")),
    StatementsSplit(sample=SAMPLE, statements=("Paris is the capital of France.",), llm_calls=1),
    StatementsSplit(sample=SAMPLE, error=FAILURE),
    MetricScored(sample_id="s1", metric="faithfulness", result=SCORED),
    MetricScored(sample_id="s1", metric="correctness", result=MetricResult.failed(FAILURE)),
    SampleScored(
        sample=SAMPLE,
        metrics={"faithfulness": SCORED, "keywords": MetricResult.not_applicable("no keywords")},
    ),
]


def test_samples_cover_every_event_kind() -> None:
    assert {type(s) for s in SAMPLES} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.kind)
def test_every_message_kind_round_trips_through_json(event: Event) -> None:
    envelope = Envelope(correlation_id="docs/a.md", causation_id="c0", payload=event)

    restored = ENVELOPE_ADAPTER.validate_json(envelope.model_dump_json())

    assert restored == envelope
    assert type(restored.payload) is type(event)
    assert restored.kind == kind_of(type(event))


def test_reply_keeps_correlation_and_points_at_its_cause() -> None:
    first = Envelope(correlation_id="doc", payload=SAMPLES[0])

    second = first.reply(SAMPLES[1])

    assert second.correlation_id == "doc"
    assert second.causation_id == first.id
    assert second.id != first.id
