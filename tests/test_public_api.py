"""The Python API: what ``ragjury`` exports, the inputs it takes, the events it yields, and
the caller's own exceptions, which come out of ``async with Jury(...)`` as they were raised."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import ragjury
from ragjury import InputError, Jury, Sample, SampleScored

from conftest import make_settings, script_happy_path, write_qa_document
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

# What a user calls; everything their signatures and results mention must be importable
# from ``ragjury`` itself.
_ENTRY_POINTS = ("__init__", "evaluate_one", "evaluate", "submit_documents", "submit_samples")


def _classes_in(annotation: Any) -> set[type]:
    found: set[type] = set()
    if isinstance(annotation, type):
        found.add(annotation)
    for arg in typing.get_args(annotation):
        found |= _classes_in(arg)
    return found


def _ours(annotation: Any) -> list[type]:
    return [t for t in _classes_in(annotation) if t.__module__.startswith("ragjury")]


def _mentioned_by(cls: type) -> list[type]:
    """The ragjury classes in ``cls``'s fields and in what its properties return."""
    found: list[type] = []
    if issubclass(cls, BaseModel):
        for field in cls.model_fields.values():
            found += _ours(field.annotation)
    for attribute in vars(cls).values():
        if isinstance(attribute, property) and attribute.fget is not None:
            found += _ours(typing.get_type_hints(attribute.fget).get("return"))
    return found


def _reachable_ragjury_types() -> set[type]:
    todo: list[type] = []
    for name in _ENTRY_POINTS:
        for hint in typing.get_type_hints(getattr(Jury, name)).values():
            todo += _ours(hint)
    todo += [v for v in map(ragjury.__dict__.get, ragjury.__all__) if inspect.isclass(v)]
    seen: set[type] = set()
    while todo:
        cls = todo.pop()
        if cls not in seen and cls.__module__.startswith("ragjury"):
            seen.add(cls)
            todo += _mentioned_by(cls)
    return seen


def test_every_type_a_user_handles_is_exported_from_ragjury() -> None:
    reached = _reachable_ragjury_types()
    missing = sorted(cls.__name__ for cls in reached if cls.__name__ not in ragjury.__all__)

    assert ragjury.SampleScored in reached  # sanity: the walk follows the exports
    assert missing == []


def test_all_is_sorted_and_every_name_in_it_exists() -> None:
    def isort_style(name: str) -> tuple[int, str]:  # ruff's RUF022 order: CONSTANTS, Classes, rest
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert ragjury.__all__ == sorted(ragjury.__all__, key=isort_style)
    assert [name for name in ragjury.__all__ if not hasattr(ragjury, name)] == []
    public = {
        n for n, v in vars(ragjury).items() if not n.startswith("_") and not inspect.ismodule(v)
    }
    assert sorted(public - set(ragjury.__all__)) == []


@pytest.mark.anyio
async def test_the_callers_own_exception_leaves_async_with_jury_unwrapped(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    async def application() -> None:
        async with Jury(make_settings(fake, tmp_path)) as jury:
            await jury.store()
            raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        await application()


@pytest.mark.anyio
async def test_the_callers_exception_while_reading_events_leaves_unwrapped(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)

    async def application() -> None:
        async with Jury(make_settings(fake, tmp_path)) as jury:
            await jury.submit_samples([{"question": "Capital of Japan?", "answer": "Tokyo."}] * 2)
            async for _event in jury.events():
                raise LookupError("stop here")

    with pytest.raises(LookupError, match="stop here"):
        await application()


@pytest.mark.anyio
async def test_submit_samples_takes_dicts_without_ids_and_events_yield_only_results(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    samples = [
        {"question": "Capital of Japan?", "answer": "Tokyo is the capital of Japan."},
        {"user_input": "Capital of France?", "response": "Paris is the capital of France."},
    ]
    seen: list[Any] = []
    async with Jury(make_settings(fake, tmp_path)) as jury:
        await jury.submit_samples(samples, metrics=["rubric"])
        async for event in jury.events():
            seen.append(event)

    assert {type(e) for e in seen} == {SampleScored}
    assert sorted(e.sample.id for e in seen) == ["sample-1", "sample-2"]
    assert [e.passing for e in seen] == [True, True]


@pytest.mark.anyio
@pytest.mark.parametrize("internal", [False, True])
async def test_events_yield_internal_events_only_when_asked(
    fake: FakeOpenAI, tmp_path: Path, internal: bool
) -> None:
    script_happy_path(fake)
    docs = tmp_path / "docs"
    write_qa_document(docs, "a.md", [("What colour is the sky?", "Blue.")])
    kinds: set[str] = set()
    async with Jury(make_settings(fake, tmp_path)) as jury:
        await jury.submit_documents([docs])
        async for event in jury.events(internal=internal):
            kinds.add(event.kind)

    if internal:
        assert {"pair_judged", "chunk_ready", "pair_drafted"} <= kinds
    else:
        assert kinds == {"pair_judged", "document_judged"}


@pytest.mark.anyio
async def test_evaluate_takes_samples_without_ids_and_dicts(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    async with Jury(make_settings(fake, tmp_path)) as jury:
        results = await jury.evaluate(
            [
                Sample(question="Capital of Japan?", answer="Tokyo is the capital of Japan."),
                {"input": "Capital of France?", "actual_output": "Paris is the capital of France."},
                {"id": "mine", "question": "Capital of Italy?", "answer": "Rome."},
            ],
            metrics=["rubric"],
        )

    assert [r.sample.id for r in results] == ["sample-1", "sample-2", "mine"]
    assert results[1].sample.question == "Capital of France?"


@pytest.mark.anyio
async def test_a_dict_that_is_not_a_sample_is_an_input_error_naming_it(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    async with Jury(make_settings(fake, tmp_path)) as jury:
        with pytest.raises(InputError, match=r"sample 2: record has no question"):
            await jury.evaluate([{"question": "q", "answer": "a"}, {"answer": "a"}])
        with pytest.raises(InputError, match=r"repeated: x\. Give each sample its own id"):
            await jury.evaluate([Sample(id="x", question="q"), {"id": "x", "question": "q"}])


@pytest.mark.anyio
async def test_a_sample_that_cannot_be_judged_is_named_with_its_error_not_called_a_budget(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    import math

    from ragjury import RagjuryError

    # a log-probability JSON cannot hold: the sample cannot be stored and read back
    bad = Sample(id="bad", question="q", answer="A.", answer_logprobs=(math.nan,))
    good = Sample(id="good", question="q", answer="A.", must_contain=("A",))
    async with Jury(make_settings(fake, tmp_path)) as jury:
        with pytest.raises(RagjuryError) as raised:
            await jury.evaluate([good, bad], metrics=["keywords"])
    message = str(raised.value)
    assert message.startswith("1 of 2 samples could not be judged (bad: ValidationError: ")
    assert "answer_logprobs" in message
    assert "budget" not in message


def test_every_error_is_in_the_tree_drawn_in_errors_and_exported() -> None:
    import ragjury.errors as errors

    classes = [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, errors.RagjuryError)
    ]
    assert len(classes) >= 8
    for cls in classes:
        assert cls.__name__ in ragjury.__all__, cls.__name__
        assert cls.__name__ in (errors.__doc__ or ""), f"{cls.__name__} is not drawn in the tree"


def test_no_public_error_is_defined_outside_the_tree() -> None:
    import importlib
    import pkgutil

    import ragjury.errors as errors

    outside = []
    for info in pkgutil.walk_packages(ragjury.__path__, "ragjury."):
        if info.name.endswith("__main__") or info.name.startswith(
            ("ragjury.store.postgres", "ragjury.llm.local")
        ):
            continue  # optional extras (asyncpg, llama-cpp) may be absent
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and not name.startswith("_")
                and info.name != "ragjury.errors"
            ):
                outside.append(f"{info.name}.{name}")
    assert outside == []
    assert issubclass(errors.MetricNotRequested, KeyError)  # result["x"] stays a KeyError
