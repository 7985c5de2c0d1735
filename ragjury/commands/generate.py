"""``ragjury generate``: load, run the pipeline, write the outputs and the summary."""

from __future__ import annotations

import argparse
import contextlib

import structlog
from rich.console import Console

from ragjury.commands._display import GenerationProgress, cost_text, summary_table
from ragjury.commands._run import EXIT_BUDGET, budget_stop, recorded_run, report_estimate
from ragjury.config import Settings
from ragjury.estimate import estimate_generation
from ragjury.generation import run_generation, summarise
from ragjury.ingest import load_documents
from ragjury.output import RecordWriter
from ragjury.prompts import load_overrides

log = structlog.get_logger("ragjury.generate")

_PROMPT_NAMES = ("generator", "groundedness", "relevance", "standalone")


async def generate_command(args: argparse.Namespace, settings: Settings) -> int:
    if not args.dry_run:
        settings.require_endpoint()
    options = settings.generate
    prompts = load_overrides(args.prompt, _PROMPT_NAMES)
    console = Console(stderr=True)
    loaded = load_documents(
        args.paths, globs=options.globs, text_field=options.text_field, id_field=options.id_field
    )
    skipped = [{"path": s.path, "reason": s.reason} for s in loaded.skipped]
    for item in skipped:
        log.warning("input_skipped", **item)
    if not loaded.documents:
        where = ", ".join(str(p) for p in args.paths)
        reasons = "; ".join(f"{s['path']}: {s['reason']}" for s in skipped[:5])
        console.print(
            f"[bold red]ragjury: nothing to do[/]: no readable documents in {where}"
            + (f" (skipped: {reasons})" if reasons else "")
            + (f"; the globs were {list(options.globs)}" if options.globs else "")
        )
        return 1
    if args.dry_run:
        estimate = estimate_generation(loaded.documents, settings, prompts)
        return await report_estimate(estimate, settings, args, console)
    async with recorded_run(settings, "generate") as run:
        with contextlib.ExitStack() as stack:
            kept = stack.enter_context(RecordWriter(args.out, args.format))
            rejected = (
                stack.enter_context(RecordWriter(args.rejected, args.format))
                if args.rejected
                else None
            )
            progress = stack.enter_context(GenerationProgress(console))
            counts = await run_generation(
                loaded.documents,
                settings=settings,
                llm=run.llm,
                store=run.store,
                run_id=run.run_id,
                kept=kept,
                rejected=rejected,
                on_progress=progress.update,
                prompts=prompts,
            )
        summary = summarise(counts, run.llm, wall_seconds=run.seconds, skipped=skipped)
        stop = budget_stop(
            run.llm, what="documents", submitted=counts.documents_submitted, total=counts.documents
        )
        summary["stopped_by_budget"] = stop is not None
        await run.finish(summary, args.summary)
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
    if stop is not None:
        console.print(stop, soft_wrap=True, markup=False, highlight=False)
        return EXIT_BUDGET
    processed_nothing = counts.chunks == 0 or counts.chunks_failed == counts.chunks
    return 1 if processed_nothing else 0
