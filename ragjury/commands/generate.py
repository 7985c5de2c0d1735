"""``ragjury generate``: load, run the pipeline, write the outputs and the summary."""

from __future__ import annotations

import argparse
import contextlib
import itertools

import structlog
from rich.console import Console

from ragjury.commands._display import GenerationProgress, summary_table
from ragjury.commands._run import recorded_run
from ragjury.config import Settings
from ragjury.generation import run_generation, summarise
from ragjury.ingest import Skipped, iter_documents
from ragjury.output import RecordWriter
from ragjury.prompts import load_overrides

log = structlog.get_logger("ragjury.generate")

_PROMPT_NAMES = ("generator", "groundedness", "relevance", "standalone")


async def generate_command(args: argparse.Namespace, settings: Settings) -> int:
    settings.require_endpoint()
    options = settings.generate
    prompts = load_overrides(args.prompt, _PROMPT_NAMES)
    console = Console(stderr=True)
    found: list[Skipped] = []
    documents = iter_documents(
        args.paths,
        globs=options.globs,
        text_field=options.text_field,
        id_field=options.id_field,
        skipped=found,
    )
    first = next(documents, None)  # read lazily, so that memory stays flat on large inputs
    if first is None:
        _warn_skipped(found)
        where = ", ".join(str(p) for p in args.paths)
        reasons = "; ".join(f"{s.path}: {s.reason}" for s in found[:5])
        console.print(
            f"[bold red]ragjury: nothing to do[/]: no readable documents in {where}"
            + (f" (skipped: {reasons})" if reasons else "")
            + (f"; the globs were {list(options.globs)}" if options.globs else "")
        )
        return 1
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
                itertools.chain([first], documents),
                settings=settings,
                llm=run.llm,
                store=run.store,
                run_id=run.run_id,
                kept=kept,
                rejected=rejected,
                on_progress=progress.update,
                prompts=prompts,
            )
        skipped = _warn_skipped(found)
        summary = summarise(counts, run.llm, wall_seconds=run.seconds, skipped=skipped)
        await run.finish(summary, args.summary)
    if console.is_terminal:
        console.print(summary_table(summary))
    else:
        console.print(
            f"ragjury generate: kept {summary['kept']}, rejected {summary['rejected']}, "
            f"failed {summary['failed']} of {summary['pairs_drafted']} drafted pairs "
            f"({summary['chunks_failed']} of {summary['chunks']} chunks failed; "
            f"{summary['llm_calls']} LLM calls) -> {args.out}",
            soft_wrap=True,
        )
    processed_nothing = counts.chunks == 0 or counts.chunks_failed == counts.chunks
    return 1 if processed_nothing else 0


def _warn_skipped(found: list[Skipped]) -> list[dict[str, str]]:
    """Log each input that was skipped; return them as the summary lists them."""
    skipped = [{"path": s.path, "reason": s.reason} for s in found]
    for item in skipped:
        log.warning("input_skipped", **item)
    return skipped
