"""``ragjury generate``: load, queue the documents as a job, work it, export, summarise.

The job lives in the database (``--db``): running the same command again resumes it. What
finished before costs no LLM call; if everything finished, it only writes the outputs again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Mapping

import structlog
from rich.console import Console

from ragjury._json import JSONData
from ragjury.commands._display import GenerationProgress, cost_text, summary_table
from ragjury.commands._run import (
    RecordedRun,
    budget_stop,
    propose_for_run,
    recorded_run,
    report_estimate,
    results_gate,
    retried_text,
    stopped_early,
)
from ragjury.commands._signals import run_job_until_signalled
from ragjury.config import GenerationOptions, Settings
from ragjury.estimate import estimate_generation
from ragjury.ingest import DocumentReader
from ragjury.llm.resolve import choose_llm
from ragjury.output import (
    FAILED_CHUNK_TABLE,
    RecordWriter,
    failed_chunk_record,
    output_format,
    pair_table,
    write_text_atomically,
)
from ragjury.persona_proposal import corpus_sample
from ragjury.personas import auto_personas
from ragjury.pipelines.generation import PROMPT_NAMES, generation_counts, report_of, summarise
from ragjury.prompts import load_overrides
from ragjury.report.audit import audit_dataset, summary_lines
from ragjury.report.audit_input import AuditRecord, audit_record
from ragjury.runner import JobRun, submit_documents
from ragjury.schemas import DocumentJudged, JuryEvent
from ragjury.store.base import Job

log = structlog.get_logger("ragjury.generate")


async def generate_command(args: argparse.Namespace, settings: Settings) -> int:
    options = settings.generate
    prompts = load_overrides(args.prompt, PROMPT_NAMES)
    console = Console(stderr=True)
    documents = DocumentReader(
        args.paths, globs=options.globs, text_field=options.text_field, id_field=options.id_field
    )

    if next(documents(), None) is None:
        where = ", ".join(str(p) for p in args.paths)
        reasons = "; ".join(f"{s.path}: {s.reason}" for s in documents.skipped[:5])
        console.print(
            f"[bold red]ragjury: nothing to do[/]: no readable documents in {where}"
            + (f" (skipped: {reasons})" if reasons else "")
            + (f"; the globs were {list(options.globs)}" if options.globs else "")
        )
        if args.summary is not None:  # a CI job reads it whatever the exit code
            skipped = [{"path": s.path, "reason": s.reason} for s in documents.skipped]
            empty = {"documents": 0, "documents_skipped": len(skipped), "skipped": skipped}
            text = json.dumps({**empty, "error": "no readable documents"}, indent=2) + "\n"
            write_text_atomically(args.summary, text)
        return 1
    auto = auto_personas(args.personas)
    if args.dry_run:
        estimate = estimate_generation(
            documents(),
            settings,
            prompts,
            proposed_personas=auto.count if auto else 0,
            persona_sample=corpus_sample(documents(), options) if auto else None,
        )
        return await report_estimate(estimate, settings, args, console)
    choose_llm(settings)  # says how to configure one, if none is
    formats = {
        option: output_format(path, args.format, option)
        for option, path in (
            ("--out", args.out),
            ("--rejected", args.rejected),
            ("--failed", args.failed),
        )
        if path is not None
    }
    # Open the outputs first: a path we cannot write fails before any LLM call.
    with contextlib.ExitStack() as stack:
        pairs = pair_table([options], personas=auto is not None)
        kept = stack.enter_context(RecordWriter(args.out, formats["--out"], pairs))
        rejected = (
            stack.enter_context(RecordWriter(args.rejected, formats["--rejected"], pairs))
            if args.rejected
            else None
        )
        failed = (
            stack.enter_context(RecordWriter(args.failed, formats["--failed"], FAILED_CHUNK_TABLE))
            if args.failed
            else None
        )
        async with recorded_run(settings, "generate") as run:
            if auto is not None:
                settings = await propose_for_run(
                    run.llm, run.store, settings, documents, auto.count, prompts, console
                )
            job = await submit_documents(run.store, settings, documents, prompts)
            skipped = [{"path": s.path, "reason": s.reason} for s in documents.skipped]
            for item in skipped:
                say = f"{item['path']}: skipped: {item['reason']}"
                log.warning("input_skipped", **item, say=say)
            result = await _work(run, settings, job, console)
            counts = await generation_counts(run.store, job.id)
            counts.documents = job.size
            counts.documents_submitted = counts.documents - result.unfinished
            kept_pairs: list[AuditRecord] = []
            async for record in run.store.pairs([job.id]):
                if record["outcome"] == "kept":
                    kept_pairs.append(audit_record(record, f"pair {record['id']}"))
                writer = kept if record["outcome"] == "kept" else rejected
                if writer is not None:
                    writer.write(record)
            if failed is not None:
                for report in counts.failed_chunks:
                    failed.write(failed_chunk_record(report))
            summary = summarise(counts, run.llm, wall_seconds=run.seconds, skipped=skipped)
            summary.update(result.summary())
            stop = budget_stop(
                run.llm,
                what="documents",
                submitted=counts.documents_submitted,
                total=counts.documents,
            )
            summary["stopped_by_budget"] = stop is not None
            budget_reason = run.llm.budget.reason
            audit = audit_dataset(
                kept_pairs, totals=(counts.documents, counts.chunks + counts.chunks_not_drafted)
            )
            summary["audit"] = audit  # what `ragjury audit` finds without the corpus
            await run.finish(summary, args.summary)
    _report(console, summary, args)
    lines = [line for line in summary_lines(audit) if not line.startswith("difficulty needs")]
    lines.append(f"difficulty, and the documents without a pair: {_audit_command(args, options)}")
    for line in lines:
        console.print(f"ragjury audit: {line}", soft_wrap=True, markup=False, highlight=False)
    code = stopped_early(
        console,
        settings,
        stop,
        result.unfinished,
        counts.documents,
        "document",
        budget_reached=budget_reason,
    )
    if code is not None:
        return code
    processed_nothing = counts.chunks == 0 or counts.chunks_failed == counts.chunks
    if processed_nothing:
        return 1
    gate = results_gate(console, "generate", failed=counts.failed, judged=counts.judged)
    return gate if gate is not None else 0


async def _work(run: RecordedRun, settings: Settings, job: Job, console: Console) -> JobRun:
    await run.store.note_run_job(run.run_id, job.id)
    counts = await generation_counts(run.store, job.id)
    counts.documents = job.size
    if not job.created:
        done = await run.store.counts([job.id])
        console.print(
            f"ragjury: resuming job {job.id} from {settings.db_shown}: {done['done']} document(s) "
            f"done, {done['queued'] + done['processing']} to go{retried_text(job, 'document')}",
            markup=False,
            highlight=False,
        )
    with GenerationProgress(console) as progress:
        progress.update(counts)

        async def on_event(job_id: str, event: JuryEvent) -> None:
            if isinstance(event, DocumentJudged):
                counts.add_report(report_of(event))
                progress.update(counts)

        return await run_job_until_signalled(run, settings, job, console, on_event)


def _audit_command(args: argparse.Namespace, options: GenerationOptions) -> str:
    """The ``ragjury audit`` command that reads the corpus as this run read it."""
    words = ["ragjury audit", str(args.out), "--corpus", *(str(p) for p in args.paths)]
    default = GenerationOptions()
    for name in ("text_field", "id_field", "chunk_size", "chunk_overlap"):
        if getattr(options, name) != getattr(default, name):
            words += [f"--{name.replace('_', '-')}", str(getattr(options, name))]
    words += [f"--glob {pattern!r}" for pattern in options.globs or ()]
    return " ".join(words + (["--whole-documents"] if options.whole_documents else []))


def _report(console: Console, summary: Mapping[str, JSONData], args: argparse.Namespace) -> None:
    if console.is_terminal:
        console.print(summary_table(summary))
    else:
        console.print(
            f"ragjury generate: kept {summary['kept']}, rejected {summary['rejected']}, "
            f"failed {summary['failed']} of {summary['pairs_drafted']} drafted pairs "
            f"({summary['chunks_failed']} of {summary['chunks']} chunks failed; "
            f"{summary['llm_calls']} LLM calls, {summary['prompt_tokens']}+"
            f"{summary['completion_tokens']} tokens, {cost_text(summary)}) -> {args.out}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
