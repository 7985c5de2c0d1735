"""The retrieval figures (no LLM) against values computed by hand on small fixed rankings, the
text-matching rule at its edges, and the ``retrieval`` metric through ``ragjury evaluate``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ragjury.cli import main
from ragjury.evaluation.inputs import filled_fields
from ragjury.evaluation.retrieval import rank_retrieval, text_finds
from ragjury.metrics import registry
from ragjury.schemas import Sample

from conftest import read_jsonl

LOG3 = 1 / math.log2(3)  # the discount at rank 2
LOG5 = 1 / math.log2(5)  # the discount at rank 4

# Sentences of made-up words, so that no two share a trigram by accident.
S = [
    "Alpha bravo charlie delta echo foxtrot golf hotel.",
    "India juliet kilo lima mike november oscar papa.",
    "Quebec romeo sierra tango uniform victor whiskey xray.",
    "Yankee zulu amber bronze copper dune ember flint.",
    "Garnet harbor indigo jasper kestrel lagoon marble nectar.",
    "Onyx pearl quartz raven saffron topaz umber velvet.",
]


def ranked_by_ids(retrieved: list[str | None], references: list[str]) -> Any:
    return rank_retrieval(["text"] * len(retrieved), retrieved, [], references)


def test_figures_at_each_k_by_ids() -> None:
    ranking = ranked_by_ids(["x", "a", "y", "b", "z"], ["a", "b"])

    assert ranking.first_relevant == 2
    assert ranking.at(1) == {"hit": 0.0, "mrr": 0.0, "recall": 0.0, "precision": 0.0, "ndcg": 0.0}
    assert ranking.at(3) == pytest.approx(
        {"hit": 1.0, "mrr": 0.5, "recall": 0.5, "precision": 1 / 3, "ndcg": LOG3 / (1 + LOG3)}
    )
    assert ranking.at(5) == pytest.approx(
        {
            "hit": 1.0,
            "mrr": 0.5,
            "recall": 1.0,
            "precision": 0.4,
            "ndcg": (LOG3 + LOG5) / (1 + LOG3),
        }
    )


def test_a_k_larger_than_the_list_takes_the_whole_list() -> None:
    ranking = ranked_by_ids(["x", "a", "y", "b", "z"], ["a", "b"])

    # precision is over the five contexts returned, not over ten slots
    assert ranking.at(10) == ranking.at(5)
    assert ranking.at(10)["precision"] == 0.4


def test_a_duplicate_keeps_its_rank_but_is_never_relevant_again() -> None:
    ranking = ranked_by_ids(["a", "a", "b"], ["a", "b"])

    assert [c.relevant for c in ranking.retrieved] == [True, False, True]
    assert ranking.retrieved[1].duplicate
    assert ranking.at(3) == pytest.approx(
        {"hit": 1.0, "mrr": 1.0, "recall": 1.0, "precision": 2 / 3, "ndcg": 1.5 / (1 + LOG3)}
    )


def test_reference_contexts_never_found_lower_ndcg_and_recall() -> None:
    ranking = ranked_by_ids(["a", "x"], ["a", "b", "c"])

    assert [r.rank for r in ranking.references] == [1, None, None]
    assert ranking.at(1)["ndcg"] == 1.0  # the best first context it could have returned
    assert ranking.at(3) == pytest.approx(
        {"hit": 1.0, "mrr": 1.0, "recall": 1 / 3, "precision": 0.5, "ndcg": 1 / (1 + LOG3 + 0.5)}
    )


def test_a_context_without_an_id_is_matched_by_text_or_counted_unmatchable() -> None:
    by_id_only = rank_retrieval([S[0], S[1]], [None, "b"], [], ["a", "b"])
    assert by_id_only.unmatchable == 1
    assert [c.relevant for c in by_id_only.retrieved] == [False, True]
    assert by_id_only.first_relevant == 2

    # with the reference text known, the same context is found by its words
    with_text = rank_retrieval([S[0], S[1]], [None, "b"], [S[0], S[1]], ["a", "b"])
    assert with_text.unmatchable == 0
    assert [(r.id, r.rank, r.matched_by) for r in with_text.references] == [
        ("a", 1, "text"),
        ("b", 2, "id"),
    ]


def test_two_reference_chunks_in_one_retrieved_context_are_found_at_the_same_rank() -> None:
    ranking = rank_retrieval([S[0] + " " + S[1], S[2]], [], [S[0], S[1]], [])

    assert [r.rank for r in ranking.references] == [1, 1]
    assert ranking.at(1) == {"hit": 1.0, "mrr": 1.0, "recall": 1.0, "precision": 1.0, "ndcg": 1.0}
    # the one context that holds both is the best ranking there is
    assert ranking.at(3)["ndcg"] == 1.0
    assert ranking.at(3)["precision"] == 0.5


def test_equally_relevant_contexts_keep_the_order_given() -> None:
    ranking = ranked_by_ids(["a", "b", "x"], ["b", "a"])

    assert [(r.id, r.rank) for r in ranking.references] == [("b", 2), ("a", 1)]
    assert ranking.at(2) == {"hit": 1.0, "mrr": 1.0, "recall": 1.0, "precision": 1.0, "ndcg": 1.0}


def test_nothing_retrieved_scores_zero_everywhere() -> None:
    ranking = rank_retrieval([], [], [S[0]], [])

    assert ranking.first_relevant is None
    assert ranking.at(5) == {"hit": 0.0, "mrr": 0.0, "recall": 0.0, "precision": 0.0, "ndcg": 0.0}


# text matching ------------------------------------------------------------------------------


def test_text_match_ignores_case_punctuation_spacing_and_markdown() -> None:
    assert text_finds("## ALPHA bravo,   charlie *delta* echo\nfoxtrot golf hotel", S[0])


def test_a_bigger_chunk_that_holds_the_reference_finds_it() -> None:
    assert text_finds(" ".join(S[:4]), S[1])


def test_a_smaller_chunk_inside_the_reference_finds_it() -> None:
    assert text_finds("kilo lima mike november", " ".join(S[:3]))


def test_overlapping_chunks_match_only_when_they_share_at_least_half() -> None:
    words = " ".join(S).split()  # 48 words
    reference = " ".join(words[0:20])
    shifted = " ".join(words[8:28])  # 12 of 20 words shared: 10 of 18 trigrams
    neighbour = " ".join(words[16:36])  # 4 words shared: 2 of 18 trigrams

    assert text_finds(shifted, reference)
    assert not text_finds(neighbour, reference)


def test_half_of_the_trigrams_is_enough_and_just_under_half_is_not() -> None:
    reference = "a b c d e f"  # trigrams abc bcd cde def
    assert text_finds("a b c d x y z w v u", reference)  # abc bcd: 2 of 4
    assert not text_finds("a b c x y z w v u t", reference)  # abc: 1 of 4 (and 1 of 8)


def test_texts_of_fewer_than_three_words_never_match() -> None:
    assert not text_finds("Overview", "Overview of the settings page")
    assert not text_finds("Overview of settings", "Overview")


def test_other_chunking_of_the_same_document_finds_the_reference_by_text() -> None:
    document = " ".join(S)
    reference = " ".join(S[2:4])  # the chunk a question came from
    retrieved = [document[:120], document[100:260], document[240:]]  # another chunking

    ranking = rank_retrieval(retrieved, [], [reference], [])

    assert ranking.first_relevant == 2
    assert [c.relevant for c in ranking.retrieved] == [False, True, False]


# the metric ---------------------------------------------------------------------------------


def evaluate_retrieval(tmp_path: Path, records: list[dict[str, Any]], *extra: str) -> int:
    samples = tmp_path / "s.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return main(
        [
            "evaluate",
            str(samples),
            "--out",
            str(tmp_path / "results.jsonl"),
            "--summary",
            str(tmp_path / "summary.json"),
            "--db",
            str(tmp_path / "r.db"),
            "--metrics",
            "retrieval",
            *extra,
        ]
    )


def test_retrieval_needs_no_llm_and_records_ranks_per_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGJURY_BASE_URL", "RAGJURY_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    records: list[dict[str, Any]] = [
        {
            "id": "second",
            "question": "q1",
            "contexts": [{"id": "x", "text": S[0]}, {"id": "a", "text": S[1]}],
            "reference_context_ids": ["a"],
        },
        {
            "id": "first",
            "question": "q2",
            "contexts": [S[2], S[3]],
            "reference_contexts": [S[2]],
        },
        {
            "id": "missed",
            "question": "q3",
            "contexts": [{"id": "y", "text": S[4]}],
            "correct_chunks": ["z"],
            "answer": "",
        },
        {"id": "no-reference", "question": "q4", "contexts": [S[0]]},
    ]

    assert evaluate_retrieval(tmp_path, records, "--k", "1,2") == 0

    out = {r["id"]: r for r in read_jsonl(tmp_path / "results.jsonl")}
    second = out["second"]["metrics"]["retrieval"]
    assert (second["outcome"], second["score"], second["passing"]) == ("scored", 0.5, True)
    assert second["references"] == [{"index": 0, "id": "a", "rank": 2, "matched_by": "id"}]
    assert [c["id"] for c in second["retrieved"]] == ["x", "a"]
    assert second["at_k"]["1"]["hit"] == 0.0
    assert second["at_k"]["2"]["hit"] == 1.0
    assert out["second"]["context_ids"] == ["x", "a"]
    assert out["first"]["metrics"]["retrieval"]["references"][0]["matched_by"] == "text"
    assert out["missed"]["metrics"]["retrieval"]["passing"] is False
    assert out["no-reference"]["metrics"]["retrieval"]["outcome"] == "not_applicable"

    summary = json.loads((tmp_path / "summary.json").read_text())
    figures = summary["metrics"]["retrieval"]
    assert figures["scored"] == 3
    assert figures["not_applicable"] == 1
    assert figures["mean"] == pytest.approx((0.5 + 1 + 0) / 3, abs=1e-4)
    assert figures["pass_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert figures["at_k"]["1"]["hit_rate"] == pytest.approx(1 / 3, abs=1e-4)
    assert figures["at_k"]["2"]["hit_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert figures["at_k"]["2"]["mrr"] == pytest.approx(0.5, abs=1e-4)
    assert summary["llm_calls"] == 0


def test_retrieval_is_not_applicable_when_nothing_can_be_compared(tmp_path: Path) -> None:
    records = [
        {"id": "unanswered", "question": "q", "reference_context_ids": ["a"]},
        {"id": "no-ids", "question": "q", "contexts": [S[0]], "reference_context_ids": ["a"]},
    ]

    assert evaluate_retrieval(tmp_path, records) == 4  # nothing was judged: it says why

    out = {r["id"]: r["metrics"]["retrieval"] for r in read_jsonl(tmp_path / "results.jsonl")}
    assert out["unanswered"]["outcome"] == "not_applicable"
    assert "--target" in out["unanswered"]["reason"]
    assert out["no-ids"]["outcome"] == "not_applicable"
    assert "no ids" in out["no-ids"]["reason"]


def test_default_metrics_add_retrieval_when_samples_name_reference_contexts() -> None:
    plain = Sample(id="p", question="q", answer="a", contexts=("c",))
    known = Sample(id="k", question="q", reference_context_ids=("doc-1",))

    assert "retrieval" not in registry().choose(filled_fields([plain]), None)
    assert "retrieval" in registry().choose(filled_fields([plain, known]), None)


def test_rag_triad_stands_for_its_three_metrics() -> None:
    chosen = registry().choose(set(), ["rag_triad", "context_recall", "faithfulness"])

    assert chosen == ("faithfulness", "context_relevance", "answer_relevance", "context_recall")


def test_a_bad_k_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert evaluate_retrieval(tmp_path, [{"question": "q"}], "--k", "0,3") == 2
    assert "every k must be >= 1" in capsys.readouterr().err
    assert evaluate_retrieval(tmp_path, [{"question": "q"}], "--k", "top5") == 2
    assert "--k expects comma-separated whole numbers" in capsys.readouterr().err


ANTHROPIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "corpus" / "anthropic-docs"


@pytest.mark.skipif(not ANTHROPIC.exists(), reason="the shared anthropic-docs data is not here")
def test_the_anthropic_docs_evaluation_set_is_judged_by_chunk_ids(tmp_path: Path) -> None:
    from ragjury.evaluation.inputs import load_samples

    questions = load_samples(ANTHROPIC / "docs_evaluation_dataset.json").samples[:20]
    chunks = json.loads((ANTHROPIC / "anthropic_docs.json").read_text(encoding="utf-8"))
    assert all(s.reference_context_ids and s.reference for s in questions)

    def words(text: str) -> set[str]:
        return {w for w in text.lower().split() if len(w) > 3}

    records, expected = [], []
    for sample in questions:
        ranked = sorted(chunks, key=lambda c: -len(words(sample.question) & words(c["text"])))[:5]
        contexts = [{"id": c["chunk_link"], "text": c["text"]} for c in ranked]
        records.append(
            {"id": sample.id, "question": sample.question, "contexts": contexts, "answer": "-"}
            | {"correct_chunks": list(sample.reference_context_ids)}
        )
        expected.append(any(c["id"] in sample.reference_context_ids for c in contexts))

    assert evaluate_retrieval(tmp_path, records, "--k", "5") == 0

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["metrics"]["retrieval"]["scored"] == 20
    hit_rate = summary["metrics"]["retrieval"]["at_k"]["5"]["hit_rate"]
    assert hit_rate == pytest.approx(sum(expected) / len(expected), abs=1e-4)
