"""``ragjury submit``, ``serve``, ``status`` and ``export``: the queue in the database."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import structlog
from rich.console import Console
from rich.table import Table

from ragjury._json import JSONData
from ragjury.commands._panel import panel_from
from ragjury.commands._run import EXIT_BUDGET, propose_for_run, recorded_run
from ragjury.commands._signals import Outcome, capture, stop_on_signals
from ragjury.config import GenerationOptions, Settings
from ragjury.errors import ConfigurationError
from ragjury.evaluation.inputs import load_samples, parse_fields
from ragjury.ingest import DocumentReader
from ragjury.job_spec import GenerationSpec
from ragjury.llm.resolve import choose_llm
from ragjury.output import RecordWriter, output_format, pair_table, sample_table
from ragjury.personas import auto_personas
from ragjury.pipelines.evaluation import plan_metrics
from ragjury.pipelines.generation import PROMPT_NAMES as _GENERATION_PROMPTS
from ragjury.prompts import load_overrides
from ragjury.runner import INTAKE, RunCounts, Runner, select_roles, submit_documents, submit_samples
from ragjury.store import Store, open_store, parse_location
from ragjury.store.base import Job

log = structlog.get_logger("ragjury.queue")


def _console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


async def submit_command(args: argparse.Namespace, settings: Settings) -> int:
    console = _console()
    if bool(args.paths) == bool(args.samples):
        raise ConfigurationError(
            "submit takes documents (PATH...) or --samples FILE, one of the two; "
            "e.g. `ragjury submit docs/ --db q.db` or `ragjury submit --samples s.jsonl --db q.db`"
        )
    if args.paths and args.fields:
        raise ConfigurationError(
            "--field maps the fields of --samples records; documents take --text-field and "
            "--id-field instead"
        )
    async with open_store(settings.db, concurrency=settings.concurrency) as store:
        if args.paths:
            prompts = load_overrides(args.prompt, _GENERATION_PROMPTS)
            options = settings.generate
            documents = DocumentReader(
                args.paths,
                globs=options.globs,
                text_field=options.text_field,
                id_field=options.id_field,
            )
            empty = next(documents(), None) is None
            auto = auto_personas(args.personas)
            if not empty and auto is not None:  # proposed now, kept with the job
                from ragjury.llm import LLM

                choose_llm(settings)
                async with LLM(settings, ledger=store) as llm:
                    settings = await propose_for_run(
                        llm, store, settings, documents, auto.count, prompts, console
                    )
            if not empty:
                job = await submit_documents(store, settings, documents, prompts, pin_model=False)
            for skipped in documents.skipped:
                console.print(f"ragjury: skipped {skipped.path}: {skipped.reason}", markup=False)
            if empty:
                console.print("ragjury: nothing to queue: no readable documents", markup=False)
                return 1
            what = f"{job.size} document(s) for generation"
        else:
            samples = load_samples(args.samples, parse_fields(args.fields))
            plan = plan_metrics(settings, samples.filled, args.judge)
            prompts = load_overrides(args.prompt, plan.prompt_names())
            for invalid in samples.invalid:
                console.print(
                    f"ragjury: {args.samples}:{invalid.line}: skipped: {invalid.reason}",
                    markup=False,
                )
            if not samples.count:
                console.print(f"ragjury: nothing to queue: no valid sample in {args.samples}")
                return 1
            if samples.unanswered:
                console.print(
                    f"ragjury: warning: {samples.unanswered} sample(s) have no answer; `serve` "
                    "cannot ask a RAG target, so their answer metrics will be not_applicable. Use "
                    "`ragjury evaluate --target` for those.",
                    markup=False,
                )
            metrics = plan.names
            panel = panel_from(args, settings, plan.chosen)
            job = await submit_samples(
                store,
                settings,
                samples,
                metrics,
                prompts,
                pin_model=False,
                judges=plan.judges,
                panel=panel,
            )
            what = f"{samples.count} sample(s) for evaluation ({', '.join(metrics)})"
            if panel is not None:
                what += f", asked of {', '.join(panel.names)}" + (
                    f" {panel.repeats} times each" if panel.repeats > 1 else ""
                )
        await _say_submitted(console, store, job, what, settings)
    return 0


async def _say_submitted(
    console: Console, store: Store, job: Job, what: str, settings: Settings
) -> None:
    if job.created:
        console.print(
            f"ragjury: queued {what} as job {job.id} in {settings.db_shown}", markup=False
        )
        return
    counts = await store.counts([job.id])
    console.print(
        f"ragjury: the same work is already job {job.id} in {settings.db_shown} "
        f"({counts['done']} done, {counts['queued'] + counts['processing']} to go, "
        f"{counts['failed']} failed); nothing added",
        markup=False,
    )


async def serve_command(args: argparse.Namespace, settings: Settings) -> int:
    agents = [a.strip() for a in args.agents.split(",") if a.strip()] if args.agents else None
    roles = select_roles([a for a in agents if a != INTAKE] if agents is not None else None)
    intake = agents is None or INTAKE in agents
    if roles or intake:
        choose_llm(settings)  # says how to configure one, if none is
    console = _console()
    stop = anyio.Event()
    async with recorded_run(settings, "serve") as run:
        runner = Runner(settings, run.store, run.llm, roles=roles, intake=intake)
        outcome: Outcome[RunCounts] = Outcome(value=runner.counts)
        async with anyio.create_task_group() as tg:
            # the signals are caught before the line that says how to stop serve
            await tg.start(stop_on_signals, stop, tg.cancel_scope, console, settings.grace)
            console.print(
                f"ragjury serve: working the queue in {run.store.location} with "
                f"{settings.model} (concurrency {settings.concurrency}, worker {runner.owner}; "
                f"agents: {'all' if agents is None else ', '.join(runner.agents)}); "
                "SIGINT/SIGTERM to stop",
                markup=False,
            )
            outcome = await capture(runner.run(stop=stop))
            tg.cancel_scope.cancel()
        counts = runner.counts
        summary: dict[str, JSONData] = {
            "daemon": runner.owner,
            "agents": runner.agents,
            "items_started": counts.started,
            "items_done": counts.done,
            "items_failed": counts.failed,
            "items_released": counts.released,
            "llm_calls": run.llm.usage.requests,
            "prompt_tokens": run.llm.usage.prompt_tokens,
            "completion_tokens": run.llm.usage.completion_tokens,
            "cached_steps_used": runner.cache.hits,
            "wall_seconds": round(run.seconds, 3),
        }
        await run.finish(summary, None)
    outcome.unwrap()
    console.print(
        f"ragjury serve: stopped; {counts.done} item(s) done here, {counts.failed} failed, "
        f"{counts.released} put back in the queue; {summary['llm_calls']} LLM calls",
        markup=False,
    )
    if runner.budget_stopped:
        console.print(
            f"ragjury serve: budget reached: {run.llm.budget.reason}; took no new item after "
            "that and finished those in flight. The rest stays queued.",
            markup=False,
        )
        return EXIT_BUDGET
    return 0


def _existing_db(settings: Settings) -> None:
    if not parse_location(settings.db).exists:
        raise ConfigurationError(
            f"there is no database at {settings.db_shown!r}; pass the --db that `submit`, "
            "`generate` or `evaluate` used"
        )


async def status_command(args: argparse.Namespace, settings: Settings) -> int:
    _existing_db(settings)
    async with open_store(settings.db, concurrency=settings.concurrency) as store:
        status = await store.status()
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    console = Console()
    console.print(
        f"[bold]{status['db']}[/]: queued {status['queued']}, processing {status['processing']}, "
        f"done {status['done']}, failed {status['failed']}"
    )
    jobs = Table("job", "kind", "queued", "processing", "done", "failed", title="jobs")
    for job in status["jobs"]:
        jobs.add_row(
            job["id"],
            job["kind"],
            *(str(job[s]) for s in ("queued", "processing", "done", "failed")),
        )
    console.print(jobs)
    for job in status["jobs"]:
        if not job["stored_in_full"]:
            stored = sum(job[s] for s in ("queued", "processing", "done", "failed"))
            console.print(
                f"job {job['id']}: the run storing its samples stopped after {stored} of "
                "them; "
                "run the same command again to store and judge the rest",
                style="yellow",
                markup=False,
            )
    stages = Table(
        "stage", "LLM calls", "prompt tokens", "completion tokens", "cached steps", title="stages"
    )
    for name, stage in status["stages"].items():
        stages.add_row(
            name,
            *(
                str(stage.get(k, 0))
                for k in ("llm_calls", "prompt_tokens", "completion_tokens", "cached_steps")
            ),
        )
    console.print(stages)
    throughput = status["throughput"]
    console.print(
        f"throughput: {throughput['items_done_last_minute']} item(s) in the last minute; "
        f"{throughput['items_per_minute'] or '-'} per minute overall"
    )
    for name, agent in status["agents"].items():
        console.print(
            f"agent {name}: {agent['messages_waiting']} message(s) waiting"
            + ("" if agent["served"] else " [bold red]- no worker is serving it[/]")
        )
    for batch in status.get("batches", []):
        console.print(
            f"batch {batch['batch'] or '(being submitted)'} of job {batch['job']}: "
            f"{batch['status']}, {batch['requests']} request(s), {batch['age_seconds']:.0f} s old"
        )
    if status["waiting_for_workers"]:
        console.print(
            "waiting for workers: "
            + ", ".join(status["waiting_for_workers"])
            + " (start `ragjury serve --agents ...` for them)"
        )
    if status["daemons"]:
        workers = Table(
            "host",
            "pid",
            "worker",
            "state",
            "agents",
            "messages held",
            "items held",
            title="workers (leases held per host and agent group)",
        )
        for worker in status["daemons"]:
            workers.add_row(
                worker["host"],
                str(worker["pid"]),
                worker["owner"],
                "live" if worker["live"] else f"silent {worker['seconds_since_heartbeat']} s",
                ", ".join(worker["agents"]),
                str(worker["messages_held"]),
                str(worker["items_held"]),
            )
        console.print(workers)
    return 0


async def export_command(args: argparse.Namespace, settings: Settings) -> int:
    if not (args.out or args.rejected or args.results):
        raise ConfigurationError(
            "export needs somewhere to write: --out (kept pairs), --rejected, --results "
            "(judged samples)"
        )
    _existing_db(settings)
    formats = {
        option: output_format(path, args.format, option)
        for option, path in (
            ("--out", args.out),
            ("--rejected", args.rejected),
            ("--results", args.results),
        )
        if path is not None
    }
    console = _console()
    written = {"kept": 0, "rejected": 0, "samples": 0}
    async with open_store(settings.db, concurrency=settings.concurrency) as store:
        counts = await store.counts(args.jobs)
        pairs = pair_table(await _generation_options(store, args.jobs))
        with contextlib.ExitStack() as stack:
            kept_writer = (
                stack.enter_context(RecordWriter(args.out, formats["--out"], pairs))
                if args.out
                else None
            )
            rejected_writer = (
                stack.enter_context(RecordWriter(args.rejected, formats["--rejected"], pairs))
                if args.rejected
                else None
            )
            if kept_writer is not None or rejected_writer is not None:
                async for record in store.pairs(args.jobs):
                    kept = record["outcome"] == "kept"
                    writer = kept_writer if kept else rejected_writer
                    if writer is not None:
                        writer.write(record)
                        written["kept" if kept else "rejected"] += 1
            if args.results:
                fmt = formats["--results"]
                metrics = await _metrics_of(store, args.jobs) if fmt != "jsonl" else []
                results = stack.enter_context(
                    RecordWriter(args.results, fmt, sample_table(metrics))
                )
                async for record in store.samples(args.jobs):
                    results.write(record)
                    written["samples"] += 1
    unfinished = counts["queued"] + counts["processing"]
    console.print(
        f"ragjury export: {written['kept']} kept and {written['rejected']} rejected/failed "
        f"pair(s), {written['samples']} judged sample(s)"
        + (f"; {unfinished} item(s) are not finished yet" if unfinished else ""),
        markup=False,
    )
    return 0


async def _generation_options(store: Store, jobs: list[str] | None) -> list[GenerationOptions]:
    """The options of the exported generation jobs (what columns their pairs have: see
    :func:`~ragjury.output.pair_table`)."""
    return [
        GenerationSpec.model_validate(job.options).generate
        for job in await store.jobs()
        if job.kind == "generate" and (jobs is None or job.id in jobs)
    ]


async def _metrics_of(store: Store, jobs: list[str] | None) -> list[str]:
    """Every metric the judged samples have, in first-seen order: the flat columns."""
    seen: dict[str, None] = {}
    async for record in store.samples(jobs):
        metrics = record["metrics"]
        seen |= dict.fromkeys(metrics if isinstance(metrics, dict) else ())
    return list(seen)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m`` or ``3600s`` in seconds."""
    number, unit = text[:-1], text[-1:].lower()
    try:
        seconds = float(number) * _UNITS[unit]
    except (KeyError, ValueError):
        raise ConfigurationError(
            f"--older-than {text!r}: give a number and a unit, e.g. 30d, 12h, 90m or 3600s"
        ) from None
    if seconds < 0:
        raise ConfigurationError(f"--older-than {text!r} must not be negative")
    return seconds


async def prune_command(args: argparse.Namespace, settings: Settings) -> int:
    age = parse_age(args.older_than)
    _existing_db(settings)
    console = _console()
    path = parse_location(settings.db).path
    size_before = _size(path)
    async with open_store(settings.db, concurrency=settings.concurrency) as store:
        deleted = await store.prune(time.time() - age)
        if args.vacuum:
            await store.compact()
    gone = ", ".join(f"{n} {table}" for table, n in deleted.items() if n) or "nothing"
    sizes = (
        f": {size_before / 1e6:.1f} MB -> {_size(path) / 1e6:.1f} MB" if path is not None else ""
    )  # a server's files are not ours to measure
    console.print(
        f"ragjury prune: deleted {gone} (finished more than {args.older_than} ago; unfinished "
        f"jobs are kept whole); {settings.db_shown}{sizes}",
        markup=False,
    )
    return 0


def _size(path: Path | None) -> int:
    if path is None:
        return 0
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


COMMANDS: dict[str, Callable[[argparse.Namespace, Settings], Awaitable[int]]] = {
    "submit": submit_command,
    "serve": serve_command,
    "status": status_command,
    "export": export_command,
    "prune": prune_command,
}
