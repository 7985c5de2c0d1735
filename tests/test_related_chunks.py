"""Related chunks found without an LLM (shared rare terms, BM25 weights), and the seeded draw
of each chunk's question type."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from ragjury.agents.question_plan import choose_type, chunks_of, draft_plan, drawn_type
from ragjury.config import GenerationOptions
from ragjury.ingest import DocumentReader, chunk_document
from ragjury.ingest.related import RelatedChunks
from ragjury.output import pair_record
from ragjury.schemas import (
    MULTI_CHUNK_TYPES,
    QUESTION_TYPES,
    AnswerCheck,
    Chunk,
    CritiqueResult,
    PairJudged,
    QAPair,
)


def _shared_corpus(name: str) -> Path:
    """``shared/data/corpus/NAME`` beside the project (or beside its worktrees' folder)."""
    for folder in Path(__file__).resolve().parents:
        candidate = folder / "shared" / "data" / "corpus" / name
        if candidate.is_dir():
            return candidate
    pytest.skip(f"the shared corpus {name!r} is not on this machine")


def _tutorial_chunks(whole: bool) -> list[Chunk]:
    documents = DocumentReader([str(_shared_corpus("fastapi-tutorial"))])()
    return [
        c for d in documents for c in chunk_document(d, chunk_size=2000, overlap=200, whole=whole)
    ]


def _tutorial(whole: bool) -> tuple[RelatedChunks, str]:
    return RelatedChunks.of(_tutorial_chunks(whole)), f"{_shared_corpus('fastapi-tutorial')}/"


# Checked by hand: each page (or section) and the one found for it are about one subject.
_RELATED_PAGES = {
    "cookie-params.md::0": "cookie-param-models.md::0",  # cookies, then cookies as models
    "cors.md::0": "middleware.md::0",  # CORSMiddleware is a middleware
    "header-params.md::0": "header-param-models.md::0",  # headers; convert_underscores
    "security/oauth2-jwt.md::0": "security/simple-oauth2.md::0",  # OAuth2 password flow
    "server-sent-events.md::0": "stream-json-lines.md::0",  # streaming responses
    "static-files.md::0": "frontend.md::0",  # serving static files
}
_RELATED_SECTIONS = {
    "cors.md::1": "middleware.md::1",  # using CORSMiddleware / creating a middleware
    "header-param-models.md::1": "header-params.md::1",  # underscores become hyphens
    "request-forms.md::1": "request-forms-and-files.md::0",  # form data, multipart
    "security/oauth2-jwt.md::1": "security/simple-oauth2.md::2",  # hashing passwords
}


@pytest.mark.parametrize(
    ("whole", "pairs"),
    [(True, _RELATED_PAGES), (False, _RELATED_SECTIONS)],
    ids=["pages", "sections"],
)
def test_fastapi_tutorial_chunks_are_related_to_ones_on_their_subject(
    whole: bool, pairs: dict[str, str]
) -> None:
    index, root = _tutorial(whole)

    for chunk_id, expected in pairs.items():
        relation = index.related(root + chunk_id)
        assert relation is not None, chunk_id
        assert relation.chunk_id == root + expected, (chunk_id, relation)
        assert len(relation.shared_terms) >= 2


def test_the_shared_terms_name_the_subject_the_chunks_share() -> None:
    index, root = _tutorial(whole=True)

    relation = index.related(root + "header-params.md::0")

    assert relation is not None
    assert "convert_underscores" in relation.shared_terms
    assert "the" not in relation.shared_terms


def _chunk(doc: str, index: int, text: str) -> Chunk:
    return Chunk(id=f"{doc}::{index}", document_id=doc, source=doc, index=index, text=text)


FILLER = [
    _chunk(f"other{i}.md", 0, f"Unrelated notes number {i} about gardening and weather.")
    for i in range(20)
]


def test_a_chunk_sharing_no_rare_term_has_no_related_chunk() -> None:
    alone = _chunk("alone.md", 0, "Quokkas live on Rottnest island.")
    index = RelatedChunks.of([alone, *FILLER])

    assert index.related(alone.id) is None


def test_neighbouring_chunks_of_a_document_and_copies_are_never_related() -> None:
    text = "The zephyr scheduler retries quasar jobs with nebula backoff."
    chunks = [
        _chunk("a.md", 0, text),
        _chunk("a.md", 1, "Zephyr quasar nebula settings continue here."),  # the neighbour
        _chunk("copy.md", 0, text + " Same words."),  # the same text elsewhere
        _chunk("b.md", 0, "Tune the zephyr scheduler: quasar jobs honour nebula limits."),
        *FILLER,
    ]

    relation = RelatedChunks.of(chunks).related("a.md::0")

    assert relation is not None
    assert relation.chunk_id == "b.md::0"
    assert set(relation.shared_terms) == {"zephyr", "quasar", "nebula", "scheduler", "jobs"}


def test_relations_do_not_depend_on_the_order_chunks_are_added() -> None:
    chunks = _tutorial_chunks(whole=True)
    forward, backward = RelatedChunks.of(chunks), RelatedChunks.of(reversed(chunks))

    assert [backward.related(c.id) for c in chunks] == [forward.related(c.id) for c in chunks]


def test_the_type_draw_follows_the_weights_and_repeats_for_a_chunk_and_seed() -> None:
    weights = {"factoid": 0.5, "reasoning": 0.2, "multi_hop": 0.2, "comparative": 0.1}
    ids = [f"docs/page{i}.md::{i % 7}" for i in range(20_000)]

    drawn: Counter[str] = Counter(choose_type(chunk_id, 11, weights) for chunk_id in ids)

    for kind, weight in weights.items():
        assert abs(drawn[kind] / len(ids) - weight) < 0.01, drawn
    assert [choose_type(c, 11, weights) for c in ids[:50]] == [
        choose_type(c, 11, weights) for c in ids[:50]
    ]
    assert [choose_type(c, 12, weights) for c in ids[:50]] != [
        choose_type(c, 11, weights) for c in ids[:50]
    ]
    assert {choose_type(c, 3, {"multi_hop": 1.0}) for c in ids[:100]} == {"multi_hop"}


ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_records_of_each_type_are_what_the_example_corpus_plans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)  # the ids are the paths the README's command gives
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Question types", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    records = [json.loads(block) for block in re.findall(r"```json\n(\{.*?\})\n```", section)]
    options = GenerationOptions(
        question_types="factoid=0.5,reasoning=0.2,multi_hop=0.2,comparative=0.1"
    )
    documents = DocumentReader(["examples/fastapi-docs"])()
    chunks = {c.id: c for d in documents for c in chunks_of(d, options)}
    index = RelatedChunks.of(chunks.values())

    assert [r["question_type"] for r in records] == list(QUESTION_TYPES)
    for record in records:
        chunk = chunks[record["chunk_id"]]
        kind = drawn_type(chunk, options)
        assert kind == record["question_type"]
        relation = index.related(chunk.id) if kind in MULTI_CHUNK_TYPES else None
        related = chunks[relation.chunk_id] if relation is not None else None
        plan = draft_plan(kind, relation, related)
        pair = QAPair(
            id=record["id"],
            question=record["question"],
            answer=record["answer"],
            context=chunk.text,
            source=chunk.source,
            chunk_id=chunk.id,
            question_type=kind,
            related=plan.related if plan else (),
            shared_terms=plan.shared_terms if plan else (),
        )
        critiques = {c: CritiqueResult(rating=5, rationale="r") for c in record["critiques"]}
        check = AnswerCheck.model_validate(record["answer_check"])  # a default run checks
        judged = PairJudged(pair=pair, outcome="kept", critiques=critiques, answer_check=check)
        written = pair_record(judged, typed=True)
        assert list(record) == list(written)
        for name in ("chunk_ids", "sources", "shared_terms"):
            assert record.get(name) == written.get(name), name
