"""Loading samples for `ragjury evaluate`: the field names of ragjury, RAGAS, DeepEval and
`ragjury generate`, in JSONL, JSON and CSV, with bad records reported by line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragjury._json import Record
from ragjury.errors import InputError
from ragjury.evaluation.inputs import InvalidRecord, SampleFile, load_samples, samples_from_records
from ragjury.schemas.records import Sample

DATA = Path(__file__).resolve().parent / "data" / "eval"


def _by_id(sample_set: SampleFile) -> dict[str, Sample]:
    return {sample.id: sample for sample in sample_set.samples}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_ragjury_fields_load_every_field() -> None:
    loaded = load_samples(DATA / "ragjury.jsonl")

    assert loaded.invalid == []
    assert loaded.samples[0] == Sample(
        id="capital",
        question="What is the capital of France?",
        answer="Paris is the capital of France.",
        contexts=("Paris is the capital and largest city of France.",),
        reference="Paris",
        must_contain=("Paris",),
        must_not_contain=("London",),
        must_not_start_with=("Sorry",),
        answer_logprobs=(-0.1, -0.25, 0.0),
    )


def test_single_string_contexts_and_keywords_become_one_item_lists() -> None:
    port = _by_id(load_samples(DATA / "ragjury.jsonl"))["port"]

    assert port.contexts == ("Uvicorn binds to 127.0.0.1:8000 unless told otherwise.",)
    assert port.must_contain == ("8000",)


def test_sample_without_answer_loads_with_answer_none() -> None:
    port = _by_id(load_samples(DATA / "ragjury.jsonl"))["port"]

    assert port.answer is None


def test_ragas_field_names_are_read_without_mapping() -> None:
    (sample,) = load_samples(DATA / "ragas.jsonl").samples

    assert sample.question == "When was the Eiffel Tower finished?"
    assert sample.answer == "It was finished in 1889."
    assert sample.contexts == ("The Eiffel Tower was completed in 1889.", "It is 330 metres tall.")
    assert sample.reference == "1889"


def test_deepeval_field_names_are_read_without_mapping() -> None:
    first = load_samples(DATA / "deepeval.jsonl").samples[0]

    assert first.question == "Who wrote Dune?"
    assert first.answer == "Frank Herbert wrote Dune."
    assert first.contexts == ("Dune is a 1965 novel by Frank Herbert.",)
    assert first.reference == "Frank Herbert"


def test_deepeval_context_list_is_used_when_there_is_no_retrieval_context() -> None:
    second = load_samples(DATA / "deepeval.jsonl").samples[1]

    assert second.contexts == ("Emma is a novel by Jane Austen, published in 1815.",)


def test_generated_pairs_become_questions_with_reference_answers_and_contexts() -> None:
    loaded = load_samples(DATA / "generated.jsonl")

    # the chunk a question came from is what retrieval should find, not what was retrieved
    assert loaded.samples[0] == Sample(
        id="pair-7",
        question="What port does uvicorn serve on by default?",
        answer=None,
        reference="8000",
        reference_contexts=("By default uvicorn serves on port 8000.",),
        reference_context_ids=("docs/ports.md#0",),
    )


def test_generated_pairs_are_all_used_whatever_their_outcome() -> None:
    loaded = load_samples(DATA / "generated.jsonl")

    assert [sample.id for sample in loaded.samples] == ["pair-7", "pair-8"]
    assert loaded.samples[1].reference == "/docs"


def test_json_list_loads_records_and_reports_bad_ones_by_record_index() -> None:
    loaded = load_samples(DATA / "samples.json")

    assert [sample.id for sample in loaded.samples] == ["a", "samples-2"]
    assert [record.line for record in loaded.invalid] == [3]


def test_json_object_with_one_list_of_records_is_read() -> None:
    loaded = load_samples(DATA / "wrapped.json")

    assert [sample.answer for sample in loaded.samples] == ["Blue."]


def test_json_object_with_two_lists_of_records_is_refused_naming_them(tmp_path: Path) -> None:
    path = _write(tmp_path, "two.json", '{"a": [{"question": "x"}], "b": [{"question": "y"}]}')

    with pytest.raises(InputError, match=r"several lists of records \('a', 'b'\)"):
        load_samples(path)


def test_json_that_does_not_parse_raises_with_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, "broken.json", '[\n  {"question": "x",}\n]')

    with pytest.raises(InputError, match=r"line 2, column 20"):
        load_samples(path)


def test_csv_reads_json_array_contexts() -> None:
    sky = _by_id(load_samples(DATA / "samples.csv"))["sky"]

    assert sky.contexts == (
        "On a clear day the sky looks blue.",
        "Rayleigh scattering favours blue light.",
    )
    assert sky.must_contain == ("blue",)


def test_csv_reads_pipe_separated_lists() -> None:
    grass = _by_id(load_samples(DATA / "samples.csv"))["grass"]

    assert grass.contexts == ("Grass is green.", "Chlorophyll absorbs red and blue.")
    assert grass.must_contain == ("green", "Green")


def test_csv_empty_cells_are_missing_values() -> None:
    multi = _by_id(load_samples(DATA / "samples.csv"))["multi"]

    assert multi.answer is None
    assert multi.contexts == ()


def test_csv_rows_are_numbered_by_the_line_they_start_on() -> None:
    loaded = load_samples(DATA / "samples.csv")

    assert loaded.invalid == [
        InvalidRecord(line=6, reason="field 'question' is empty; write the question there")
    ]


def test_a_csv_quote_left_open_costs_its_row_named_by_line_not_the_rows_after(
    tmp_path: Path,
) -> None:
    text = 'id,question,answer\na,"Open quote?,Yes\nb,Second?,No\n'
    merged = _write(tmp_path, "open.csv", text)
    good = _write(tmp_path, "good.csv", 'id,question,answer\nc,"Two\nlines?",Yes\n')

    loaded = load_samples(merged)

    # the rows it swallowed cannot be told apart from the cell: the row is refused, by line
    assert loaded.samples == []
    [bad] = loaded.invalid
    assert bad.line == 2
    assert "quote opened on line 2" in bad.reason
    assert "lines 2-3 run together" in bad.reason
    # a quoted cell over several lines that closes is a value, not an error
    assert [s.question for s in load_samples(good).samples] == ["Two\nlines?"]


def test_csv_generated_ids_use_the_line_number(tmp_path: Path) -> None:
    path = _write(tmp_path, "rows.csv", "question\nFirst?\nSecond?\n")

    assert [sample.id for sample in load_samples(path).samples] == ["rows-2", "rows-3"]


def test_invalid_records_are_reported_by_line_while_the_others_load() -> None:
    loaded = load_samples(DATA / "mixed.jsonl")

    assert [sample.id for sample in loaded.samples] == ["good-1", "good-2"]
    assert [record.line for record in loaded.invalid] == [2, 4, 5, 6, 7]


def test_record_without_question_names_the_fields_looked_for_and_found() -> None:
    no_question = load_samples(DATA / "mixed.jsonl").invalid[0]

    assert "'question', 'user_input', 'input'" in no_question.reason
    assert "'prompt'" in no_question.reason


def test_field_of_the_wrong_type_is_named_in_the_reason() -> None:
    bad_contexts = load_samples(DATA / "mixed.jsonl").invalid[1]

    assert bad_contexts.reason.startswith("field 'contexts' is a number (8)")


def test_jsonl_line_that_is_not_json_is_invalid() -> None:
    not_json = load_samples(DATA / "mixed.jsonl").invalid[2]

    assert not_json.reason.startswith("line is not JSON")


def test_record_that_is_not_an_object_is_invalid() -> None:
    a_list = load_samples(DATA / "mixed.jsonl").invalid[3]

    assert a_list.reason.startswith("record is a list")


def test_blank_question_is_invalid() -> None:
    blank = load_samples(DATA / "mixed.jsonl").invalid[4]

    assert blank.reason == "field 'question' is empty; write the question there"


def test_duplicate_id_is_invalid_naming_the_id_and_its_first_line() -> None:
    loaded = load_samples(DATA / "duplicates.jsonl")

    assert [sample.question for sample in loaded.samples] == ["First?", "Second?"]
    assert loaded.invalid == [
        InvalidRecord(
            line=3,
            reason="duplicate id 'q1' (first used on line 1); give every record a unique id",
        )
    ]


def test_missing_ids_are_generated_from_file_stem_and_line_number() -> None:
    loaded = load_samples(DATA / "no_ids.jsonl")

    assert [sample.id for sample in loaded.samples] == ["no_ids-1", "no_ids-3"]


def test_generated_ids_are_stable_across_loads() -> None:
    first = load_samples(DATA / "no_ids.jsonl")
    second = load_samples(DATA / "no_ids.jsonl")

    assert first.samples == second.samples


def test_integer_ids_become_strings(tmp_path: Path) -> None:
    path = _write(tmp_path, "ints.jsonl", '{"id": 7, "question": "Seven?"}\n')

    assert load_samples(path).samples[0].id == "7"


def test_unknown_fields_are_ignored(tmp_path: Path) -> None:
    path = _write(tmp_path, "extra.jsonl", '{"question": "Why?", "latency_ms": 12}\n')

    loaded = load_samples(path)

    assert loaded.invalid == []
    assert loaded.samples[0].question == "Why?"


def test_first_accepted_field_name_wins(tmp_path: Path) -> None:
    path = _write(tmp_path, "both.jsonl", '{"question": "Ours?", "user_input": "Theirs?"}\n')

    assert load_samples(path).samples[0].question == "Ours?"


def test_sample_set_keeps_the_path_it_was_loaded_from() -> None:
    path = str(DATA / "ragas.jsonl")

    assert load_samples(path).path == path


def test_missing_file_raises_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"

    with pytest.raises(InputError, match=r"nope\.jsonl.* does not exist"):
        load_samples(missing)


def test_unknown_suffix_raises_listing_the_accepted_ones(tmp_path: Path) -> None:
    path = _write(tmp_path, "samples.txt", "What?\n")

    with pytest.raises(InputError, match=r"'\.txt'.*\.jsonl, \.ndjson, \.json, \.csv"):
        load_samples(path)


def test_older_ragas_ground_truth_and_correct_answer_are_references(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text(
        '{"question": "q1", "answer": "a", "contexts": ["c"], "ground_truth": "r1"}\n'
        '{"question": "q2", "correct_answer": "r2"}\n',
        encoding="utf-8",
    )

    loaded = load_samples(path)

    assert [s.reference for s in loaded.samples] == ["r1", "r2"]


def test_contexts_with_ids_and_reference_ids_are_read_for_retrieval() -> None:
    records: list[Record] = [
        {
            "question": "q",
            "contexts": [{"id": "a", "text": "one"}, "two"],
            "correct_chunks": ["a", "c"],
        },
        {
            "user_input": "q",
            "retrieved_contexts": ["one", "two"],
            "retrieved_context_ids": ["a", "b"],
            "reference_contexts": ["one"],
            "reference_context_ids": "a",
        },
    ]

    first, second = samples_from_records(records, stem="s").samples

    assert (first.contexts, first.context_ids) == (("one", "two"), ("a", None))
    assert first.reference_context_ids == ("a", "c")
    assert second.context_ids == ("a", "b")
    assert (second.reference_contexts, second.reference_context_ids) == (("one",), ("a",))


def test_context_ids_that_do_not_match_the_contexts_are_an_invalid_record() -> None:
    record = {"question": "q", "contexts": ["one", "two"], "context_ids": ["a"]}

    loaded = samples_from_records([record], stem="s")

    assert loaded.samples == []
    assert "1 context ids for 2 contexts" in loaded.invalid[0].reason
