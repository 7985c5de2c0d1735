"""``ragjury calibrate``: how often a judge agrees with people, measured on labelled samples.

It is an evaluation run like any other (the same agents, step cache, budgets, ``--dry-run``
and resume: the job is an ordinary evaluation job of the labelled samples, so running the
command again finishes it or reads it back at no cost), followed by the comparison of each
judged sample with its label. The figures are kept with the run's summary in the database
(``calibration``), printed as a table or ``--json``, and written with ``--summary``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from rich.console import Console

from ragjury.calibration import LABEL_FIELD
from ragjury.calibration.labels import LabelledSamples, load_labelled
from ragjury.calibration.results import SUMMARY_KEY, Calibration, calibrate, judge_results
from ragjury.calibration.review import is_reviewed, reviewed_labels
from ragjury.calibration.sets import bundled_set, bundled_sets
from ragjury.commands._calibration_display import (
    calibration_tables,
    sets_notes,
    sets_table,
)
from ragjury.commands._panel import panel_from, panel_lines, panel_name, priced
from ragjury.commands._run import (
    EXIT_INVALID_INPUT,
    EXIT_NOTHING_JUDGED,
    RecordedRun,
    budget_stop,
    recorded_run,
    report_estimate,
    stopped_early,
)
from ragjury.commands._signals import judge_samples
from ragjury.config import Settings
from ragjury.errors import ConfigurationError, InputError
from ragjury.estimate import estimate_evaluation
from ragjury.evaluation.inputs import parse_fields
from ragjury.evaluation.panel import panel_metrics
from ragjury.evaluation.panel_summary import PanelTally
from ragjury.evaluation.summary import summarise
from ragjury.llm.resolve import choose_llm
from ragjury.metrics import Metric
from ragjury.pipelines.evaluation import MetricPlan, plan_metrics
from ragjury.prompts import Prompt, load_overrides
from ragjury.report.ci import run_details
from ragjury.report.load import declarations
from ragjury.runner import JobRun, scored_samples, submit_samples
from ragjury.schemas import SampleScored
from ragjury.schemas.panel import Panel
from ragjury.store import open_store
from ragjury.store.base import Job


def _source(args: argparse.Namespace) -> tuple[Path, str, str | None]:
    """The labelled file, the name shown for it, and the metric it calibrates by default."""
    found = bundled_set(args.source)
    if found is not None:
        return found.path, found.name, found.metric
    path = Path(args.source)
    if not path.exists():
        names = ", ".join(s.name for s in bundled_sets())
        raise InputError(
            f"{args.source!r} is neither a bundled set nor a file; the bundled sets are "
            f"{names} (`ragjury calibrate --list`), or give the path of your labelled samples"
        )
    return path, str(path), None


def _plan(
    settings: Settings, args: argparse.Namespace, labelled: LabelledSamples, metric: str
) -> tuple[MetricPlan, Metric]:
    plan = plan_metrics(settings, labelled.filled, args.judge, requested=[metric])
    if plan.names != (metric,):
        raise ConfigurationError(
            f"--metric {metric}: calibrate one judge at a time; it stands for "
            f"{', '.join(plan.names)}: run calibrate once for each"
        )
    chosen = plan.metrics[metric]
    if chosen.threshold is None:
        raise ConfigurationError(
            f"--metric {metric}: it has no pass mark ({chosen.rule()}), so there is no "
            "verdict to compare with a person's; calibrate a judge that passes or fails"
        )
    missing = [name for name in chosen.inputs if name not in labelled.filled]
    if missing:
        raise ConfigurationError(
            f"--metric {metric} needs {', '.join(chosen.inputs)} in each sample, and the "
            f"samples of {labelled.source} have no {', '.join(missing)}; calibrate it on "
            "samples that have them (or map a field with --field NAME=SOURCE)"
        )
    return plan, chosen


async def calibrate_command(args: argparse.Namespace, settings: Settings) -> int:
    console = Console(stderr=True)
    if args.list:
        return _list(args)
    if not args.source:
        raise ConfigurationError(
            "give a bundled set or your labelled samples, e.g. `ragjury calibrate begin-wow` "
            "or `ragjury calibrate labels.jsonl --metric faithfulness`; `ragjury calibrate "
            "--list` names the bundled sets"
        )
    reviewed = is_reviewed(args.source)
    path, shown, default_metric = (Path(args.source), "", None) if reviewed else _source(args)
    metric_name = args.metric or default_metric
    if not metric_name:
        raise ConfigurationError(
            f"--metric: name the judge to calibrate on {shown or 'the reviewed labels'}, e.g. "
            "--metric faithfulness "
            "(`ragjury metrics` lists them)"
        )
    if args.resamples < 1:
        raise ConfigurationError(f"--resamples {args.resamples}: give at least 1, e.g. 1000")
    if reviewed:
        async with open_store(settings.db) as store:
            found = await reviewed_labels(store, metric_name, args.label_pass_at, settings.db_shown)
        shown = found.source
    else:
        found = load_labelled(
            path,
            args.label_field or LABEL_FIELD,
            fields=parse_fields(args.fields),
            pass_at=args.label_pass_at,
            shown=shown,
        )
    labelled = found.drawn(args.sample, args.seed)
    for record in labelled.invalid:
        console.print(
            f"ragjury: {shown}:{record.line}: skipped: {record.reason}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    plan, metric = _plan(settings, args, labelled, metric_name)
    prompts = load_overrides(args.prompt, plan.prompt_names())
    samples = labelled.samples
    panel = panel_from(args, settings, plan.chosen)
    judged = panel_metrics(plan.chosen)
    if args.dry_run:
        estimate = estimate_evaluation(
            samples,
            plan.chosen,
            settings,
            prompts,
            has_target=False,
            panel=panel,
            judged=judged,
            command="calibrate",
        )
        return await report_estimate(estimate, priced(settings, panel), args, console)
    if args.submit:
        return await _submit(settings, labelled, plan, prompts, panel, console)
    llm_needed = plan.needs_llm()
    if llm_needed:
        choose_llm(settings)  # says how to configure one, if none is
    if plan.needs_logprobs() and not settings.logprobs:
        settings = settings.model_copy(update={"logprobs": True})
    async with recorded_run(settings, "calibrate", require_endpoint=llm_needed) as run:
        job = await submit_samples(
            run.store, settings, samples, plan.names, prompts, judges=plan.judges, panel=panel
        )
        result = await judge_samples(run, settings, job, console, len(samples))
        scored = await scored_samples(run.store, job.id)
        results = {s.sample.id: s.metrics[metric.name] for s in scored if metric.name in s.metrics}
        calibration = calibrate(
            labelled,
            results,
            metric,
            settings.evaluate,
            # the backend's: a local model's file name
            model=run.llm.settings.model if panel is None else panel_name(panel),
            seed=args.seed,
            resamples=args.resamples,
        )
        summary = _summary(run, settings, job, result, scored, plan, prompts, path)
        if panel is not None:
            by_judge = {
                judge.name: calibrate(
                    labelled,
                    judge_results(results, judge.name),
                    metric,
                    settings.evaluate,
                    model=judge.model,
                    seed=args.seed,
                    resamples=args.resamples,
                )
                for judge in panel.judges
            }
            calibration = calibration.model_copy(update={"by_judge": by_judge})
            tally = PanelTally(panel, judged)
            for sample in scored:
                tally.add(sample)
            metrics_summary = summary["metrics"]
            assert isinstance(metrics_summary, dict)  # summarise's figures by metric
            tally.widen(metrics_summary)
            summary["panel"] = tally.figures(run.llm.usage.by_stage())
        summary[SUMMARY_KEY] = calibration.model_dump(mode="json")
        stop = budget_stop(
            run.llm, what="samples", submitted=len(samples) - result.unfinished, total=len(samples)
        )
        summary["stopped_by_budget"] = stop is not None
        budget_reason = run.llm.budget.reason
        await run.finish(summary, args.summary)
    _show(args, calibration, summary)
    for line in panel_lines(summary):
        console.print(f"ragjury calibrate: {line}", soft_wrap=True, markup=False, highlight=False)
    code = stopped_early(
        console,
        settings,
        stop,
        result.unfinished,
        len(samples),
        "sample",
        budget_reached=budget_reason,
    )
    if code is not None:
        return code
    if calibration.agreement is None:
        console.print(
            f"ragjury calibrate: nothing was compared: of {calibration.drawn} sample(s), "
            f"{calibration.failed} failed and {calibration.not_applicable} were not applicable "
            "(each says why in `ragjury export --results`)",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        return EXIT_NOTHING_JUDGED
    return EXIT_INVALID_INPUT if labelled.invalid else 0


async def _submit(
    settings: Settings,
    labelled: LabelledSamples,
    plan: MetricPlan,
    prompts: Mapping[str, Prompt],
    panel: Panel | None,
    console: Console,
) -> int:
    """Queue the job this command would run (the same job, so the command without
    ``--submit`` finds it judged) for ``ragjury serve`` workers, and say what comes next."""
    async with open_store(settings.db, concurrency=settings.concurrency) as store:
        job = await submit_samples(
            store, settings, labelled.samples, plan.names, prompts, judges=plan.judges, panel=panel
        )
        counts = await store.counts([job.id])
    said = (
        f"queued {len(labelled.samples)} labelled sample(s) for {', '.join(plan.names)} as "
        f"job {job.id} in {settings.db_shown}"
        if job.created
        else f"the same work is already job {job.id} in {settings.db_shown} ({counts['done']} "
        f"done, {counts['queued'] + counts['processing']} to go, {counts['failed']} failed); "
        "nothing added"
    )
    console.print(
        f"ragjury calibrate: {said}; `ragjury serve --db ...` judges them (give it the same "
        "--model and --base-url), then run this command again without --submit for the "
        "figures",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    return 0


def _summary(
    run: RecordedRun,
    settings: Settings,
    job: Job,
    result: JobRun,
    scored: list[SampleScored],
    plan: MetricPlan,
    prompts: Mapping[str, Prompt],
    path: Path,
) -> dict[str, object]:
    """What an evaluate run's summary holds, so a calibration's job reads like any other."""
    summary: dict[str, object] = dict(
        summarise(
            scored,
            plan.names,
            run.llm.usage,
            invalid=[],
            wall_seconds=run.seconds,
            model=settings.model,
        )
    )
    summary.update(result.summary())
    summary.update(run_details(path, settings.base_url, prompts, plan.names, plan.judges))
    summary["declarations"] = declarations(plan.names, plan.judges)
    return summary


def _show(
    args: argparse.Namespace, calibration: Calibration, summary: Mapping[str, object]
) -> None:
    if args.json:
        print(calibration.model_dump_json(indent=2))
        return
    console = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 150)
    for table in calibration_tables(calibration, summary):
        console.print(table)


def _list(args: argparse.Namespace) -> int:
    sets = bundled_sets()
    if args.json:
        shown = [s.model_dump(mode="json", exclude={"path"}) for s in sets]
        print(json.dumps(shown, indent=2, ensure_ascii=False))
        return 0
    # piped, a table as wide as its rows (rich would take 80 columns); else the terminal's
    console = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 150)
    console.print(sets_table(sets))
    for note in sets_notes(sets):
        console.print(note, highlight=False)
    return 0
