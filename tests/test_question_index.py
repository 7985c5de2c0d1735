"""The deduplicator's question index decides exactly as comparing with every kept question.

The reference is the plain way: rapidfuzz's ``extractOne`` over every kept question's words,
in the order they were kept (the most similar at or above the threshold, the earliest on a
tie). The index, through a real SQLite store, must agree on every decision, at every
threshold, for questions built to be near each other (few words, repeats, reorderings,
empty ones)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from rapidfuzz import process
from rapidfuzz.distance import Indel

from ragjury.agents.question_index import QuestionIndex, words
from ragjury.store import SQLiteStore
from ragjury.store.base import QuestionDecision

pytestmark = pytest.mark.anyio

_WORDS = "what which is the of port server alpha bravo charlie delta echo use for"
_VOCABULARY = _WORDS.split()


def _questions(rng: random.Random, n: int) -> list[str]:
    questions: list[str] = []
    for _ in range(n):
        if questions and rng.random() < 0.4:  # a variant of an earlier one
            found = words(rng.choice(questions))
            for _ in range(rng.randint(0, 2)):
                edit = rng.random()
                if edit < 0.4 and found:
                    found.pop(rng.randrange(len(found)))
                elif edit < 0.8:
                    found.insert(rng.randint(0, len(found)), rng.choice(_VOCABULARY))
                elif len(found) > 1:
                    i, j = rng.sample(range(len(found)), 2)
                    found[i], found[j] = found[j], found[i]
            text = " ".join(found)
        else:
            text = " ".join(rng.choice(_VOCABULARY) for _ in range(rng.randint(0, 9)))
        questions.append(text.capitalize() + rng.choice(["?", "", " ?!"]))
    return questions


def _every_kept(questions: list[str], threshold: float) -> list[QuestionDecision]:
    kept_words: list[list[str]] = []
    kept_ids: list[str] = []
    decisions = []
    for i, question in enumerate(questions):
        match = process.extractOne(
            words(question), kept_words, scorer=Indel.normalized_similarity, score_cutoff=threshold
        )
        if match is None:
            kept_words.append(words(question))
            kept_ids.append(f"p{i}")
            decisions.append(QuestionDecision(f"p{i}", None, None))
        else:
            decisions.append(QuestionDecision(f"p{i}", kept_ids[match[2]], float(match[1])))
    return decisions


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.75, 0.9, 1.0])
async def test_the_index_decides_as_comparing_with_every_kept_question(
    tmp_path: Path, threshold: float
) -> None:
    rng = random.Random(threshold)
    questions = _questions(rng, 400)
    expected = _every_kept(questions, threshold)
    assert any(d.duplicate_of for d in expected)
    assert any(not d.duplicate_of for d in expected)
    index = QuestionIndex(threshold)
    decided: list[QuestionDecision] = []
    async with SQLiteStore(tmp_path / "q.db") as store:
        i = 0
        while i < len(questions):  # batches of 1 to 4, as chunks draft them
            size = rng.randint(1, 4)
            batch = [(f"p{j}", questions[j]) for j in range(i, min(i + size, len(questions)))]
            decided += await store.decide_questions("job", batch, index)
            i += size
    assert decided == expected


def test_a_question_is_found_under_few_keys() -> None:
    index = QuestionIndex(0.9)
    question = "Which port does the ragjury server listen on by default?"
    keys = index.keys(question)
    assert len(keys) == 2  # ten words at 0.9: two keys, not ten
    assert not {"which", "does", "the", "on", "by"} & set(keys)  # the telling words
    same = index.keys("what is the port of, the server")
    assert index.keys("What is the PORT of the server?") == same
    assert index.keys("") == index.keys("?!") != index.keys("port")
