"""run_generation takes documents lazily: one only when the bus has room for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragjury.generation import GenerationCounts, run_generation
from ragjury.llm import LLM
from ragjury.schemas.records import Document
from ragjury.store import Store

from conftest import make_settings, script_happy_path
from fakeopenai import FakeOpenAI

pytestmark = pytest.mark.anyio

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
]


def page(index: int) -> Document:
    # distinct words, so that no drafted question is dropped as a near-duplicate
    a, b = WORDS[index % len(WORDS)], WORDS[index // len(WORDS) % len(WORDS)]
    text = f"# Page {index}\n\nQ: Which {a} setting does the {b} module {index} use?\nA: {a}\n"
    return Document(id=f"page-{index}", source=f"page-{index}.md", text=text)


async def test_documents_are_taken_only_as_fast_as_the_pipeline_drains_them(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    settings = make_settings(fake, tmp_path, bus_buffer=2, concurrency=2)
    drafted = 0
    ahead: list[int] = []  # at each document taken: taken so far minus chunks already drafted

    def on_progress(counts: GenerationCounts) -> None:
        nonlocal drafted
        drafted = counts.chunks_done

    def pages() -> Iterator[Document]:
        for index in range(60):
            ahead.append(index - drafted)
            yield page(index)

    async with Store(settings.db) as store, LLM(settings) as llm:
        run_id = await store.start_run("generate", {})
        counts = await run_generation(
            pages(), settings=settings, llm=llm, store=store, run_id=run_id, on_progress=on_progress
        )
    assert counts.documents == 60
    assert counts.chunks_done == 60
    assert counts.kept == 60
    # Bounded by the buffers and workers between the feed and the drafted count, never by
    # the 60 documents waiting: that is what keeps memory flat on a large folder.
    assert max(ahead) <= 20
