"""Tests for ragjury.ingest's chunking: sizes, overlap, and where chunks are cut."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import pytest

from ragjury.ingest import (
    chunk_document,
    load_documents,
    split_text,
)
from ragjury.schemas.records import Document

SHARED_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "corpus"


SAMPLE = """# Getting started

ragjury builds evaluation sets from your documents. It drafts questions, then critics judge \
them. Only the good ones are kept.

## Installing

Install the package with pip. Then check the version. A supercalifragilisticexpialidocious \
word appears here too, to test long words.

```python
# This comment is code, not a heading.
import ragjury
```

## Running

Point the command at a folder. Every Markdown file in it is read, split into chunks, and \
questions are drafted from each chunk.

Results are written as JSON lines. Each line holds one question, its answer and the chunk.
"""


def _spans(text: str, chunks: list[str]) -> list[tuple[int, int]]:
    """Where each chunk sits in ``text``, checking that chunks come in order."""
    spans: list[tuple[int, int]] = []
    position = 0
    for chunk in chunks:
        start = text.find(chunk, position)
        assert start >= 0, f"chunk is not a piece of the text: {chunk!r}"
        spans.append((start, start + len(chunk)))
        position = start + 1
    return spans


@pytest.mark.parametrize("chunk_size", [1, 7, 40, 90, 200, 1000])
def test_chunks_never_exceed_chunk_size(chunk_size: int) -> None:
    text = SAMPLE + "x" * 250 + "\n\n" + "word " * 300

    chunks = split_text(text, chunk_size=chunk_size, overlap=chunk_size // 3)

    assert chunks
    assert all(0 < len(chunk) <= chunk_size for chunk in chunks)


@pytest.mark.parametrize(("chunk_size", "overlap"), [(30, 0), (60, 20), (150, 40), (400, 100)])
def test_chunks_lose_no_text(chunk_size: int, overlap: int) -> None:
    chunks = split_text(SAMPLE, chunk_size=chunk_size, overlap=overlap)

    covered: set[int] = set()
    for start, end in _spans(SAMPLE, chunks):
        covered.update(range(start, end))
    missing = [i for i, char in enumerate(SAMPLE) if not char.isspace() and i not in covered]
    assert missing == []


def test_short_text_gives_one_stripped_chunk() -> None:
    assert split_text("\n  A short text.  \n", chunk_size=100, overlap=10) == ["A short text."]


def test_whitespace_only_text_gives_no_chunks() -> None:
    assert split_text(" \n\t\n ", chunk_size=100, overlap=10) == []


def test_chunks_cut_at_paragraph_boundaries() -> None:
    paragraphs = [f"Paragraph {n} says something. It has two sentences." for n in range(6)]

    chunks = split_text("\n\n".join(paragraphs), chunk_size=120, overlap=0)

    assert len(chunks) > 1
    assert all(chunk.endswith("sentences.") for chunk in chunks)
    assert all(chunk.startswith("Paragraph") for chunk in chunks)


def test_long_paragraph_is_cut_at_sentence_ends() -> None:
    text = " ".join(f"Sentence number {n} is here." for n in range(20))

    chunks = split_text(text, chunk_size=100, overlap=0)

    assert len(chunks) > 1
    assert all(chunk.startswith("Sentence") and chunk.endswith("here.") for chunk in chunks)


def test_text_without_sentences_is_cut_at_whitespace() -> None:
    text = " ".join(f"word{n}" for n in range(100))

    chunks = split_text(text, chunk_size=50, overlap=0)

    assert " ".join(chunks) == text


def test_long_word_is_cut_mid_word_as_last_resort() -> None:
    assert split_text("a" * 25, chunk_size=10, overlap=0) == ["a" * 10, "a" * 10, "a" * 5]


def test_heading_starts_a_new_chunk() -> None:
    chunks = split_text(SAMPLE, chunk_size=250, overlap=50)

    assert any(chunk.startswith("## Installing") for chunk in chunks)
    assert any(chunk.startswith("## Running") for chunk in chunks)


def test_heading_is_not_left_at_the_end_of_a_chunk() -> None:
    text = "Intro text that is long enough to matter here.\n\n## Part\n\n### Sub\n\n" + "body " * 40

    chunks = split_text(text, chunk_size=80, overlap=0)

    assert chunks[0] == "Intro text that is long enough to matter here."
    assert chunks[1].startswith("## Part\n\n### Sub\n\nbody")


def test_rst_underlined_title_starts_a_new_chunk() -> None:
    text = "Intro paragraph with some words in it.\nStill the intro.\n\nUsage\n=====\n\nRun it."

    chunks = split_text(text, chunk_size=60, overlap=10)

    assert chunks[-1] == "Usage\n=====\n\nRun it."


def test_hash_line_in_code_fence_is_not_a_heading() -> None:
    text = "Intro words go here.\n\n```\nx = 1\n# note on y\ny = 2\n```\n"

    chunks = split_text(text, chunk_size=45, overlap=0)

    assert chunks == ["Intro words go here.", "```\nx = 1\n# note on y\ny = 2\n```"]


def test_consecutive_chunks_overlap() -> None:
    text = " ".join(f"Sentence {n} has a few words in it." for n in range(40))

    chunks = split_text(text, chunk_size=200, overlap=60)

    spans = _spans(text, chunks)
    assert len(spans) > 3
    for (_, previous_end), (start, _) in pairwise(spans):
        assert 25 <= previous_end - start <= 60


def test_overlap_starts_at_a_word_boundary() -> None:
    text = " ".join(f"token{n:03d}" for n in range(200))

    chunks = split_text(text, chunk_size=100, overlap=35)

    assert len(chunks) > 2
    assert all(re.fullmatch(r"token\d{3}( token\d{3})*", chunk) for chunk in chunks)
    assert all(set(a.split()) & set(b.split()) for a, b in pairwise(chunks))


@pytest.mark.parametrize(("chunk_size", "overlap"), [(400, 400), (400, 500)])
def test_overlap_not_smaller_than_size_is_rejected(chunk_size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="smaller than chunk_size") as caught:
        split_text("text", chunk_size=chunk_size, overlap=overlap)

    message = str(caught.value)
    assert f"overlap={overlap}" in message
    assert f"size={chunk_size}" in message
    assert "--chunk-overlap" in message


def test_chunk_size_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"chunk_size must be at least 1, got size=0"):
        split_text("text", chunk_size=0, overlap=0)


def test_negative_overlap_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"got overlap=-1"):
        split_text("text", chunk_size=10, overlap=-1)


def test_chunk_ids_follow_the_document_id_and_index() -> None:
    document = Document(id="docs/a.md", source="docs/a.md", text=SAMPLE)

    chunks = chunk_document(document, chunk_size=200, overlap=20)

    assert len(chunks) > 1
    assert [c.id for c in chunks] == [f"docs/a.md::{i}" for i in range(len(chunks))]
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert {(c.document_id, c.source) for c in chunks} == {("docs/a.md", "docs/a.md")}
    assert [c.text for c in chunks] == split_text(SAMPLE, chunk_size=200, overlap=20)


def test_whole_documents_give_one_chunk() -> None:
    document = Document(id="d", source="d.md", text=f"\n{SAMPLE}\n\n")

    chunks = chunk_document(document, chunk_size=100, overlap=10, whole=True)

    assert [(c.id, c.index, c.text) for c in chunks] == [("d::0", 0, SAMPLE.strip())]


def test_fastapi_tutorial_corpus_loads_and_chunks_within_size() -> None:
    corpus = SHARED_CORPUS / "fastapi-tutorial"
    if not corpus.is_dir():
        pytest.skip(f"shared corpus folder {corpus} is not on this machine")

    result = load_documents([corpus])

    assert len(result.documents) >= 51
    assert all(d.id.endswith(".md") for d in result.documents)
    assert result.skipped == []
    for document in result.documents:
        chunks = chunk_document(document, chunk_size=800, overlap=100)
        assert chunks
        assert all(0 < len(c.text) <= 800 for c in chunks)


# -- iter_documents: the same documents, read one file at a time ------------------------------
