"""Reading what the reports show: result and dataset files, summaries, or the database.

A result record is what ``evaluate`` writes (``id``, ``question``, ``answer``, ``metrics``);
the reports may add ``contexts`` and ``reference`` to it, from ``--samples`` or the database.
A pair record is what ``generate`` writes (``critiques``, ``outcome``, ...).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio
import pydantic

from ragjury._json import JSONData, JSONObject, JSONValue, json_number, json_object
from ragjury.agents import custom_judge
from ragjury.errors import InputError
from ragjury.evaluation.summary import metric_summary
from ragjury.job_spec import EvaluationSpec
from ragjury.metrics import Metric, registry
from ragjury.prompts import Prompt
from ragjury.schemas import Failure, MetricResult, Sample, SampleScored
from ragjury.store import Job, RunRecord, Store, open_store, parse_location

Kind = Literal["evaluation", "dataset"]
_RECORD_FIELDS = ("outcome", "score", "passing", "reason", "error", "llm_calls")


@dataclass
class Loaded:
    """What one report shows: the records, the run summary if known, where they came from."""

    kind: Kind
    records: list[JSONObject]
    source: str
    summary: dict[str, JSONData] = field(default_factory=dict)


def iter_jsonl(path: Path) -> Iterator[JSONObject]:
    """The JSON objects of a JSONL file, one per non-empty line; a bad line names itself."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {str(path)!r}: {exc.strerror}; check the path") from exc
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record: JSONValue = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"{path}:{number}: not JSON ({exc.msg}); give the JSONL file that "
                    "`ragjury evaluate --out` or `ragjury generate --out` wrote"
                ) from exc
            if not isinstance(record, dict):
                raise InputError(f"{path}:{number}: expected a JSON object per line")
            yield record


def read_json(path: Path) -> dict[str, JSONData]:
    try:
        data: JSONValue = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {str(path)!r}: {exc.strerror}; check the path") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc.msg}); give the file `--summary` wrote") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, the run summary")
    return dict(data)


def kind_of(records: Sequence[Mapping[str, JSONData]], path: Path) -> Kind:
    if not records:
        raise InputError(f"{path} holds no record; give a results or dataset JSONL file")
    first = records[0]
    if isinstance(first.get("metrics"), dict):
        return "evaluation"
    if isinstance(first.get("critiques"), dict):
        return "dataset"
    raise InputError(
        f"{path}: the first record has neither 'metrics' (an evaluate result) nor 'critiques' "
        f"(a generated pair); its keys are {', '.join(sorted(first)) or 'none'}"
    )


def load_files(
    path: Path,
    *,
    summary: Path | None = None,
    samples: Path | None = None,
    rejected: Path | None = None,
) -> Loaded:
    """Results (with contexts joined from ``samples``) or a dataset (kept + ``rejected``)."""
    records = list(iter_jsonl(path))
    kind = "dataset" if rejected is not None else kind_of(records, path)
    if kind == "dataset":
        if rejected is not None:
            records.extend(iter_jsonl(rejected))
        for record in records:
            record.setdefault("outcome", "kept")
    elif samples is not None:
        join_samples(records, samples)
    loaded = Loaded(kind, records, str(path))
    if summary is not None:
        loaded.summary = read_json(summary)
    return loaded


def join_samples(records: Sequence[JSONObject], path: Path) -> None:
    """Add each result's contexts and reference from the samples file it was judged from."""
    from ragjury.evaluation.inputs import load_samples  # only this path needs the loaders

    by_id = {s.id: s for s in load_samples(path)}
    for record in records:
        sample = by_id.get(str(record.get("id")))
        if sample is not None:
            record["contexts"] = list(sample.contexts)
            record["reference"] = sample.reference


def scored_from_record(record: Mapping[str, JSONData]) -> SampleScored:
    """A result record as the pipeline's ``SampleScored``, so the summary code applies."""
    metrics: dict[str, MetricResult] = {}
    for name, entry in json_object(record.get("metrics")).items():
        if not isinstance(entry, Mapping):
            continue
        error = entry.get("error")
        try:
            metrics[name] = MetricResult(
                outcome=entry.get("outcome", "failed"),
                score=entry.get("score"),
                passing=entry.get("passing"),
                reason=entry.get("reason"),
                details={k: v for k, v in entry.items() if k not in _RECORD_FIELDS},
                error=Failure.model_validate(error) if isinstance(error, dict) else None,
                llm_calls=int(json_number(entry.get("llm_calls") or 0)),
            )
        except pydantic.ValidationError as exc:
            raise InputError(
                f"sample {record.get('id')!r}: metric {name!r} is not a result ragjury wrote: "
                f"{exc.errors()[0]['msg']}"
            ) from exc
    sample = Sample(
        id=str(record.get("id", "")),
        question=str(record.get("question") or ""),
        answer=record.get("answer"),
    )
    return SampleScored(sample=sample, metrics=metrics)


def metric_names(records: Sequence[Mapping[str, JSONData]]) -> list[str]:
    """The metrics the records hold: the installed ones in listing order, then the others
    (a run's judge files) in the order met."""
    seen = list(dict.fromkeys(name for r in records for name in json_object(r.get("metrics"))))
    known = [m for m in registry().names if m in seen]
    return known + [m for m in seen if m not in known]


def metric_stats(records: Sequence[Mapping[str, JSONData]]) -> dict[str, dict[str, JSONData]]:
    """Per metric: mean, median, pass rate, counts (``ragjury.evaluation.summary``)."""
    scored = [scored_from_record(r) for r in records]
    return {name: metric_summary(scored, name) for name in metric_names(records)}


def declarations(
    metrics: Iterable[str], judges: Sequence[Metric] = ()
) -> dict[str, dict[str, JSONData]]:
    """What a run's summary keeps of its metrics' declarations (a report made where a judge
    file or plugin is not installed still knows their scales)."""
    known = registry(judges)
    return {name: known[name].describe() for name in metrics if name in known}


def prompt_versions(
    prompts: Mapping[str, Prompt], metrics: Iterable[str], judges: Sequence[Metric] = ()
) -> dict[str, str]:
    """The version of each prompt the metrics used: the custom one's, else the built-in's,
    and each judge file's."""
    known = registry(judges)
    versions: dict[str, str] = {}
    for name in metrics:
        metric = known.get(name)
        if metric is not None:
            versions.update(metric.prompt_versions(prompts))
    return versions


def prompt_origins(
    prompts: Mapping[str, Prompt], metrics: Iterable[str], judges: Sequence[Metric] = ()
) -> dict[str, str]:
    """Where each prompt of :func:`prompt_versions` came from: ``built-in``, ``--prompt
    PATH`` (a custom template), or ``judge file PATH``."""
    known = registry(judges)
    origins: dict[str, str] = {}
    for name in metrics:
        metric = known.get(name)
        if metric is None:
            continue
        for prompt_name, prompt in metric.prompts_used(prompts).items():
            if metric.own_prompt is not None:
                origins[prompt_name] = prompt.origin
            elif prompt.origin == "builtin":
                origins[prompt_name] = "built-in"
            else:
                origins[prompt_name] = f"--prompt {prompt.origin}"
    return origins


async def records_from_db(db: str | Path, job: str | None, run: str | None = None) -> Loaded:
    """A job's records and the summary of its latest run (of the run ``run`` when given: the
    history page's report of each run), from the store at ``db`` (a SQLite file or a
    ``postgresql://`` URL).

    The one place the reports read the store (through :class:`~ragjury.store.Store`, so
    any store will do): ``job`` (default: the newest job) decides whether they are judged
    samples (with their contexts) or judged pairs."""
    location = parse_location(db)
    if location.path is not None and not await anyio.Path(location.path).exists():
        raise InputError(f"no database at {str(location.path)!r}; give the --db the run used")
    async with open_store(location) as store:
        shown = store.location  # a URL's password redacted
        if job is None:
            newest = await store.jobs(limit=1)
            if not newest:
                raise InputError(f"{shown} holds no job yet; run evaluate or generate first")
            found = newest[0]
        else:
            try:
                found = await store.job(job)
            except KeyError:
                jobs = await store.jobs(limit=5)
                known = ", ".join(f"{j.id} ({j.kind})" for j in jobs) or "none"
                raise InputError(f"no job {job!r} in {shown}; newest jobs: {known}") from None
        where = f"{shown} job {found.id}" + (f" run {run}" if run is not None else "")
        summary = await _run_summary(store, found.id, run)
        if found.kind == "generate":
            pairs = [record async for record in store.pairs([found.id])]
            return Loaded("dataset", pairs, where, summary)
        records = [record async for record in store.samples([found.id])]
        samples = {}
        async for text in store.scored(found.id):
            sample = SampleScored.model_validate_json(text).sample
            samples[sample.id] = sample
        for record in records:
            judged = samples.get(str(record["id"]))
            if judged is not None:
                record["contexts"] = list(judged.contexts)
                record["reference"] = judged.reference
        spec = EvaluationSpec.model_validate(found.options)
        custom = {
            name: Prompt(name=name, source=source, origin=f"(stored with job {found.id})")
            for name, source in spec.prompts.items()
        }
        judges = custom_judge.from_stored(spec.judges or ())
        metrics = spec.metrics
        summary.setdefault("prompt_versions", prompt_versions(custom, metrics, judges))
        summary.setdefault("prompt_origins", prompt_origins(custom, metrics, judges))
        summary.setdefault("declarations", declarations(metrics, judges))
        return Loaded("evaluation", records, where, summary)


async def _run_summary(store: Store, job: str, run_id: str | None = None) -> dict[str, JSONData]:
    """The summary of the newest finished run of ``job`` (or of its run ``run_id``), with its
    endpoint and times."""
    if run_id is None:
        run = await store.latest_run(job)
    else:
        run = next((r for r in await store.job_runs(job) if r.id == run_id), None)
        if run is None:
            raise InputError(f"no finished run {run_id!r} of job {job!r}")
    if run is None or run.summary is None:
        return {"job": job}
    summary: dict[str, JSONData] = dict(run.summary)
    summary.setdefault("model", run.settings.get("model"))
    summary.setdefault("base_url", run.settings.get("base_url"))
    summary.setdefault("started_at", run.started_at)
    summary.setdefault("finished_at", run.finished_at)
    return summary


@dataclass
class HistoryRun:
    """One run of a database as the history page shows it: which run of which job, when,
    what, its figures per metric and its gates. A finished run's figures are those its
    summary kept (the job's samples judged when it ended); a job no finished run names (one
    judged by ``serve``, or stopped before its summary) is one entry, ``run`` None, with
    figures tallied from its stored results."""

    job: str
    run: str | None
    kind: Kind
    finished_at: str | None
    model: str | None
    items: int
    resumed: bool = False
    """The run resumed a job an earlier run had started."""
    figures: dict[str, Mapping[str, JSONData]] = field(default_factory=dict)
    gates: list[Mapping[str, JSONData]] = field(default_factory=list)
    declarations: dict[str, Mapping[str, JSONData]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """What names the entry (and its report's file): the run, else the job."""
        return self.run if self.run is not None else self.job

    @property
    def gates_failed(self) -> list[Mapping[str, JSONData]]:
        return [g for g in self.gates if not g.get("passed")]


def _history_entry(job: Job, run: RunRecord) -> HistoryRun:
    summary = run.summary or {}
    figures = summary.get("metrics") if job.kind != "generate" else None
    gates, declared = summary.get("gates"), summary.get("declarations")
    model = run.settings.get("model")
    return HistoryRun(
        job=job.id,
        run=run.id,
        kind="dataset" if job.kind == "generate" else "evaluation",
        finished_at=run.finished_at,
        model=model if isinstance(model, str) else None,
        items=job.size,
        resumed=bool(summary.get("resumed")),
        figures={name: kept for name, kept in figures.items() if isinstance(kept, dict)}
        if isinstance(figures, dict)
        else {},
        gates=[g for g in gates if isinstance(g, dict)] if isinstance(gates, list) else [],
        declarations={name: kept for name, kept in declared.items() if isinstance(kept, dict)}
        if isinstance(declared, dict)
        else {},
    )


async def history_from_db(db: str | Path) -> tuple[str, list[HistoryRun]]:
    """Every finished run in the store at ``db``, oldest first (and a job no run names in
    its place), and the store's location as shown (a URL's password redacted)."""
    from ragjury.evaluation.summary import SummaryTally

    location = parse_location(db)
    if location.path is not None and not await anyio.Path(location.path).exists():
        raise InputError(f"no database at {str(location.path)!r}; give the --db the runs used")
    entries: list[tuple[str, HistoryRun]] = []
    when = ""
    async with open_store(location) as store:
        for job in reversed(await store.jobs()):
            runs = await store.job_runs(job.id)
            for run in runs:
                when = run.finished_at or when
                entries.append((when, _history_entry(job, run)))
            if runs:
                continue
            kind: Kind = "dataset" if job.kind == "generate" else "evaluation"
            found = HistoryRun(
                job=job.id, run=None, kind=kind, finished_at=None, model=None, items=job.size
            )
            if kind == "evaluation":
                tally = SummaryTally(list(EvaluationSpec.model_validate(job.options).metrics))
                async for text in store.scored(job.id):
                    tally.add(SampleScored.model_validate_json(text))
                found.figures = dict(tally.metric_figures())
            entries.append((when, found))
        ordered = sorted(entries, key=lambda entry: entry[0])  # stable: a job's runs in order
        return store.location, [entry for _, entry in ordered]
