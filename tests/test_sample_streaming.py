"""Sample files are read a record at a time on every pass, never held whole: a large file
costs the memory of a few records, and everything the first pass learns (counts, invalid
lines, duplicate ids, filled fields) is still reported."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from ragjury.config import Settings
from ragjury.errors import InputError
from ragjury.estimate import estimate_evaluation
from ragjury.evaluation.inputs import InvalidRecord, load_samples
from ragjury.metrics import registry
from ragjury.runner import submit_samples
from ragjury.store import SQLiteStore

MIB = 1024 * 1024


def _write_jsonl(path: Path, n: int, answer_chars: int = 4000) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            answer = f"Answer {i}. " + "x" * answer_chars
            record = {"id": f"s{i}", "question": f"Q{i}?", "answer": answer, "contexts": ["c"]}
            out.write(json.dumps(record) + "\n")
    return path


@pytest.mark.anyio
async def test_submitting_a_large_sample_file_holds_a_few_mib_not_the_file(
    tmp_path: Path,
) -> None:
    path = _write_jsonl(tmp_path / "large.jsonl", 5000)  # 20 MiB of answers
    assert path.stat().st_size > 19 * MIB
    async with SQLiteStore(tmp_path / "q.db") as store:
        tracemalloc.start()
        try:
            loaded = load_samples(path)
            job = await submit_samples(store, Settings(), loaded, ["keywords"])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (loaded.count, job.size) == (5000, 5000)
        assert peak < 8 * MIB  # a batch of rows at once; the samples in a list would be 40+
        assert (await store.counts([job.id]))["queued"] == 5000


def test_a_dry_run_estimate_reads_a_large_file_a_sample_at_a_time(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "large.jsonl", 3000)
    tracemalloc.start()
    try:
        estimate = estimate_evaluation(
            load_samples(path), [registry()["keywords"]], Settings(), {}, has_target=False
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert estimate.items["samples"] == 3000
    assert peak < 4 * MIB  # the file is 12 MiB


def test_the_first_pass_counts_what_later_steps_need(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"question": "q1", "answer": "a"}\n'
        '{"question": "q2", "must_contain": ["x"]}\n'
        '{"question": "q3", "reference": "r"}\n',
        encoding="utf-8",
    )

    loaded = load_samples(path)

    assert (loaded.count, len(loaded), loaded.unanswered) == (3, 3, 2)
    assert {"answer", "must_contain", "reference"} <= loaded.filled
    assert "contexts" not in loaded.filled
    assert registry().choose(loaded.filled, None) == ("faithfulness", "correctness", "keywords")


def test_every_pass_skips_the_invalid_lines_the_first_pass_reported(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps({"id": f"s{i}", "question": f"Q{i}?"}) for i in range(1, 2001)]
    lines[9] = "not json"
    lines[99] = json.dumps({"id": "s100", "answer": "no question"})
    lines[1999] = json.dumps({"id": "s3", "question": "a repeat, far from the first"})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    loaded = load_samples(path)

    assert [record.line for record in loaded.invalid] == [10, 100, 2000]
    assert loaded.invalid[2] == InvalidRecord(
        line=2000,
        reason="duplicate id 's3' (first used on line 3); give every record a unique id",
    )
    first, second = list(loaded), list(loaded)
    assert first == second
    assert len(first) == loaded.count == 1997
    assert [s.id for s in first[8:10]] == ["s9", "s11"]


def test_windows_line_endings_and_a_utf8_bom_read_as_plain_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"question": "One?"}\r\n\r\n{"question": "Two?"}\r\n')

    loaded = load_samples(path)

    assert loaded.invalid == []
    assert [(s.id, s.question) for s in loaded] == [("bom-1", "One?"), ("bom-3", "Two?")]


def test_a_utf16_csv_is_read_row_by_row(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    path.write_bytes('id,question,contexts\r\na,Où?,"x|y"\r\nb,Qui?,z\r\n'.encode("utf-16"))

    loaded = load_samples(path)

    assert [(s.id, s.question, s.contexts) for s in loaded] == [
        ("a", "Où?", ("x", "y")),
        ("b", "Qui?", ("z",)),
    ]


def test_a_jsonl_line_that_is_not_utf8_costs_only_that_line(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    good = b'{"question": "fine"}\n' * 100_000  # past the first read buffers
    path.write_bytes(good + b'{"question": "caf\xe9"}\n' + b'{"question": "last"}\n')

    loaded = load_samples(path)

    assert loaded.count == 100_001
    [invalid] = loaded.invalid
    assert invalid.line == 100_001
    assert "line is not UTF-8 (byte 18 of the line cannot be decoded)" in invalid.reason


def test_a_csv_byte_that_is_not_utf8_is_named_by_its_offset_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    good = b"question\n" + b"fine\n" * 100_000  # past the first read buffers
    path.write_bytes(good + b"caf\xe9\n")

    with pytest.raises(InputError, match=rf"byte {len(good) + 3} cannot be decoded"):
        load_samples(path)


def test_the_samples_json_kept_by_the_first_pass_is_what_a_second_pass_makes(
    tmp_path: Path,
) -> None:
    """``keep_encoded``: each valid sample's JSON, kept as the first pass checks the file,
    is read back for the job's intake (the file is not read and checked again): the same
    ids and text as the samples built afresh give, the invalid lines and the repeated id
    skipped, on every pass; a pass begun inside another makes them afresh."""
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps({"id": f"s{i}", "question": f"Q{i}? \u00e9\t", "must_contain": ["x"]})
             for i in range(1, 2001)]  # fmt: skip
    lines[9] = "not json"
    lines[1999] = json.dumps({"id": "s3", "question": "a repeat, far from the first"})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    kept = load_samples(path, keep_encoded=True)
    afresh = [(sample.id, sample.model_dump_json()) for sample in load_samples(path)]

    assert len(afresh) == kept.count == 1998
    assert list(kept.encoded()) == afresh
    assert list(kept.encoded()) == afresh  # again
    outer = kept.encoded()
    assert next(outer) == afresh[0]
    assert list(kept.encoded()) == afresh  # while the kept copy is being read
    assert [next(outer), *outer] == afresh[1:]
    assert list(load_samples(path).encoded()) == afresh  # none kept: made afresh


def test_a_file_rewritten_between_passes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"question": "q1"}\n', encoding="utf-8")
    loaded = load_samples(path)
    path.write_text('{"question": "q1"}\n{"question": "q2"}\n', encoding="utf-8")
    os.utime(path, ns=(1, 1))

    with pytest.raises(InputError, match="changed while it was being read"):
        list(loaded)
