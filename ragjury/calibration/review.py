"""People review the judges' verdicts: ``ragjury review export`` and ``review import``.

Export writes one review item per judged sample and metric, with the judge's score, verdict
and reason beside the sample, as Label Studio tasks (JSON, with the judge's verdict as a
prediction a reviewer accepts or changes, and the labelling configuration to paste into the
project) or as CSV with an empty ``human`` column for a spreadsheet. Import reads the same
shapes back: Label Studio's JSON export (tasks with their annotations, or its JSON-MIN
form), or the CSV/JSONL with the column filled in; every label is checked as ``calibrate``
checks one, and items nobody labelled are counted and skipped.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ragjury.calibration import LABEL_FIELD
from ragjury.calibration.labels import LabelledSamples, labelled_samples, parse_label
from ragjury.errors import InputError
from ragjury.evaluation.inputs import InvalidRecord
from ragjury.schemas import Sample
from ragjury.store.base import Labels

REVIEWED = "reviewed"
"""What ``calibrate`` and ``--correct-with METRIC=`` take for the labels imported into --db."""
VERDICT = "verdict"
"""The name of the reviewer's choice in the Label Studio configuration."""
SAMPLE_FIELDS = (
    "id",
    "question",
    "answer",
    "contexts",
    "reference",
    "context_ids",
    "reference_contexts",
    "reference_context_ids",
)
CSV_COLUMNS = (
    "id",
    "metric",
    "question",
    "answer",
    "contexts",
    "reference",
    "judge_score",
    "judge_passing",
    "judge_reason",
    LABEL_FIELD,
)
LABEL_CONFIG = """<View>
  <Header value="$metric: is the judge right? It said $judge_verdict ($judge_score)"/>
  <Text name="judge_reason" value="$judge_reason"/>
  <Header value="Question"/>
  <Text name="question" value="$question"/>
  <Header value="Retrieved contexts"/>
  <Text name="context_text" value="$context_text"/>
  <Header value="Reference"/>
  <Text name="reference" value="$reference"/>
  <Header value="Answer"/>
  <Text name="answer" value="$answer"/>
  <Choices name="verdict" toName="answer" choice="single" required="true">
    <Choice value="pass"/>
    <Choice value="fail"/>
  </Choices>
</View>
"""


@dataclass(frozen=True)
class ReviewItem:
    """One judged sample and metric, as a reviewer sees it."""

    metric: str
    sample: dict[str, object]
    score: float | None
    passing: bool | None
    reason: str | None

    @property
    def verdict(self) -> str:
        if self.passing is None:
            return "no verdict"
        return "pass" if self.passing else "fail"


def review_items(
    records: Iterable[Mapping[str, object]], metrics: Sequence[str] = ()
) -> list[ReviewItem]:
    """The scored verdicts of evaluate result records (of ``metrics``, else every metric
    with a verdict), record by record."""
    items: list[ReviewItem] = []
    seen: set[str] = set()
    for record in records:
        judged = record.get("metrics")
        if not isinstance(judged, Mapping):
            raise InputError(
                f"record {record.get('id')!r} has no 'metrics': review exports evaluate "
                "results (`ragjury evaluate --out`, or a job in --db)"
            )
        sample = {k: record[k] for k in SAMPLE_FIELDS if record.get(k) not in (None, [], "")}
        for metric, result in judged.items():
            seen.add(str(metric))
            if metrics and metric not in metrics:
                continue
            if not isinstance(result, Mapping) or result.get("outcome") != "scored":
                continue
            passing = result.get("passing")
            if passing is None and not metrics:
                continue  # informational (no pass mark): nothing for a person to confirm
            score, reason = result.get("score"), result.get("reason")
            items.append(
                ReviewItem(
                    str(metric),
                    sample,
                    float(score) if isinstance(score, int | float) else None,
                    passing if isinstance(passing, bool) else None,
                    str(reason) if reason is not None else None,
                )
            )
    unknown = [m for m in metrics if m not in seen]
    if unknown:
        raise InputError(
            f"--metric {', '.join(unknown)}: not judged in these results (they have "
            f"{', '.join(sorted(seen)) or 'no metric'}); name one of those"
        )
    return items


CRITIC_METRICS = {"groundedness": "question_groundedness", "standalone": "question_standalone"}
"""The generation critics that are also metrics of a sample's question (so ``calibrate``
can judge a reviewed pair again): a pair's critique under its metric's name. The relevance
critic has no such metric (it rates a question for an audience), so it is not exported."""


def pair_review_items(
    records: Iterable[Mapping[str, object]],
    pass_marks: Mapping[str, float],
    metrics: Sequence[str] = (),
) -> list[ReviewItem]:
    """The critics' verdicts on generated pairs (``generate --out``/``--rejected`` records,
    or a generate job's), as review items of the critics' metrics (``metrics``, else every
    one in :data:`CRITIC_METRICS`): the pair as a sample (its question, answer and the
    chunk(s) it was drafted from as contexts), the rating as the score, passing at the
    metric's mark in ``pass_marks``, and the critic's rationale as the reason."""
    unknown = [m for m in metrics if m not in CRITIC_METRICS.values()]
    if unknown:
        raise InputError(
            f"--metric {', '.join(unknown)}: generated pairs are reviewed for "
            f"{', '.join(CRITIC_METRICS.values())} (their critics' verdicts); name one of those"
        )
    items: list[ReviewItem] = []
    for record in records:
        critiques = record.get("critiques")
        if not isinstance(critiques, Mapping):
            raise InputError(
                f"record {record.get('id')!r} has no 'critiques': give what `ragjury generate` "
                "wrote (or its job in --db)"
            )
        contexts = record.get("contexts") or [record.get("context")]
        sample: dict[str, object] = {
            "id": record.get("id"),
            "question": record.get("question"),
            "answer": record.get("answer"),
            "contexts": [str(c) for c in contexts if c] if isinstance(contexts, list) else [],
        }
        for criterion, metric in CRITIC_METRICS.items():
            critique = critiques.get(criterion)
            if (metrics and metric not in metrics) or not isinstance(critique, Mapping):
                continue
            rating, rationale = critique.get("rating"), critique.get("rationale")
            if not isinstance(rating, int | float):
                continue  # the critic's output never validated: no verdict to confirm
            items.append(
                ReviewItem(
                    metric,
                    sample,
                    float(rating),
                    rating >= pass_marks[metric],
                    None if rationale is None else str(rationale),
                )
            )
    return items


def label_studio_tasks(items: Sequence[ReviewItem]) -> list[dict[str, object]]:
    """Label Studio tasks: the sample and the judge's figures as ``data`` (the contexts both
    as one text to show and as the list to read back), the judge's verdict as a
    prediction."""
    tasks: list[dict[str, object]] = []
    for item in items:
        contexts = item.sample.get("contexts") or []
        shown = "\n\n---\n\n".join(str(c) for c in contexts) if isinstance(contexts, list) else ""
        data = {
            **item.sample,
            "metric": item.metric,
            "context_text": shown,
            "reference": item.sample.get("reference") or "",
            "judge_score": item.score,
            "judge_verdict": item.verdict,
            "judge_reason": item.reason or "",
        }
        task: dict[str, object] = {"data": data}
        if item.passing is not None:
            choice = {"choices": [item.verdict]}
            result = {"from_name": VERDICT, "to_name": "answer", "type": "choices", "value": choice}
            task["predictions"] = [{"model_version": f"ragjury {item.metric}", "result": [result]}]
        tasks.append(task)
    return tasks


def csv_text(items: Sequence[ReviewItem]) -> str:
    """The items as CSV, the contexts as a JSON list, the ``human`` column empty."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for item in items:
        contexts = item.sample.get("contexts")
        writer.writerow(
            [
                item.sample.get("id"),
                item.metric,
                item.sample.get("question", ""),
                item.sample.get("answer", ""),
                json.dumps(contexts, ensure_ascii=False) if contexts else "",
                item.sample.get("reference") or "",
                "" if item.score is None else item.score,
                "" if item.passing is None else item.verdict,
                item.reason or "",
                "",
            ]
        )
    return out.getvalue()


@dataclass(frozen=True)
class ImportedLabel:
    metric: str
    sample: Sample
    label: bool | int
    raw: str
    labelled_by: str | None = None


@dataclass
class Imported:
    source: str
    labels: list[ImportedLabel] = field(default_factory=list)
    unlabelled: int = 0


def read_review(
    path: Path, *, label_field: str = LABEL_FIELD, metric: str | None = None
) -> Imported:
    """The labels of a reviewed file (see the module docstring); ``metric`` for rows that do
    not say theirs."""
    found = Imported(str(path))
    for where, row, (raw, by) in _labelled_rows(path, label_field):
        name = row.get("metric") or metric
        if not isinstance(name, str) or not name:
            raise InputError(
                f"{where}: no 'metric' says which judge this label is for; pass --metric NAME"
            )
        if raw in (None, ""):
            found.unlabelled += 1
            continue
        label = parse_label(raw)
        if label is None:
            raise InputError(
                f"{where}: label {raw!r} is not a verdict; give pass/fail (true/false, yes/no, "
                "1/0) or a whole rating from 1 to 5"
            )
        found.labels.append(ImportedLabel(name, _sample(row, where), label, str(raw).strip(), by))
    if not found.labels and not found.unlabelled:
        raise InputError(f"{path}: no review item; give the file `ragjury review export` wrote")
    return found


Verdict = tuple[object, str | None]
"""A label (None: not labelled) and who gave it, where known."""


def _labelled_rows(
    path: Path, label_field: str
) -> Iterator[tuple[str, dict[str, object], Verdict]]:
    """(where, the item's fields, its verdict) for each item of the file."""
    if not path.is_file():
        raise InputError(f"no file {str(path)!r}; give the reviewed file (JSON, JSONL or CSV)")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as handle:
            for line, row in enumerate(csv.DictReader(handle), 2):
                yield f"{path}:{line}", dict(row), (row.get(label_field), _by(row))
        return
    if suffix == ".jsonl":
        with path.open(encoding="utf-8") as handle:
            for line, text in enumerate(handle, 1):
                if not text.strip():
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}:{line}: not JSON ({exc.msg})") from exc
                if not isinstance(record, dict):
                    raise InputError(f"{path}:{line}: expected a JSON object per line")
                yield f"{path}:{line}", record, (record.get(label_field), _by(record))
        return
    if suffix != ".json":
        raise InputError(
            f"cannot read {str(path)!r}: unknown suffix {path.suffix!r}; give Label Studio's "
            "JSON export, or the CSV or JSONL with the label column filled in"
        )
    try:
        tasks = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc.msg}); give Label Studio's JSON export") from exc
    if not isinstance(tasks, list):
        raise InputError(f"{path}: expected a JSON list of tasks, as Label Studio exports")
    for n, task in enumerate(tasks, 1):
        where = f"{path} task {n}"
        if not isinstance(task, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(task).__name__}")
        data = task.get("data")
        if isinstance(data, dict):  # the full export: the label is in the annotations
            yield where, data, _annotated(task.get("annotations"), where)
        else:  # JSON-MIN: the task's fields and the choice by its control's name
            yield where, task, (task.get(VERDICT, task.get(label_field)), _by(task))


def _annotated(annotations: object, where: str) -> Verdict:
    """The verdict of the last annotation not cancelled (None when there is none)."""
    if not isinstance(annotations, list):
        return None, None
    for annotation in reversed(annotations):
        if not isinstance(annotation, dict) or annotation.get("was_cancelled"):
            continue
        for result in annotation.get("result") or []:
            if not isinstance(result, dict) or result.get("from_name") != VERDICT:
                continue
            value = result.get("value") or {}
            choices = value.get("choices") if isinstance(value, dict) else None
            if isinstance(choices, list) and len(choices) == 1:
                return choices[0], _by(annotation)
            if isinstance(value, dict) and "rating" in value:
                return value["rating"], _by(annotation)
            raise InputError(f"{where}: the verdict {value!r} is not one choice or rating")
    return None, None


def _sample(row: Mapping[str, object], where: str) -> Sample:
    fields: dict[str, object] = {}
    for name in SAMPLE_FIELDS:
        value = row.get(name)
        if value in (None, ""):
            continue
        if name.endswith(("contexts", "_ids")) and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                value = [value]
        fields[name] = value
    try:
        return Sample.model_validate(fields)
    except ValueError as exc:
        raise InputError(f"{where}: not a sample ({exc}); keep the exported columns") from exc


def _by(row: Mapping[str, object]) -> str | None:
    who = row.get("annotator") or row.get("completed_by")
    return None if who is None else str(who)


def labelled_from(
    stored: Iterable[tuple[Sample, str]], source: str, pass_at: int | None
) -> LabelledSamples:
    """The labels stored by ``review import`` (sample, label as given) as ``calibrate`` and
    ``--correct-with`` read a labelled file."""
    rows: list[tuple[int, Sample, bool | int]] = []
    invalid: list[InvalidRecord] = []
    for n, (sample, raw) in enumerate(stored, 1):
        label = parse_label(raw)
        if label is None:  # checked on import: only a hand-edited database gets here
            invalid.append(InvalidRecord(n, f"label {raw!r} is not a verdict"))
            continue
        rows.append((n, sample, label))
    if not rows:
        raise InputError(
            f"{source}: no label for this judge; import the reviewed file first with "
            "`ragjury review import FILE --db ...`"
        )
    return labelled_samples(source, LABEL_FIELD, rows, invalid, pass_at)


def is_reviewed(source: str | Path) -> bool:
    """``reviewed`` names the imported labels, unless a file of that name is there."""
    return str(source) == REVIEWED and not Path(source).exists()


async def reviewed_labels(
    store: Labels, metric: str, pass_at: int | None, shown: str
) -> LabelledSamples:
    """The labels ``review import`` stored for ``metric`` in ``store`` (``shown``)."""
    stored = await store.labels(metric)
    source = f"the {metric} labels reviewed in {shown}"
    return labelled_from(
        ((Sample.model_validate_json(x.sample), x.label) for x in stored), source, pass_at
    )
