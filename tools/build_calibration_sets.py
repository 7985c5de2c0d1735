"""Build the small labelled sets ``ragjury calibrate`` ships (``ragjury/calibration/data``).

Each set is a seeded, balanced subset (as many answers people passed as failed) of a public
human-labelled data set in ``../shared/data/calibration``, written as JSONL in ragjury's
sample field names with the person's verdict in ``human`` (true: a good answer, or a good
question). Run from the project root; the output is deterministic::

    python tools/build_calibration_sets.py ../shared/data/calibration

Each folder keeps the source's LICENSE and NOTICE; ``about.toml`` says what the set is, where
it came from and which judge it calibrates.
"""

from __future__ import annotations

import csv
import json
import random
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "ragjury" / "calibration" / "data"
PER_CLASS = 100
SEED = 29
Record = Mapping[str, object]


def _balanced(good: list[Record], bad: list[Record], rng: random.Random) -> list[Record]:
    chosen = rng.sample(good, PER_CLASS) + rng.sample(bad, PER_CLASS)
    rng.shuffle(chosen)
    return chosen


def _write(name: str, records: Iterable[Record], source: Path, keep: Iterable[str]) -> None:
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(record, ensure_ascii=False) + "\n" for record in records]
    (folder / "samples.jsonl").write_text("".join(lines), encoding="utf-8")
    for kept in keep:
        shutil.copyfile(source / kept, folder / kept)
    print(f"{name}: {len(lines)} records")


def begin(source: Path, rng: random.Random) -> None:
    """BEGIN (WoW part): a dialogue response and the knowledge snippet it should rest on."""
    with (source / "begin_dev_wow.tsv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    seen: set[str] = set()
    good: list[Record] = []
    bad: list[Record] = []
    for number, row in enumerate(rows, start=2):
        label, response = row["begin_label"].strip(), row["response"].strip()
        if label not in ("Fully attributable", "Not fully attributable") or response in seen:
            continue  # "Generic" answers claim nothing to attribute; repeats judged once
        seen.add(response)
        record = {
            "id": f"begin-wow-{number}",
            "question": row["message"].strip(),
            "answer": response,
            "contexts": [row["knowledge"].strip()],
            "human": label == "Fully attributable",
            "system": row["model_name"],
        }
        (good if record["human"] else bad).append(record)
    _write("begin-wow", _balanced(good, bad, rng), source, ["LICENSE", "NOTICE"])


def evouna(source: Path, rng: random.Random) -> None:
    """EVOUNA Natural Questions: a QA system's answer, the golden answer, a person's verdict.
    One system's answer per question, the system drawn at random."""
    systems = ("fid", "gpt35", "chatgpt", "gpt4", "newbing")
    data = json.loads((source / "NQ.json").read_text(encoding="utf-8"))
    good: list[Record] = []
    bad: list[Record] = []
    for number, row in enumerate(data, start=1):
        system = rng.choice(systems)
        label, answer = row.get(f"judge_{system}"), row.get(f"answer_{system}")
        if row.get("improper") or label is None or not answer:
            continue
        record = {
            "id": f"evouna-nq-{number}-{system}",
            "question": row["question"].strip(),
            "answer": answer.strip(),
            "reference": row["golden_answer"].strip(),
            "human": bool(label),
            "system": system,
        }
        (good if record["human"] else bad).append(record)
    _write("evouna-nq", _balanced(good, bad, rng), source, ["LICENSE"])


def squad(source: Path, rng: random.Random) -> None:
    """SQuAD 2.0: a question and a paragraph that answers it, or one that cannot."""
    queries = json.loads((source / "queries.json").read_text(encoding="utf-8"))["queries"]
    truth = json.loads((source / "ground_truth.json").read_text(encoding="utf-8"))
    good: list[Record] = []
    bad: list[Record] = []
    for query in queries:
        answerable = not truth[query["id"]]["is_impossible"]
        record = {
            "id": f"squad2-{query['id']}",
            "question": query["question"].strip(),
            "contexts": [query["context"].strip()],
            "human": answerable,
        }
        (good if answerable else bad).append(record)
    _write("squad2", _balanced(good, bad, rng), source, ["NOTICE"])


def cast(source: Path, rng: random.Random) -> None:
    """TREC CAsT: a follow-up as asked (leans on earlier turns) and a person's rewrite of it
    that stands alone; both of a turn are kept, so the set is balanced by construction."""
    pairs: list[tuple[Record, Record]] = []
    for year in ("2020_2020", "2021_2021"):
        topics = json.loads(
            (source / f"{year}_manual_evaluation_topics_v1.0.json").read_text(encoding="utf-8")
        )
        for topic in topics:
            for turn in topic["turn"]:
                raw = turn["raw_utterance"].strip()
                rewrite = turn["manual_rewritten_utterance"].strip()
                if raw == rewrite:
                    continue
                key = f"trec-cast-{year[:4]}-{topic['number']}-{turn['number']}"
                pairs.append(
                    (
                        {"id": f"{key}-raw", "question": raw, "human": False},
                        {"id": f"{key}-rewrite", "question": rewrite, "human": True},
                    )
                )
    chosen = [record for pair in rng.sample(pairs, PER_CLASS) for record in pair]
    rng.shuffle(chosen)
    _write("trec-cast", chosen, source, ["LICENSE"])


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "../shared/data/calibration")
    begin(root / "begin-wow", random.Random(SEED))
    evouna(root / "evouna-nq", random.Random(SEED))
    squad(root / "squad2-500", random.Random(SEED))
    cast(root / "trec-cast", random.Random(SEED))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
