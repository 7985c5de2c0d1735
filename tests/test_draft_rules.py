"""Each question type's rule for a good draft, as the generator's response models check it
(instructor re-asks with these messages; ``test_question_types`` shows one re-ask end to
end)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ragjury.schemas.drafts import ComparativePairs, MultiHopPairs, ReasoningPairs
from ragjury.schemas.responses import DraftedPairs, checking

PAGE = (
    "FastAPI returns status 200 for a successful request by default.\n\n"
    "The status_code parameter of the decorator sets another code, such as 201.\n\n"
    "- A 204 response must not have a body."
)
OTHER = "Starlette's status module names each code, such as HTTP_201_CREATED."
QUESTION = "Which status does a FastAPI POST endpoint return without a status_code argument?"


def _check(model: type[DraftedPairs], pair: dict[str, Any], chunks: list[str]) -> None:
    with checking({"chunks": chunks, "questions_per_chunk": 1}):
        model.model_validate({"pairs": [pair]})


def _refused(model: type[DraftedPairs], pair: dict[str, Any], chunks: list[str]) -> str:
    with pytest.raises(ValidationError) as caught:
        _check(model, pair, chunks)
    return str(caught.value)


def test_a_reasoning_draft_rests_on_two_sentences_of_its_chunk() -> None:
    steps = [
        "FastAPI returns status 200 for a successful request by default",
        "The status_code parameter of the decorator sets another code",
    ]
    _check(ReasoningPairs, {"question": QUESTION, "answer": "200", "steps": steps}, [PAGE])

    one = [steps[0], "for a successful request by default"]
    said = _refused(ReasoningPairs, {"question": QUESTION, "answer": "200", "steps": one}, [PAGE])
    assert "every step quotes the same sentence" in said


def test_a_reasoning_draft_may_not_copy_a_sentence_as_its_answer_or_invent_a_step() -> None:
    steps = [
        "FastAPI returns status 200 for a successful request by default",
        "A 204 response must not have a body",
    ]
    copied = {
        "question": QUESTION,
        "answer": "A 204 response must not have a body.",
        "steps": steps,
    }
    assert "the answer is a sentence of the text copied" in _refused(ReasoningPairs, copied, [PAGE])

    invented = {"question": QUESTION, "answer": "200", "steps": [steps[0], "Flask returns 500"]}
    assert "'Flask returns 500' is not a word-for-word quote" in _refused(
        ReasoningPairs, invented, [PAGE]
    )


def test_a_multi_hop_draft_quotes_every_text_it_was_drafted_from() -> None:
    evidence = [
        {"text_number": 1, "quote": "The status_code parameter of the decorator sets another code"},
        {"text_number": 2, "quote": "names each code, such as HTTP_201_CREATED"},
    ]
    pair = {"question": QUESTION, "answer": "HTTP_201_CREATED", "evidence": evidence}
    _check(MultiHopPairs, pair, [PAGE, OTHER])

    first_only = {**pair, "evidence": [evidence[0], {**evidence[0], "quote": "by default"}]}
    assert "no evidence from text 2" in _refused(MultiHopPairs, first_only, [PAGE, OTHER])
    misplaced = {**pair, "evidence": [evidence[0], {**evidence[1], "text_number": 1}]}
    assert "is not a word-for-word quote of text 1" in _refused(
        MultiHopPairs, misplaced, [PAGE, OTHER]
    )
    beyond = {**pair, "evidence": [*evidence, {"text_number": 3, "quote": "by default"}]}
    assert "there is no text 3" in _refused(MultiHopPairs, beyond, [PAGE, OTHER])


def test_a_comparative_draft_compares_two_different_things_each_quoted() -> None:
    compared = [
        {"name": "status 200", "text_number": 1, "quote": "returns status 200"},
        {"name": "HTTP_201_CREATED", "text_number": 2, "quote": "such as HTTP_201_CREATED"},
    ]
    pair = {"question": QUESTION, "answer": "One is the default.", "compared": compared}
    _check(ComparativePairs, pair, [PAGE, OTHER])

    same = {**pair, "compared": [compared[0], {**compared[0], "name": "Status  200"}]}
    assert "both compared things are 'status 200'" in _refused(
        ComparativePairs, same, [PAGE, OTHER]
    )
    assert "at most 2 items" in _refused(
        ComparativePairs, {**pair, "compared": [*compared, compared[0]]}, [PAGE, OTHER]
    )
