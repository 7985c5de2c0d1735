"""Tests for ragjury.ingest: loading files, folders, JSON records and PDFs as documents."""

from __future__ import annotations

from pathlib import Path

import pytest
from pypdf import PdfWriter

from ragjury.errors import InputError
from ragjury.ingest import (
    DEFAULT_GLOBS,
    Skipped,
    iter_documents,
    load_documents,
)

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
