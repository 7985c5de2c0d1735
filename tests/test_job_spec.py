"""A job is one typed spec: built once by the entry point, stored with the job, read back
as the same type, and stored as earlier versions stored their options (so a job submitted
before this version is found again, not judged anew)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragjury.config import Settings
from ragjury.job_spec import EvaluationSpec, GenerationSpec, spec_of
from ragjury.runner import submit_documents, submit_samples
from ragjury.schemas import Document, Sample
from ragjury.store import SQLiteStore
from ragjury.store.cache import llm_fingerprint

pytestmark = pytest.mark.anyio


async def test_an_evaluation_job_is_stored_as_before_and_read_back_typed(tmp_path: Path) -> None:
    settings = Settings(model="m")
    sample = Sample(id="s1", question="q?", answer="a.", contexts=["c."])
    async with SQLiteStore(tmp_path / "run.db") as store:
        job = await submit_samples(store, settings, [sample], ["faithfulness"])
        stored = (await store.job(job.id)).options
        spec = spec_of(await store.job(job.id))

    # the shape of every earlier version's options: nested None values kept, no new keys
    assert stored == {
        "evaluate": settings.evaluate.model_dump(mode="json"),
        "metrics": ["faithfulness"],
        "prompts": {},
        "llm": llm_fingerprint(settings),
    }
    evaluate = stored["evaluate"]
    assert isinstance(evaluate, dict)
    assert evaluate["metrics"] is None
    assert isinstance(spec, EvaluationSpec)
    assert (spec.metrics, spec.judges) == (("faithfulness",), None)
    assert spec.evaluate == settings.evaluate


async def test_a_generation_job_unpinned_and_uncached_is_its_own_job(tmp_path: Path) -> None:
    settings = Settings(model="m", cache=False)
    documents = [Document(id="d1", source="d1.md", text="Some text.")]
    async with SQLiteStore(tmp_path / "run.db") as store:
        first = await submit_documents(store, settings, documents, pin_model=False)
        again = await submit_documents(store, settings, documents, pin_model=False)
        stored = (await store.job(first.id)).options
        spec = spec_of(await store.job(first.id))

    assert first.id != again.id  # --no-cache: the work is done again
    assert set(stored) == {"generate", "prompts", "fresh"}  # no model pinned: no "llm"
    generate = stored["generate"]
    assert isinstance(generate, dict)
    assert generate["globs"] is None
    assert isinstance(spec, GenerationSpec)
    assert spec.generate == settings.generate
    assert spec.llm is None
