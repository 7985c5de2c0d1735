"""``ragjury evaluate``: load samples, optionally ask the RAG target, judge, write, summarise."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import structlog
from rich.console import Console

from ragjury.commands._display import (
    EvaluationProgressBar,
    cost_text,
    evaluation_table,
    interval_text,
    retrieval_table,
)
from ragjury.commands._panel import check_batch_judges, panel_from, panel_lines, priced
from ragjury.commands._run import (
    EXIT_INVALID_INPUT,
    budget_stop,
    max_failed_gate,
    new_job_note,
    recorded_run,
    report_estimate,
    results_gate,
    stopped_early,
)
from ragjury.commands._signals import judge_samples
from ragjury.commands.early_signals import signal_kept
from ragjury.config import Settings
from ragjury.estimate import estimate_evaluation
from ragjury.evaluation.inputs import load_samples, parse_fields
from ragjury.evaluation.panel import panel_metrics
from ragjury.evaluation.panel_summary import PanelTally
from ragjury.evaluation.summary import SummaryTally, summarise
from ragjury.evaluation.targets import Target, target_from_spec, target_identity
from ragjury.llm.resolve import choose_llm
from ragjury.output import RecordWriter, output_format, sample_table
from ragjury.pipelines.evaluation import plan_metrics
from ragjury.prompts import load_overrides
from ragjury.report.gates import check_gates, check_thresholds
from ragjury.report.load import declarations
from ragjury.runner import submit_samples
from ragjury.runner.at_once import JudgeNow
from ragjury.schemas.evaluation import ScoredFigures
from ragjury.store import open_store
from ragjury.store.location import parse_location

if TYPE_CHECKING:
    from ragjury.calibration.correction import CorrectionTally

log = structlog.get_logger("ragjury.evaluate")


def _target(args: argparse.Namespace) -> Target | None:
    if not args.target:
        return None
    if not args.target.startswith(("http://", "https://")):
        # A console script does not have the working directory on sys.path; a user's
        # `--target myrag:answer` means the myrag.py beside them, as with uvicorn.
        sys.path.insert(0, os.getcwd())
        return target_from_spec(args.target)
    return target_from_spec(
        args.target,
        question_field=args.target_question_field,
        answer_field=args.target_answer_field,
        contexts_field=args.target_contexts_field,
        timeout=args.target_timeout,
    )


def _shown(figure: float | None, interval: list[float] | None) -> str:
    """A mean or rate for the one-line summary, with its 95% interval; '-' when no sample
    was scored."""
    return "-" if figure is None else f"{figure} {interval_text(interval)}".rstrip()


async def evaluate_command(args: argparse.Namespace, settings: Settings) -> int:
    console = Console(stderr=True)
    # each sample's JSON kept as the file is checked (beside a SQLite database, not in a /tmp
    # that may be held in memory): the job is stored from it
    where = parse_location(settings.db).path
    folder = None if where is None else where.resolve().parent
    loaded = load_samples(
        args.samples,
        parse_fields(args.fields),
        keep_encoded=not args.dry_run,
        keep_in=folder if folder is not None and folder.is_dir() else None,
    )
    invalid: list[dict[str, int | str]] = [
        {"line": r.line, "reason": r.reason} for r in loaded.invalid
    ]
    for item in invalid:
        console.print(
            f"ragjury: {args.samples}:{item['line']}: skipped: {item['reason']}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    if not loaded.count:
        console.print(f"ragjury: nothing to do: no valid sample in {args.samples}")
        return 1
    plan = plan_metrics(settings, loaded.filled, args.judge)
    metrics = plan.names
    prompts = load_overrides(args.prompt, plan.prompt_names())
    check_gates(args.fail_under, plan.metrics, metrics)  # before any LLM call
    # the calibration modules are loaded for --correct-with only (not before every first request)
    correction: CorrectionTally | None = None
    reviewed = None
    if args.correct_with is not None:
        from ragjury.calibration.review import is_reviewed, reviewed_labels

        if is_reviewed(args.correct_with.path):
            from ragjury.calibration.correction import corrected_metric

            async with open_store(settings.db) as labels_store:
                reviewed = await reviewed_labels(
                    labels_store,
                    corrected_metric(args.correct_with, metrics),
                    args.label_pass_at,
                    settings.db_shown,
                )
    panel = panel_from(args, settings, plan.chosen)
    labels = (args.correct_with, args.label_field, args.label_pass_at)
    if any(flag is not None for flag in labels):  # refuses --label-* without --correct-with
        from ragjury.calibration.correction import load_correction

        correction = load_correction(
            args.correct_with,
            metrics,
            {name: plan.metrics[name].scale for name in metrics},
            label_field=args.label_field,
            pass_at=args.label_pass_at,
            fields=parse_fields(args.fields),
            reviewed=reviewed,
        )
    if args.dry_run:
        estimate = estimate_evaluation(
            loaded,
            plan.chosen,
            settings,
            prompts,
            has_target=bool(args.target),
            panel=panel,
            judged=panel_metrics(plan.chosen),
        )
        batch_judges = frozenset(j.name for j in panel.judges if j.batch) if panel else frozenset()
        return await report_estimate(estimate, priced(settings, panel), args, console, batch_judges)
    await check_batch_judges(panel, settings)
    out_format = output_format(args.out, args.format)
    llm_needed = plan.needs_llm()
    if llm_needed:
        choose_llm(settings)  # says how to configure one, if none is
    if plan.needs_logprobs() and not settings.logprobs:
        settings = settings.model_copy(update={"logprobs": True})
    target = _target(args)
    if loaded.unanswered and target is None:
        console.print(  # for a person: a sentence on stderr, not a log record
            f"ragjury: warning: {loaded.unanswered} sample(s) have no answer, so the metrics "
            "that judge an answer will be not applicable for them; pass --target URL (or "
            "--target module:function) to have your RAG system answer them",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    async with recorded_run(settings, "evaluate", require_endpoint=llm_needed) as run:
        # a job that calls no LLM and no target is judged as it is stored: one bar from there
        at_once = target is None and not llm_needed
        with EvaluationProgressBar(console, loaded.count) as bar:
            job = await submit_samples(
                run.store,
                settings,
                loaded,
                metrics,
                prompts,
                judges=plan.judges,
                # the target answers only the samples without an answer: only then is it
                # part of what is judged
                target=target_identity(target)
                if target is not None and loaded.unanswered
                else None,
                panel=panel,
                # a SIGINT / SIGTERM while it is stored: the rest stored queued
                judge_now=JudgeNow(run.llm, signal_kept, bar.update) if at_once else None,
            )
            note = await new_job_note(run.store, job, "sample")
            if note is not None:
                console.print(note, soft_wrap=True, markup=False, highlight=False)
            try:
                result = await judge_samples(run, settings, job, console, loaded.count, target, bar)
            finally:
                if target is not None:
                    await target.aclose()
        with RecordWriter(args.out, out_format, sample_table(metrics)) as writer:
            async for text in run.store.sample_texts(job.id):
                writer.write_json(text)
        tally = SummaryTally(metrics)  # one judged sample at a time: flat memory
        panel_tally = PanelTally(panel, panel_metrics(plan.chosen)) if panel is not None else None
        answered_by_target = 0
        async for text in run.store.scored(job.id):
            scored = ScoredFigures.model_validate_json(text)
            tally.add(scored)
            if panel_tally is not None:
                panel_tally.add(scored)
            if correction is not None:
                correction.add(scored.sample.id, scored.metrics.get(correction.metric))
            answered_by_target += scored.answered_by_target
        summary: dict[str, Any] = summarise(
            tally,
            metrics,
            run.llm.usage,
            invalid=invalid,
            wall_seconds=run.seconds,
            model=settings.model,
        )
        summary["answered_by_target"] = answered_by_target
        if panel_tally is not None:
            panel_tally.widen(summary["metrics"])
            summary["panel"] = panel_tally.figures(run.llm.usage.by_stage())
        if correction is not None:
            summary["corrected"] = {correction.metric: correction.figures()}
        summary.update(result.summary())
        total = loaded.count
        stop = budget_stop(
            run.llm, what="samples", submitted=total - result.unfinished, total=total
        )
        summary["samples_not_submitted"] = result.unfinished
        summary["stopped_by_budget"] = stop is not None
        budget_reason = run.llm.budget.reason
        from ragjury.report.ci import run_details, write_ci_files  # after the run

        summary.update(run_details(args.samples, settings.base_url, prompts, metrics, plan.judges))
        summary["declarations"] = declarations(metrics, plan.judges)
        figures = summary["metrics"].values()
        failed = sum(m["failed"] for m in figures)
        judged = failed + sum(m["scored"] + m["not_applicable"] for m in figures)
        gates = [
            *check_thresholds(summary["metrics"], args.fail_under, args.gate_on),
            *max_failed_gate(failed, args.max_failed),
        ]
        # kept with the run, so `report --history` shows which runs' gates failed
        summary["gates"] = [
            {"name": g.name, "passed": g.passed, "message": g.message, "metric": g.metric}
            for g in gates
        ]
        await run.finish(summary, args.summary)
        if args.junit is not None or args.markdown is not None:
            # only these files need every record at once (a JUnit tree is built whole)
            records = [record async for record in run.store.samples([job.id])]
            await anyio.to_thread.run_sync(
                write_ci_files, args.junit, args.markdown, summary, records, gates
            )
    if console.is_terminal:
        console.print(evaluation_table(summary))
        at_k = retrieval_table(summary)
        if at_k is not None:
            console.print(at_k)
    else:
        parts = [
            f"{name} mean {_shown(m['mean'], m.get('mean_interval'))} "
            f"pass {_shown(m['pass_rate'], m.get('pass_rate_interval'))} "
            f"(failed {m['failed']}"
            + (f", not applicable {m['not_applicable']}" if m.get("not_applicable") else "")
            + ")"
            + "".join(
                f", hit@{k} {f['hit_rate']} mrr@{k} {f['mrr']}"
                for k, f in (m.get("at_k") or {}).items()
            )
            for name, m in summary["metrics"].items()
        ]
        console.print(
            f"ragjury evaluate: {summary['samples']} samples, {len(invalid)} invalid; "
            + "; ".join(parts)
            + f"; {summary['llm_calls']} LLM calls, {summary['prompt_tokens']}+"
            f"{summary['completion_tokens']} tokens, {cost_text(summary)} -> {args.out}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    totals = summary.get("job_totals")
    if totals is not None:
        console.print(
            f"ragjury evaluate: resumed job {summary['job']}: this run judged "
            f"{summary['items_done_now']} sample(s) with {summary['llm_calls']} LLM calls; "
            f"the job over {totals['runs']} runs: {summary['samples']} samples, "
            f"{totals['llm_calls']} LLM calls, {totals['prompt_tokens']}+"
            f"{totals['completion_tokens']} tokens"
            + ("" if totals["cost_usd"] is None else f", ${totals['cost_usd']:.4f}"),
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    for line in panel_lines(summary):
        console.print(f"ragjury evaluate: {line}", soft_wrap=True, markup=False, highlight=False)
    for metric, corrected in (summary.get("corrected") or {}).items():
        from ragjury.calibration.correction import correction_lines

        for line in correction_lines(metric, corrected):
            console.print(
                f"ragjury evaluate: {line}", soft_wrap=True, markup=False, highlight=False
            )
    code = stopped_early(
        console,
        settings,
        stop,
        result.unfinished,
        loaded.count,
        "sample",
        budget_reached=budget_reason,
    )
    if code is not None:
        return code
    not_applicable = sum(m["not_applicable"] for m in figures)
    gate = results_gate(
        console, "evaluate", gates, failed=failed, judged=judged, not_applicable=not_applicable
    )
    if gate is not None:
        return gate
    return EXIT_INVALID_INPUT if invalid else 0
