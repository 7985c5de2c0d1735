"""An audit of an evaluation set: what it covers, how it is spread, what is wrong with it.

Computed from the set's records (and, given the corpus it came from, its documents and
chunks), with no LLM call:

- coverage: the share of documents and of chunks with a kept pair, and the largest
  documents left without one (needs the corpus);
- counts per document, per question type and per persona, and the worst skew: the
  document holding the largest share of the kept pairs, against an even share;
- near-duplicate questions: pairs of kept questions whose word-level similarity reaches the
  threshold, measured as the generation's deduplicator measures it
  (:mod:`ragjury.agents.question_index`);
- lexical leakage: questions that copy a run of at least ``leak_words`` consecutive words
  of their source chunk verbatim (words compared lower-cased, without punctuation);
- difficulty: the rank of each question's source chunk when the question is searched with
  plain BM25 over every chunk of the corpus (``bm25s``; ties count against the chunk; for
  a question with several source chunks, the rank of the last one found). Rank 1 means any
  keyword search finds the answer; beyond 5, a retriever needs more than keywords.

The result is a plain JSON-able dict, what ``ragjury audit --json`` prints.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import NotRequired, TypedDict

from rapidfuzz.distance import Indel

from ragjury.agents.question_index import QuestionIndex, words
from ragjury.errors import InputError
from ragjury.report.audit_input import AuditRecord, Corpus, audit_record

__all__ = ["AuditOptions", "audit_dataset", "page_audit", "summary_lines"]

BM25_MISSING = "difficulty needs bm25s: pip install 'ragjury[audit]'"
NO_CORPUS = (
    "needs --corpus (the documents the set was generated from): without it, documents and "
    "chunks that got no pair are not known"
)
NO_CORPUS_DIFFICULTY = "difficulty needs --corpus: every chunk of the documents, to search them"


@dataclass(frozen=True)
class AuditOptions:
    near_duplicate: float = 0.9
    leak_words: int = 7
    largest_uncovered: int = 5


class UncoveredDocument(TypedDict):
    document: str
    characters: int
    chunks: int


class Coverage(TypedDict):
    documents: int
    documents_covered: int
    document_share: float | None
    chunks: int
    chunks_covered: int
    chunk_share: float | None
    largest_uncovered: NotRequired[list[UncoveredDocument]]


class DocumentRow(TypedDict):
    document: str
    kept: int
    share: float | None
    not_kept: int


class Skew(TypedDict):
    document: str
    kept: int
    share: float
    documents: int
    even_share: float
    times_even: float


class NearDuplicate(TypedDict):
    first: str
    second: str
    similarity: float
    first_question: str
    second_question: str


class NearDuplicates(TypedDict):
    threshold: float
    pairs: list[NearDuplicate]


class Leak(TypedDict):
    id: str
    question: str
    words: int
    question_words: int
    span: str


class Leakage(TypedDict):
    min_words: int
    checked: int
    not_checked: int
    questions: list[Leak]


class SourceRank(TypedDict):
    id: str
    rank: int | None


class Difficulty(TypedDict):
    ranked: int
    chunks_searched: int
    rank_1: int
    top_5: int
    beyond_5: int
    no_shared_word: int
    share_rank_1: float | None
    share_top_5: float | None
    share_beyond_5: float | None
    ranks: list[SourceRank]


class UnknownChunks(TypedDict):
    count: int
    examples: list[str]


class Audit(TypedDict):
    """What :func:`audit_dataset` finds (``ragjury audit --json`` prints it)."""

    records: dict[str, int]
    options: dict[str, float]
    coverage: Coverage | None
    coverage_note: NotRequired[str]
    unknown_chunk_ids: NotRequired[UnknownChunks]
    by_document: list[DocumentRow]
    by_question_type: dict[str, int]
    by_persona: dict[str, int]
    skew: Skew | None
    near_duplicates: NearDuplicates
    leakage: Leakage
    difficulty: Difficulty | None
    difficulty_note: NotRequired[str]


class PageAudit(TypedDict):
    lines: list[str]
    types: dict[str, int]
    personas: dict[str, int]
    duplicates: list[NearDuplicate]
    leaks: list[Leak]


def audit_dataset(
    records: Sequence[AuditRecord],
    corpus: Corpus | None = None,
    options: AuditOptions | None = None,
    *,
    totals: tuple[int, int] | None = None,
) -> Audit:
    """The audit of ``records``; ``totals`` (documents, chunks) gives coverage figures when
    the corpus is known only by its counts (the end of a ``generate`` run)."""
    options = options or AuditOptions()
    kept = [r for r in records if r.outcome == "kept"]
    resolved, unknown = _resolve(kept, corpus)
    documents = [_documents_of(r, chunks, corpus) for r, chunks in zip(kept, resolved, strict=True)]
    coverage, coverage_note = _coverage(kept, resolved, documents, corpus, totals, options)
    among = len(corpus.documents) if corpus is not None else totals[0] if totals else None
    rows, by_type, by_persona, skew = _spread(records, documents, among)
    difficulty, difficulty_note = _difficulty(kept, resolved, corpus)
    result = Audit(
        records=dict(Counter(r.outcome for r in records)),
        options={
            "near_duplicate_threshold": options.near_duplicate,
            "leak_words": options.leak_words,
        },
        coverage=coverage,
        by_document=rows,
        by_question_type=by_type,
        by_persona=by_persona,
        skew=skew,
        near_duplicates=near_duplicates(kept, options.near_duplicate),
        leakage=leakage(kept, resolved, corpus, options.leak_words),
        difficulty=difficulty,
    )
    if coverage_note:
        result["coverage_note"] = coverage_note
    if unknown:
        result["unknown_chunk_ids"] = {"count": len(unknown), "examples": unknown[:5]}
    if difficulty_note:
        result["difficulty_note"] = difficulty_note
    return result


def _resolve(
    kept: Sequence[AuditRecord], corpus: Corpus | None
) -> tuple[list[tuple[str, ...]], list[str]]:
    """Each record's source chunks in the corpus (all of them when there is none), and the
    ids the corpus does not have."""
    resolved: list[tuple[str, ...]] = []
    unknown: list[str] = []
    for record in kept:
        if corpus is None:
            resolved.append(record.chunk_ids)
            continue
        found = []
        for source_id in record.chunk_ids:
            chunk = corpus.resolve(source_id)
            if chunk is None:
                unknown.append(source_id)
            else:
                found.append(chunk)
        resolved.append(tuple(found))
    return resolved, unknown


def _documents_of(
    record: AuditRecord, chunks: tuple[str, ...], corpus: Corpus | None
) -> tuple[str, ...]:
    if corpus is not None:
        return tuple(dict.fromkeys(corpus.chunk_document[c] for c in chunks))
    if record.source is not None and len(record.chunk_ids) == 1:
        return (record.source,)
    return tuple(dict.fromkeys(c.rsplit("::", 1)[0] for c in record.chunk_ids))


def _coverage(
    kept: Sequence[AuditRecord],
    resolved: Sequence[tuple[str, ...]],
    documents: Sequence[tuple[str, ...]],
    corpus: Corpus | None,
    totals: tuple[int, int] | None,
    options: AuditOptions,
) -> tuple[Coverage | None, str | None]:
    covered_documents = {d for found in documents for d in found}
    covered_chunks = {c for found in resolved for c in found}
    if corpus is None and totals is None:
        return None, NO_CORPUS
    if corpus is not None:
        total_documents, total_chunks = len(corpus.documents), len(corpus.chunks)
    else:
        assert totals is not None
        total_documents, total_chunks = totals
    coverage: Coverage = {
        "documents": total_documents,
        "documents_covered": len(covered_documents),
        "document_share": _share(len(covered_documents), total_documents),
        "chunks": total_chunks,
        "chunks_covered": len(covered_chunks),
        "chunk_share": _share(len(covered_chunks), total_chunks),
    }
    if corpus is not None:
        left = [d for d in corpus.documents if d not in covered_documents]
        left.sort(key=lambda d: -corpus.documents[d])
        coverage["largest_uncovered"] = [
            {
                "document": d,
                "characters": corpus.documents[d],
                "chunks": len(corpus.document_chunks[d]),
            }
            for d in left[: options.largest_uncovered]
        ]
    return coverage, None


def _spread(
    records: Sequence[AuditRecord], documents: Sequence[tuple[str, ...]], among: int | None
) -> tuple[list[DocumentRow], dict[str, int], dict[str, int], Skew | None]:
    """Counts per document, type and persona of the kept pairs, and the worst skew against
    an even share over ``among`` documents (those of the set when not known)."""
    kept = [r for r in records if r.outcome == "kept"]
    per_document: Counter[str] = Counter(d for found in documents for d in found)
    others: Counter[str] = Counter(
        d for r in records if r.outcome != "kept" for d in _documents_of(r, r.chunk_ids, None)
    )
    names = list(per_document) + [d for d in others if d not in per_document]
    rows: list[DocumentRow] = [
        {
            "document": d,
            "kept": per_document[d],
            "share": _share(per_document[d], len(kept)),
            "not_kept": others[d],
        }
        for d in names
    ]
    rows.sort(key=lambda row: (-row["kept"], -row["not_kept"], row["document"]))
    by_type = dict(Counter(r.question_type for r in kept).most_common())
    by_persona = dict(Counter(r.persona or "(none)" for r in kept).most_common())
    skew: Skew | None = None
    if kept and per_document:
        document, count = min(per_document.items(), key=lambda item: (-item[1], item[0]))
        among = among or len(per_document)
        share = count / len(kept)
        skew = {
            "document": document,
            "kept": count,
            "share": round(share, 4),
            "documents": among,
            "even_share": round(1 / among, 4),
            "times_even": round(share * among, 2),
        }
    return rows, by_type, by_persona, skew


def near_duplicates(kept: Sequence[AuditRecord], threshold: float) -> NearDuplicates:
    """Pairs of questions at or above ``threshold`` (the deduplicator's word-level measure),
    found through its index keys so that not every pair is compared."""
    index = QuestionIndex(threshold)
    by_key: defaultdict[str, list[int]] = defaultdict(list)
    tokens = [words(r.question) for r in kept]
    pairs: list[NearDuplicate] = []
    for i, record in enumerate(kept):
        candidates = sorted({j for key in index.keys(record.question) for j in by_key[key]})
        for j in candidates:
            similarity = Indel.normalized_similarity(tokens[j], tokens[i])
            if similarity >= threshold:
                pairs.append(
                    {
                        "first": kept[j].id,
                        "second": record.id,
                        "similarity": round(similarity, 3),
                        "first_question": kept[j].question,
                        "second_question": record.question,
                    }
                )
        for key in index.keys(record.question):
            by_key[key].append(i)
    pairs.sort(key=lambda p: -p["similarity"])
    return {"threshold": threshold, "pairs": pairs}


def leakage(
    kept: Sequence[AuditRecord],
    resolved: Sequence[tuple[str, ...]],
    corpus: Corpus | None,
    leak_words: int,
) -> Leakage:
    """Questions with a run of at least ``leak_words`` words found verbatim in a source
    chunk (the record's contexts, else the corpus's text of its chunks)."""
    found: list[Leak] = []
    checked = 0
    for record, chunks in zip(kept, resolved, strict=True):
        texts = record.contexts
        if not texts and corpus is not None:
            texts = tuple(corpus.chunks[c] for c in chunks)
        if not texts:
            continue
        checked += 1
        question = words(record.question)
        best: list[str] = []
        for text in texts:
            context = words(text)
            match = SequenceMatcher(None, question, context, autojunk=False).find_longest_match(
                0, len(question), 0, len(context)
            )
            if match.size > len(best):
                best = question[match.a : match.a + match.size]
        if len(best) >= leak_words:
            found.append(
                {
                    "id": record.id,
                    "question": record.question,
                    "words": len(best),
                    "question_words": len(question),
                    "span": " ".join(best),
                }
            )
    found.sort(key=lambda q: (-q["words"], q["id"]))
    return {
        "min_words": leak_words,
        "checked": checked,
        "not_checked": len(kept) - checked,
        "questions": found,
    }


def _difficulty(
    kept: Sequence[AuditRecord], resolved: Sequence[tuple[str, ...]], corpus: Corpus | None
) -> tuple[Difficulty | None, str | None]:
    if corpus is None:
        return None, NO_CORPUS_DIFFICULTY
    try:
        from ragjury.report._bm25 import source_ranks
    except ImportError:
        return None, BM25_MISSING
    ranked = [(r, chunks) for r, chunks in zip(kept, resolved, strict=True) if chunks]
    ranks = source_ranks(corpus, [(r.question, chunks) for r, chunks in ranked])
    first = sum(1 for rank in ranks if rank == 1)
    top = sum(1 for rank in ranks if rank is not None and rank <= 5)
    n = len(ranks)
    difficulty: Difficulty = {
        "ranked": n,
        "chunks_searched": len(corpus.chunks),
        "rank_1": first,
        "top_5": top,
        "beyond_5": n - top,
        "no_shared_word": sum(1 for rank in ranks if rank is None),
        "share_rank_1": _share(first, n),
        "share_top_5": _share(top, n),
        "share_beyond_5": _share(n - top, n),
        "ranks": [{"id": r.id, "rank": rank} for (r, _), rank in zip(ranked, ranks, strict=True)],
    }
    return difficulty, None


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.0%}"


def summary_lines(audit: Audit) -> list[str]:
    """A few lines: coverage, the worst skew, near-duplicates, leakage and difficulty."""
    lines = []
    coverage = audit["coverage"]
    if coverage is not None:
        lines.append(
            f"coverage: {coverage['documents_covered']} of {coverage['documents']} documents "
            f"({_percent(coverage['document_share'])}) and {coverage['chunks_covered']} of "
            f"{coverage['chunks']} chunks ({_percent(coverage['chunk_share'])}) have a kept pair"
        )
    else:
        lines.append(f"coverage: {audit.get('coverage_note', NO_CORPUS)}")
    counts = _counts_line(audit)
    if counts:
        lines.append(counts)
    skew = audit["skew"]
    if skew is not None:
        lines.append(
            f"skew: {skew['document']} holds {_percent(skew['share'])} of the kept pairs "
            f"({skew['kept']}; {skew['times_even']}x an even share over {skew['documents']} "
            "documents)"
        )
    duplicates = audit["near_duplicates"]
    leaks = audit["leakage"]
    lines.append(
        f"near-duplicates: {len(duplicates['pairs'])} pair(s) of questions at similarity >= "
        f"{duplicates['threshold']}; leakage: {len(leaks['questions'])} question(s) copy "
        f"{leaks['min_words']}+ words of their chunk verbatim"
    )
    difficulty = audit["difficulty"]
    if difficulty is not None:
        lines.append(
            f"difficulty: BM25 finds the source chunk at rank 1 for "
            f"{_percent(difficulty['share_rank_1'])} of {difficulty['ranked']} questions, in "
            f"the top 5 for {_percent(difficulty['share_top_5'])}, beyond for "
            f"{_percent(difficulty['share_beyond_5'])}"
        )
    else:
        lines.append(audit.get("difficulty_note", NO_CORPUS_DIFFICULTY))
    return lines


def _counts_line(audit: Audit) -> str | None:
    """Kept pairs per question type, per persona (when any has one) and per document."""
    kept = [row["kept"] for row in audit["by_document"] if row["kept"]]
    if not kept:
        return None

    def listed(counts: Mapping[str, int]) -> str:
        return ", ".join(f"{name} {count}" for name, count in counts.items())

    parts = [f"per question type: {listed(audit['by_question_type'])}"]
    if set(audit["by_persona"]) != {"(none)"}:
        parts.append(f"per persona: {listed(audit['by_persona'])}")
    spread = f"{min(kept)}" if min(kept) == max(kept) else f"{min(kept)} to {max(kept)}"
    parts.append(f"per document: {spread} over {len(kept)} document(s)")
    return "kept pairs " + "; ".join(parts)


_PAGE_ROWS = 10


def page_audit(pairs: Sequence[Mapping[str, object]], summary: Mapping[str, object]) -> PageAudit:
    """What the audit finds without the corpus (coverage from the run summary's counts, when
    given), for the Audit section of the dataset's HTML page."""
    records = []
    for n, pair in enumerate(pairs, start=1):
        with contextlib.suppress(InputError):  # a pair the audit cannot read is left out
            records.append(audit_record(pair, f"record {n}"))
    documents, chunks = summary.get("documents"), summary.get("chunks")
    totals = (documents, chunks) if isinstance(documents, int) and isinstance(chunks, int) else None
    audit = audit_dataset(records, totals=totals)
    return {
        "lines": summary_lines(audit),
        "types": audit["by_question_type"],
        "personas": audit["by_persona"],
        "duplicates": audit["near_duplicates"]["pairs"][:_PAGE_ROWS],
        "leaks": audit["leakage"]["questions"][:_PAGE_ROWS],
    }
