"""The sample files users already have: CSV written by pandas, Parquet, LlamaIndex's
``rag_dataset.json``, Hugging Face datasets (saved to disk, or as JSONL), and any field
names, mapped with ``--field NAME=SOURCE``.

``data/eval/hf_dataset``, ``hf_splits`` and ``hf.jsonl`` were written by ``datasets`` 5.2.0
(``save_to_disk`` and ``to_json``); ``rag_dataset.json`` has the shape LlamaIndex's
``LabelledRagDataset.save_json`` writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ragjury.cli import main
from ragjury.errors import InputError
from ragjury.evaluation.inputs import load_samples

DATA = Path(__file__).resolve().parent / "data" / "eval"
ROWS = [
    {
        "question": "What is the capital of Japan?",
        "answer": "Tokyo is the capital of Japan.",
        "contexts": ["Tokyo is the capital of Japan.", "Japan, it's in Asia."],
    },
    {
        "question": "Where is the Eiffel Tower?",
        "answer": "In Paris.",
        "contexts": ["The Eiffel Tower is in Paris."],
    },
]
JAPAN_CONTEXTS = ("Tokyo is the capital of Japan.", "Japan, it's in Asia.")


def test_a_list_column_pandas_wrote_to_csv_is_read_as_a_list(tmp_path: Path) -> None:
    path = tmp_path / "samples.csv"
    pd.DataFrame(ROWS).to_csv(path, index=False)
    cell = pd.read_csv(path)["contexts"][0]
    assert cell == "['Tokyo is the capital of Japan.', \"Japan, it's in Asia.\"]"  # Python's repr

    loaded = load_samples(path)

    assert loaded.invalid == []
    assert loaded.samples[0].contexts == JAPAN_CONTEXTS
    assert loaded.samples[1].contexts == ("The Eiffel Tower is in Paris.",)


def test_a_numpy_array_column_pandas_wrote_to_csv_keeps_its_items_apart(tmp_path: Path) -> None:
    pd.DataFrame(ROWS).to_parquet(tmp_path / "s.parquet")
    frame = pd.read_parquet(tmp_path / "s.parquet")  # list cells come back as numpy arrays
    frame.to_csv(tmp_path / "samples.csv", index=False)
    cell = pd.read_csv(tmp_path / "samples.csv")["contexts"][0]
    assert cell == "['Tokyo is the capital of Japan.' \"Japan, it's in Asia.\"]"  # numpy: no comma

    loaded = load_samples(tmp_path / "samples.csv")

    assert loaded.samples[0].contexts == JAPAN_CONTEXTS


def test_a_json_list_in_a_csv_cell_is_read_as_a_list(tmp_path: Path) -> None:
    path = tmp_path / "samples.csv"
    frame = pd.DataFrame(ROWS).assign(contexts=[json.dumps(r["contexts"]) for r in ROWS])
    frame.to_csv(path, index=False)

    assert load_samples(path).samples[0].contexts == JAPAN_CONTEXTS


def test_parquet_written_by_pandas_loads_with_lists_and_row_numbered_ids(tmp_path: Path) -> None:
    path = tmp_path / "answers.parquet"
    pd.DataFrame(ROWS).to_parquet(path)

    loaded = load_samples(path)

    assert loaded.invalid == []
    assert [s.id for s in loaded.samples] == ["answers-1", "answers-2"]
    assert loaded.samples[0].contexts == JAPAN_CONTEXTS
    assert loaded.samples[1].answer == "In Paris."


def test_parquet_without_pyarrow_says_which_extra_to_install(tmp_path: Path) -> None:
    path = tmp_path / "answers.parquet"
    pd.DataFrame(ROWS).to_parquet(path)
    program = (
        "import sys; sys.modules['pyarrow'] = None  # as if pyarrow were not installed\n"
        "from ragjury.evaluation.inputs import load_samples\n"
        f"load_samples({str(path)!r})\n"
    )

    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)

    assert done.returncode != 0
    assert "InputError: reading Parquet needs pyarrow" in done.stderr
    assert "pip install 'ragjury[parquet]'" in done.stderr


def test_llamaindex_rag_dataset_loads_queries_with_reference_answers_and_contexts() -> None:
    """LlamaIndex's reference_contexts are the contexts that hold the answer: ground truth
    for retrieval, not what a retriever returned."""
    loaded = load_samples(DATA / "rag_dataset.json")

    assert loaded.invalid == []
    first = loaded.samples[0]
    assert (first.id, first.question, first.answer) == (
        "rag_dataset-1",
        "What is the capital of Japan?",
        None,
    )
    assert first.reference == "Tokyo"
    assert first.reference_contexts == ("Tokyo is the capital of Japan.", "Japan is in Asia.")
    assert first.contexts == ()


def test_a_hugging_face_dataset_saved_to_disk_loads() -> None:
    loaded = load_samples(DATA / "hf_dataset")

    assert loaded.invalid == []
    assert [s.question for s in loaded.samples] == [
        "What is the capital of Japan?",
        "Where is the Eiffel Tower?",
    ]
    assert loaded.samples[0].contexts == ("Tokyo is the capital of Japan.", "Japan is in Asia.")
    assert loaded.samples[0].reference == "Tokyo"


def test_a_hugging_face_dataset_saved_as_jsonl_loads_the_same() -> None:
    from_disk = load_samples(DATA / "hf_dataset").samples
    from_jsonl = load_samples(DATA / "hf.jsonl").samples

    assert [s.model_copy(update={"id": ""}) for s in from_jsonl] == [
        s.model_copy(update={"id": ""}) for s in from_disk
    ]


def test_a_hugging_face_dataset_with_splits_asks_for_one_split() -> None:
    with pytest.raises(InputError, match=r"several splits \(test, train\); pass the folder"):
        load_samples(DATA / "hf_splits")


def test_field_maps_any_record_field_to_a_sample_field(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    record = {"key": 7, "prompt": "Capital of Japan?", "output": "Tokyo.", "docs": ["Tokyo."]}
    path.write_text(json.dumps({**record, "answer": "not this one"}) + "\n", encoding="utf-8")

    loaded = load_samples(
        path, {"id": "key", "question": "prompt", "answer": "output", "contexts": "docs"}
    )

    assert loaded.invalid == []
    [sample] = loaded.samples
    assert (sample.id, sample.question, sample.answer, sample.contexts) == (
        "7",
        "Capital of Japan?",
        "Tokyo.",
        ("Tokyo.",),
    )


def test_field_that_names_no_sample_field_is_refused_listing_them(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--field questoin=\.\.\. names no sample field; use"):
        load_samples(DATA / "ragjury.jsonl", {"questoin": "prompt"})


def test_submit_and_evaluate_take_field(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"prompt": "Capital of Japan?"}) + "\n", encoding="utf-8")
    db = str(tmp_path / "q.db")

    assert main(["submit", "--samples", str(path), "--db", db, "--field", "question=prompt"]) == 0
    code = main(
        [
            *("evaluate", str(path), "--out", str(tmp_path / "r.jsonl"), "--db", db),
            *("--field", "question=prompt", "--metrics", "keywords", "--field", "id=prompt"),
        ]
    )

    assert code == 4  # read and written; a sample with no answer is judged on nothing
    [record] = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert (record["id"], record["question"]) == ("Capital of Japan?", "Capital of Japan?")


def test_field_with_documents_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nAlpha.\n", encoding="utf-8")

    code = main(["submit", str(docs), "--db", str(tmp_path / "q.db"), "--field", "question=q"])

    assert code == 2
    assert "--field maps the fields of --samples records" in capsys.readouterr().err


# A CSV written by hand: the second row opens a quote it never closes, so the reader runs
# on into the third row until the quote that third row opens.
OPEN_QUOTE_CSV = """id,question,answer,must_contain
paris,Where is Paris?,Paris is in France.,France
rome,"Where is Rome?,Rome is in Italy.,Italy
oslo,Where is Oslo?,"Oslo is in Norway.",Norway
lima,Where is Lima?,Lima is in Peru.,Peru
"""


def test_a_quote_left_open_in_csv_names_the_lines_it_joined_and_the_other_rows_load(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hand.csv"
    path.write_text(OPEN_QUOTE_CSV, encoding="utf-8")

    loaded = load_samples(path)

    assert [sample.id for sample in loaded.samples] == ["paris", "lima"]
    [bad] = loaded.invalid
    assert bad.line == 3
    assert "a quote opened on line 3 is not closed where its cell ends" in bad.reason
    assert "lines 3-4 run together as one row" in bad.reason
    assert "close the quote on line 3" in bad.reason


def test_a_quote_left_open_that_closes_where_a_cell_ends_is_still_found(tmp_path: Path) -> None:
    # the stray quote closes exactly at a comma: valid CSV, but every line of the joined row
    # holds a whole row's cells, which one cell spread over lines does not
    path = tmp_path / "hand.csv"
    path.write_text(
        'question,answer\nWhere is Paris?,In France.\n"Where is Rome?,In Italy.\n'
        'Where is Oslo?",In Norway.\nWhere is Lima?,In Peru.\n',
        encoding="utf-8",
    )

    loaded = load_samples(path)

    assert [sample.question for sample in loaded.samples] == ["Where is Paris?", "Where is Lima?"]
    assert [(bad.line, "lines 3-4 run together" in bad.reason) for bad in loaded.invalid] == [
        (3, True)
    ]


def test_a_quote_left_open_to_the_end_of_a_csv_costs_only_the_rows_it_holds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hand.csv"
    path.write_text(
        'question,answer\nWhere is Paris?,In France.\n"Where is Rome?,In Italy.\n'
        "Where is Oslo?,In Norway.\n",
        encoding="utf-8",
    )

    loaded = load_samples(path)

    assert [sample.question for sample in loaded.samples] == ["Where is Paris?"]
    [bad] = loaded.invalid
    assert (bad.line, "lines 3-4 run together" in bad.reason) == (3, True)
    assert "unexpected end of data" in bad.reason


def test_cells_spread_over_lines_by_pandas_are_not_taken_for_a_quote_left_open(
    tmp_path: Path,
) -> None:
    frame = pd.DataFrame(
        [
            {"question": "Q1?", "answer": "First line, with a comma\nsecond, and third"},
            {"question": "Q2?", "answer": 'He said "yes",\nthen left'},
            {"question": "Q3, in two parts?\nthe second", "answer": "one\ntwo"},
        ]
    )
    frame.to_csv(tmp_path / "pandas.csv", index=False)

    loaded = load_samples(tmp_path / "pandas.csv")

    assert loaded.invalid == []
    assert [sample.answer for sample in loaded.samples] == list(frame["answer"])


def test_evaluate_judges_the_other_rows_of_a_csv_with_a_quote_left_open_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hand.csv"
    path.write_text(OPEN_QUOTE_CSV, encoding="utf-8")

    code = main(
        [
            *("evaluate", str(path), "--out", str(tmp_path / "r.jsonl")),
            *("--db", str(tmp_path / "q.db"), "--metrics", "keywords"),
        ]
    )

    assert code == 1
    judged = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [record["id"] for record in judged] == ["paris", "lima"]
    assert "line 3" in capsys.readouterr().err
