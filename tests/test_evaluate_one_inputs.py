"""``Jury.evaluate_one`` takes a sample as keywords, a dict or a ``Sample``, with the field
names files take; a string where a list goes is one item, and None means absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragjury import InputError, Jury, Sample
from ragjury.results import EvaluationResult

from conftest import make_settings
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

pytestmark = pytest.mark.anyio


async def one(fake: FakeOpenAI, tmp_path: Path, *args: Any, **kw: Any) -> EvaluationResult:
    script_judges(fake)
    async with Jury(make_settings(fake, tmp_path)) as jury:
        return await jury.evaluate_one(*args, **kw)


async def test_a_string_keyword_is_one_keyword_not_its_letters(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    result = await one(
        fake,
        tmp_path,
        id="s1",
        question="Where is the tower?",
        answer="It is in Rome.",
        must_contain="Paris",
        metrics=["keywords"],
    )

    assert result.sample.id == "s1"
    assert result.sample.must_contain == ("Paris",)
    assert result.keywords.passing is False  # "Rome" does not contain "Paris"


async def test_none_means_absent(fake: FakeOpenAI, tmp_path: Path) -> None:
    result = await one(
        fake,
        tmp_path,
        question="Q?",
        answer="A.",
        must_contain=["A"],
        answer_logprobs=None,
        reference=None,
        metrics=["keywords"],
    )

    assert result.sample.answer_logprobs is None
    assert result.keywords.passing is True


async def test_a_dict_with_ragas_names_and_a_sample_are_taken_too(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    ragas = {"user_input": "Q?", "response": "A.", "retrieved_contexts": ["A."]}
    by_dict = await one(fake, tmp_path, ragas, metrics=["faithfulness"])
    given = Sample(id="x", question="Q?", answer="A.", contexts=("A.",))
    by_sample = await one(fake, tmp_path, given, metrics=["faithfulness"])

    assert by_dict.sample.contexts == ("A.",)
    assert by_dict.faithfulness.outcome == "scored"
    assert by_sample.sample.id == "x"
    assert by_sample.faithfulness.outcome == "scored"


async def test_a_sample_and_keywords_at_once_is_a_clear_error(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    with pytest.raises(InputError, match="not both"):
        await one(fake, tmp_path, {"question": "Q?"}, answer="A.")
