"""``ragjury report`` and ``ragjury compare``: read results, write pages and tables.

No LLM is called and nothing is written to the database."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio
from rich.console import Console

from ragjury._json import JSONData, JSONObject
from ragjury.config import Settings
from ragjury.errors import ConfigurationError, InputError
from ragjury.report.compare import check_regressions, compare
from ragjury.report.load import Loaded, load_files, records_from_db
from ragjury.urls import redacted


async def _write(path: Path, text: str) -> None:
    try:
        await anyio.Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot write {str(path)!r}: {exc.strerror}; choose a writable path"
        ) from exc


async def _load_report(args: argparse.Namespace) -> Loaded:
    if args.db is not None:
        if args.results is not None:
            raise ConfigurationError(
                "give either a results file or --db, not both (--job picks the job in --db)"
            )
        return await records_from_db(args.db, args.job)
    if args.results is None:
        raise ConfigurationError(
            "give the results file `evaluate --out` wrote (or a dataset), or --db FILE"
        )
    if args.job is not None:
        raise ConfigurationError("--job needs --db: it names a job in the database")
    return load_files(
        args.results, summary=args.summary, samples=args.samples, rejected=args.rejected
    )


async def _history(args: argparse.Namespace) -> int:
    """``--history``: the history page, and each run's report in ``OUT-runs/`` beside it."""
    from ragjury.report.history import history_html
    from ragjury.report.html import dataset_html, evaluation_html
    from ragjury.report.load import history_from_db

    given = [
        flag for flag in ("results", "job", "summary", "samples", "rejected") if getattr(args, flag)
    ]
    if args.db is None or given:
        shown = ", ".join("RESULTS" if f == "results" else f"--{f}" for f in given)
        raise ConfigurationError(
            "--history reads every run of --db, so it takes --db (and --out, --title) only"
            + (f"; drop {shown}" if given else "")
        )
    source, runs = await history_from_db(args.db)
    folder = args.out.with_name(f"{args.out.stem}-runs")
    links = {}
    if runs:
        await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
    for run in runs:
        loaded = await records_from_db(args.db, run.job, run.run)
        report = evaluation_html if loaded.kind == "evaluation" else dataset_html
        title = f"ragjury job {run.job}" + (f" run {run.run}" if run.run else "")
        await _write(folder / f"{run.key}.html", report(loaded, title=title))
        links[run.key] = f"{folder.name}/{run.key}.html"
    await _write(args.out, history_html(source, runs, links, title=args.title))
    failed = sum(bool(r.gates_failed) for r in runs)
    jobs = len({r.job for r in runs})
    print(
        f"ragjury report: {len(runs)} run(s) of {jobs} job(s), {failed} with failed gates -> "
        f"{args.out} (each run's report in {folder})",
        file=sys.stderr,
    )
    return 0


async def report_command(args: argparse.Namespace, settings: Settings) -> int:
    from ragjury.report.html import dataset_html, evaluation_html

    if args.history:
        return await _history(args)
    loaded = await _load_report(args)
    if args.db is not None and args.summary is not None:
        loaded.summary.update(await anyio.to_thread.run_sync(_read_json, args.summary))
    page = (evaluation_html if loaded.kind == "evaluation" else dataset_html)(
        loaded, title=args.title
    )
    await _write(args.out, page)
    what = "samples" if loaded.kind == "evaluation" else "pairs"
    print(
        f"ragjury report: {len(loaded.records)} {what} -> {args.out} ({len(page) / 1024:.0f} KiB)",
        file=sys.stderr,
    )
    return 0


def _read_json(path: Path) -> dict[str, JSONData]:
    from ragjury.report.load import read_json

    return read_json(path)


async def _records(args: argparse.Namespace, which: str) -> list[JSONObject]:
    value = getattr(args, which)
    if args.db is not None:
        loaded = await records_from_db(args.db, value)
        if loaded.kind != "evaluation":
            raise InputError(
                f"job {value!r} in {redacted(args.db)} is a generation job; compare judged runs"
            )
        return loaded.records
    loaded = await anyio.to_thread.run_sync(lambda: load_files(Path(value)))
    if loaded.kind != "evaluation":
        raise InputError(f"{value} is a generated dataset; compare takes evaluate results")
    return loaded.records


async def compare_command(args: argparse.Namespace, settings: Settings) -> int:
    baseline = await _records(args, "baseline")
    candidate = await _records(args, "candidate")
    comparison = compare(
        baseline,
        candidate,
        baseline_label=args.baseline,
        candidate_label=args.candidate,
        resamples=args.resamples,
        seed=args.seed,
        listed=None if args.all else args.limit,
    )
    allowed = {name: delta for spec in args.fail_on_regression for name, delta in spec.items()}
    comparison.gates.extend(check_regressions(comparison, allowed))
    if args.out is not None:
        from ragjury.report.html import comparison_html

        await _write(args.out, comparison_html(comparison, title=args.title))
    if args.markdown is not None:
        from ragjury.report.compare_markdown import comparison_markdown

        await _write(args.markdown, comparison_markdown(comparison))
    if args.json:
        print(json.dumps(comparison.as_dict(), indent=2, ensure_ascii=False))
    else:
        from ragjury.report.terminal import comparison_view

        console = Console()
        if not console.is_terminal:
            console = Console(width=120)
        console.print(comparison_view(comparison))
    from ragjury.commands._run import results_gate

    return results_gate(Console(stderr=True), "compare", comparison.gates) or 0


COMMAND_FUNCTIONS = {"report": report_command, "compare": compare_command}
