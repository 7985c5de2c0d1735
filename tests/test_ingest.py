"""Tests for ragjury.ingest: loading files and folders, and splitting text into chunks."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import pytest
from pypdf import PdfWriter

from ragjury.errors import InputError
from ragjury.ingest import (
    DEFAULT_GLOBS,
    Skipped,
    chunk_document,
    iter_documents,
    load_documents,
    split_text,
)
from ragjury.schemas.records import Document

DATA = Path(__file__).resolve().parent / "data" / "ingest"
DOCS = DATA / "docs"
SHARED_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "corpus"


def _relative_ids(directory: Path, ids: list[str]) -> list[str]:
    return [Path(doc_id).relative_to(directory).as_posix() for doc_id in ids]


def _pdf_bytes(pages: list[str]) -> bytes:
    """A minimal valid PDF with one line of Helvetica text per page."""
    count = len(pages)
    kids = " ".join(f"{3 + 2 * n} 0 R" for n in range(count))
    font = 3 + 2 * count
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
    ]
    for n, text in enumerate(pages):
        stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 {font} 0 R >> >> /Contents {4 + 2 * n} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def _reasons(skipped: list[Skipped]) -> dict[str, str]:
    return {item.path: item.reason for item in skipped}


# Loading files and folders


def test_directory_is_walked_recursively_with_default_globs() -> None:
    result = load_documents([DOCS])

    assert _relative_ids(DOCS, [d.id for d in result.documents]) == [
        "guide.md",
        "nested/api.rst",
        "nested/example.js",
        "notes.txt",
    ]
    assert result.skipped == []


def test_file_documents_use_the_path_as_id_and_source() -> None:
    result = load_documents([str(DOCS)])

    guide = result.documents[0]
    assert guide.id == guide.source == str(DOCS / "guide.md")
    assert guide.text == (DOCS / "guide.md").read_text(encoding="utf-8")


def test_hidden_files_and_folders_are_not_read() -> None:
    result = load_documents([DOCS], globs=["*.md"])

    assert _relative_ids(DOCS, [d.id for d in result.documents]) == ["guide.md"]


def test_glob_limits_the_files_loaded() -> None:
    result = load_documents([DOCS], globs=["*.rst", "*.csv"])

    assert _relative_ids(DOCS, [d.id for d in result.documents]) == [
        "nested/api.rst",
        "table.csv",
    ]


def test_glob_with_a_folder_matches_paths_relative_to_the_given_directory() -> None:
    assert [d.id for d in load_documents([DOCS], globs=["nested/*"]).documents] == [
        str(DOCS / "nested" / "api.rst"),
        str(DOCS / "nested" / "example.js"),
    ]
    assert load_documents([DOCS], globs=["*/guide.md"]).documents == []


def test_glob_matching_nothing_gives_no_documents() -> None:
    result = load_documents([DOCS], globs=["*.nothing"])

    assert result.documents == []
    assert result.skipped == []


def test_default_globs_cover_prose_source_pdf_and_json() -> None:
    for suffix in ("md", "txt", "rst", "py", "js", "go", "pdf", "json", "jsonl"):
        assert f"**/*.{suffix}" in DEFAULT_GLOBS


def test_file_given_directly_is_loaded_whatever_the_globs() -> None:
    result = load_documents([DOCS / "table.csv"], globs=["*.md"])

    assert [d.id for d in result.documents] == [str(DOCS / "table.csv")]


def test_same_file_reached_twice_is_loaded_once() -> None:
    result = load_documents([DOCS, DOCS / "guide.md", DOCS / "nested" / ".." / "guide.md"])

    assert len(result.documents) == 4
    assert result.skipped == []


def test_missing_path_raises_input_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder"

    with pytest.raises(InputError, match="check the path") as caught:
        load_documents([DOCS, missing])

    assert str(missing) in str(caught.value)


def test_empty_and_binary_files_are_skipped_with_reasons(tmp_path: Path) -> None:
    (tmp_path / "empty.md").write_text("", encoding="utf-8")
    (tmp_path / "blank.txt").write_text("  \n\t\n", encoding="utf-8")
    (tmp_path / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tmp_path / "good.md").write_text("Some text.", encoding="utf-8")

    result = load_documents([tmp_path])

    assert [d.id for d in result.documents] == [str(tmp_path / "good.md")]
    reasons = _reasons(result.skipped)
    assert reasons[str(tmp_path / "empty.md")] == "empty"
    assert reasons[str(tmp_path / "blank.txt")] == "empty"
    assert "binary" in reasons[str(tmp_path / "image.md")]


def test_file_that_is_not_utf8_is_skipped_naming_the_byte_offset(tmp_path: Path) -> None:
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9 au lait")

    result = load_documents([tmp_path])

    assert result.documents == []
    assert _reasons(result.skipped) == {
        str(tmp_path / "latin.txt"): (
            "not valid UTF-8 (bad byte at offset 3); re-save the file as UTF-8"
        )
    }


def test_byte_order_mark_and_windows_line_ends_are_normalised(tmp_path: Path) -> None:
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfline one\r\nline two\r\n")
    (tmp_path / "utf16.txt").write_bytes("wide text".encode("utf-16"))

    texts = [d.text for d in load_documents([tmp_path]).documents]

    assert texts == ["line one\nline two\n", "wide text"]


def test_json_records_use_text_and_id_fields() -> None:
    result = load_documents([DATA / "records.json"], text_field="body", id_field="link")

    assert [(d.id, d.source, d.text) for d in result.documents] == [
        ("https://example.com/a", "https://example.com/a", "Alpha is the first letter."),
        ("https://example.com/b", "https://example.com/b", "Beta is the second letter."),
    ]


def test_json_records_without_id_field_are_numbered_from_zero() -> None:
    path = DATA / "records.json"

    result = load_documents([path], text_field="body")

    assert [d.id for d in result.documents] == [f"{path}#0", f"{path}#1"]


def test_json_object_wrapping_a_list_of_records_is_read() -> None:
    result = load_documents([DATA / "wrapped.json"])

    assert [d.text for d in result.documents] == [
        "Wrapped records are found inside an object.",
        "So is this one.",
    ]


def test_single_json_object_is_one_record(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text('{"text": "Only one.", "tags": [{"a": 1}]}', encoding="utf-8")

    result = load_documents([path])

    assert [(d.id, d.text) for d in result.documents] == [(f"{path}#0", "Only one.")]


def test_json_record_missing_text_field_lists_available_fields() -> None:
    path = DATA / "records.json"

    result = load_documents([path])

    assert result.documents == []
    reason = _reasons(result.skipped)[f"{path}:1"]
    assert "'text'" in reason
    assert "link, title, body" in reason
    assert "--text-field" in reason


def test_jsonl_record_missing_text_field_is_skipped_with_line_number() -> None:
    path = DATA / "records.jsonl"

    result = load_documents([path])

    assert [d.text for d in result.documents] == [
        "First line record.",
        "Third record, on line four.",
    ]
    assert [item.path for item in result.skipped] == [f"{path}:3"]
    assert "id, content" in result.skipped[0].reason
    assert "--text-field" in result.skipped[0].reason


def test_jsonl_ids_are_line_numbers_unless_an_id_field_is_given() -> None:
    path = DATA / "records.jsonl"

    numbered = load_documents([path]).documents
    named = load_documents([path], id_field="id").documents

    assert [d.id for d in numbered] == [f"{path}#1", f"{path}#4"]
    assert [d.id for d in named] == ["q1", "q3"]


def test_record_missing_id_field_is_skipped_suggesting_id_field(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"key": "a", "text": "A."}\n{"text": "B."}\n', encoding="utf-8")

    result = load_documents([path], id_field="key")

    assert [d.id for d in result.documents] == ["a"]
    reason = _reasons(result.skipped)[f"{path}:2"]
    assert "'key'" in reason
    assert "--id-field" in reason


def test_records_with_a_repeated_id_are_skipped_after_the_first(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"key": 1, "text": "A."}\n{"key": 1, "text": "B."}\n', encoding="utf-8")

    result = load_documents([path], id_field="key")

    assert [(d.id, d.text) for d in result.documents] == [("1", "A.")]
    assert "duplicate document id '1'" in _reasons(result.skipped)[f"{path}:2"]


def test_malformed_json_file_is_skipped_with_line_number(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"text": "a"},\n  {"text": }\n]\n', encoding="utf-8")

    result = load_documents([path])

    assert result.documents == []
    assert "invalid JSON at line 3" in _reasons(result.skipped)[str(path)]


def test_malformed_jsonl_line_is_skipped_and_the_rest_loaded(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"text": "good"}\n{"text": \n{"text": "also good"}\n', encoding="utf-8")

    result = load_documents([path])

    assert [d.text for d in result.documents] == ["good", "also good"]
    assert "invalid JSON on line 2" in _reasons(result.skipped)[f"{path}:2"]


def test_pdf_text_is_extracted(tmp_path: Path) -> None:
    path = tmp_path / "hello.pdf"
    path.write_bytes(_pdf_bytes(["Hello PDF world", "Second page here"]))

    result = load_documents([tmp_path])

    assert result.skipped == []
    [document] = result.documents
    assert document.id == str(path)
    assert document.text == "Hello PDF world\n\nSecond page here"


def test_pdf_without_text_is_skipped_as_probably_scanned(tmp_path: Path) -> None:
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    with (tmp_path / "scan.pdf").open("wb") as handle:
        writer.write(handle)

    result = load_documents([tmp_path])

    assert result.documents == []
    assert "no extractable text" in _reasons(result.skipped)[str(tmp_path / "scan.pdf")]


def test_corrupt_pdf_is_skipped_with_the_error(tmp_path: Path) -> None:
    (tmp_path / "broken.pdf").write_bytes(b"this is not a PDF at all")

    result = load_documents([tmp_path])

    assert result.documents == []
    assert _reasons(result.skipped)[str(tmp_path / "broken.pdf")].startswith("unreadable PDF: ")


def test_anthropic_docs_json_loads_with_links_as_ids() -> None:
    path = SHARED_CORPUS / "anthropic-docs" / "anthropic_docs.json"
    if not path.is_file():
        pytest.skip(f"shared corpus file {path} is not on this machine")

    result = load_documents([path], id_field="chunk_link")

    assert result.skipped == []
    assert len(result.documents) > 200
    assert all(d.id.startswith("https://") for d in result.documents)


# Splitting text into chunks

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


def test_iter_documents_yields_what_load_documents_returns() -> None:
    skipped: list[Skipped] = []
    streamed = list(iter_documents([DOCS], skipped=skipped))
    loaded = load_documents([DOCS])
    assert streamed == loaded.documents
    assert skipped == loaded.skipped


def test_iter_documents_reads_each_file_only_when_its_documents_are_asked_for(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.md").write_text("first page", encoding="utf-8")
    (tmp_path / "b.md").write_text("second page", encoding="utf-8")
    documents = iter_documents([tmp_path])
    assert next(documents).text == "first page"
    (tmp_path / "b.md").write_text("second page, edited after the first was read", encoding="utf-8")
    assert [d.text for d in documents] == ["second page, edited after the first was read"]


def test_iter_documents_reports_skips_as_it_meets_them(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("   ", encoding="utf-8")
    (tmp_path / "b.md").write_text("text", encoding="utf-8")
    skipped: list[Skipped] = []
    documents = iter_documents([tmp_path], skipped=skipped)
    assert skipped == []
    assert next(documents).text == "text"
    assert skipped == [Skipped(str(tmp_path / "a.md"), "empty")]


def test_iter_documents_refuses_a_missing_path_before_reading_anything(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nowhere"):
        iter_documents([tmp_path / "nowhere"])


def test_a_folder_is_read_in_sorted_path_order(tmp_path: Path) -> None:
    names = ["b.md", "a-b.md", "a/z.md", "a/b/c.txt", "a0.md", "A.md", "a/a.md", "ab/x.md"]
    for name in [*names, ".hidden/x.md", "node_modules/x.md", "a/.x.md"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"text of {name}", encoding="utf-8")
    (tmp_path / "linked").symlink_to(tmp_path / "a", target_is_directory=True)
    found = [d.text.removeprefix("text of ") for d in iter_documents([tmp_path])]
    assert found == sorted(names, key=lambda name: Path(name).parts)  # links not followed
