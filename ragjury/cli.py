"""The command line: ``ragjury generate ...`` (``main.py`` and the console script call it)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pydantic
import structlog

from ragjury import __version__
from ragjury.config import EvaluationOptions, GenerationOptions, Settings
from ragjury.errors import ConfigurationError, InputError, RagjuryError
from ragjury.logs import configure_logging
from ragjury.metrics import Registry, builtin_metrics, registry
from ragjury.pricing import load_price_file
from ragjury.prompts import GENERATION_PROMPTS

log = structlog.get_logger("ragjury.cli")

# Exit codes: 0 ok, 1 nothing processed, 2 configuration error; the commands add
# 3 (a budget stopped the run), 4 (the results did not pass: nothing judged or a CI gate
# failed) and 130 (stopped by a signal); see commands/_run.py.
EXIT_OK, EXIT_NOTHING_PROCESSED, EXIT_CONFIG = 0, 1, 2

# Flags that map one-to-one onto GenerationOptions fields.
_GENERATION_FLAGS = (
    "questions_per_chunk",
    "chunk_size",
    "chunk_overlap",
    "whole_documents",
    "answer_style",
    "audience",
    "min_score",
    "dedup_threshold",
    "text_field",
    "id_field",
    "question_types",
    "seed",
)
# Flags that map one-to-one onto EvaluationOptions fields.
_EVALUATION_FLAGS = (
    "verdict_batch",
    "context_window_chars",
    "case_sensitive",
)
_LLM_FLAGS = (
    "model",
    "base_url",
    "api_key",
    "concurrency",
    "max_retries",
    "max_transport_retries",
    "max_throttle_wait",
    "timeout",
    "max_prompt_tokens",
    "mode",
    "db",
    "log_level",
    "embedding_model",
    "cache",
    "grace",
    "lease_seconds",
    "items_in_flight",
    "rpm",
    "tpm",
    "max_tokens",
    "max_cost",
    "llm",
    "local_context",
    "local_threads",
    "local_max_tokens",
)


def _add_llm_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("LLM endpoint")
    group.add_argument("--model", help="model name (env RAGJURY_MODEL; default gpt-4o-mini)")
    group.add_argument(
        "--base-url",
        help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 "
        "(env RAGJURY_BASE_URL or OPENAI_BASE_URL)",
    )
    group.add_argument("--api-key", help="API key (prefer the env OPENAI_API_KEY)")
    group.add_argument(
        "--llm",
        metavar="openai|local|local:PATH",
        help="which model: the OpenAI-compatible endpoint, the bundled local model, or your "
        "GGUF file (env RAGJURY_LLM; default: the endpoint if configured, else the bundled "
        "model if the local extra is installed)",
    )
    group.add_argument(
        "--local-context", type=int, help="local model context in tokens (default 4096)"
    )
    group.add_argument(
        "--local-threads", type=int, help="CPU threads of the local model (default: all cores)"
    )
    group.add_argument(
        "--local-max-tokens", type=int, help="longest local completion in tokens (default 512)"
    )
    group.add_argument("--concurrency", type=int, help="requests in flight at once (default 8)")
    group.add_argument(
        "--max-retries", type=int, help="re-asks when output does not validate (default 3)"
    )
    group.add_argument(
        "--max-transport-retries", type=int, help="retries of 5xx and timeouts (default 6)"
    )
    group.add_argument(
        "--max-throttle-wait",
        type=float,
        metavar="SECONDS",
        help="longest one call waits out 429s (rate limits), which use no retry (default 600)",
    )
    group.add_argument("--timeout", type=float, help="seconds per request (default 120)")
    group.add_argument(
        "--max-prompt-tokens",
        type=int,
        help="largest prompt to send, in estimated tokens; a longer one fails at once without "
        "a request (default: the model's context where known, else 128000)",
    )
    group.add_argument("--rpm", type=int, help="requests per minute, at most (default: no limit)")
    group.add_argument(
        "--tpm", type=int, help="tokens per minute, at most, estimated before each request"
    )
    cost = parser.add_argument_group("cost and budget")
    cost.add_argument(
        "--max-tokens",
        type=int,
        help="stop taking new work once this many tokens (prompt + completion) are spent",
    )
    cost.add_argument(
        "--max-cost",
        type=float,
        help="stop taking new work once this many USD are spent (needs a price for --model)",
    )
    cost.add_argument(
        "--prices",
        type=Path,
        metavar="FILE",
        help="TOML or JSON of USD per million tokens by model, over the built-in table",
    )
    cost.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate LLM calls, tokens and cost without calling the LLM, then stop",
    )
    group.add_argument(
        "--mode",
        choices=["json", "tools", "json_schema", "md_json"],
        help="how structured output is requested (default json)",
    )
    group.add_argument(
        "--workers",
        action="append",
        default=[],
        metavar="AGENT=N",
        help="workers for one agent, e.g. --workers generator=4 (repeatable)",
    )
    group.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="replace a built-in prompt template with your Jinja2 file; names: "
        f"{', '.join(_generation_prompts())} (generate); "
        f"{', '.join(_declared().prompt_names())} (evaluate)",
    )


def _add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="default warning"
    )


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """The database, logging, the step cache and shutdown: shared by the working commands."""
    parser.add_argument(
        "--db",
        help="where ragjury keeps the queue, results and step cache: a SQLite file, or a "
        "postgresql://user@host/db URL for workers on several machines (default ragjury.db)",
    )
    _add_log_level(parser)
    parser.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        default=None,
        help="ask the LLM again even for steps the database already holds",
    )
    parser.add_argument(
        "--items-in-flight",
        type=int,
        help="documents/samples worked at once (default 2 x --concurrency)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        help="on SIGINT/SIGTERM, seconds in-flight work gets to finish (default 30)",
    )


def _add_generation_options(parser: argparse.ArgumentParser) -> None:
    ingest = parser.add_argument_group("input")
    ingest.add_argument(
        "--glob",
        action="append",
        dest="globs",
        metavar="PATTERN",
        help="only files matching (repeatable), e.g. --glob '**/*.md'",
    )
    ingest.add_argument("--text-field", help="JSON/JSONL field holding the text (default text)")
    ingest.add_argument("--id-field", help="JSON/JSONL field holding a record id")
    ingest.add_argument("--chunk-size", type=int, help="characters per chunk (default 2000)")
    ingest.add_argument("--chunk-overlap", type=int, help="characters of overlap (default 200)")
    ingest.add_argument(
        "--whole-documents",
        action="store_true",
        default=None,
        help="generate from whole files instead of chunks",
    )
    drafting = parser.add_argument_group("generation")
    drafting.add_argument("--questions-per-chunk", type=int, help="pairs per chunk (default 1)")
    drafting.add_argument(
        "--question-types",
        metavar="TYPE=WEIGHT,...",
        help="the share of each question type, e.g. "
        "factoid=0.5,reasoning=0.2,multi_hop=0.2,comparative=0.1 (default factoid=1)",
    )
    drafting.add_argument(
        "--seed", type=int, help="seeds each chunk's draw of its question type (default 0)"
    )
    drafting.add_argument(
        "--answer-style", choices=["factoid", "detailed"], help="short or paragraph-long answers"
    )
    drafting.add_argument(
        "--audience", help="who asks the questions (default: users of these documents)"
    )
    drafting.add_argument(
        "--min-score",
        type=int,
        help="keep a pair only if every critic rates it this or more (default 4)",
    )
    drafting.add_argument(
        "--dedup-threshold",
        type=float,
        help="similarity 0..1 at which a question counts as a duplicate (default 0.9)",
    )


def _declared() -> Registry:
    """The installed metrics, for the flags and their help (a plugin that fails to load is
    left out here; the command that needs it says why)."""
    try:
        return registry()
    except RagjuryError:
        return Registry(builtin_metrics())


def _generation_prompts() -> list[str]:
    """The built-in templates generation renders (two critics' are metrics' too)."""
    return list(GENERATION_PROMPTS)


def _metric_help(metrics: Registry) -> str:
    groups = "; ".join(f"{g} ({', '.join(names)})" for g, names in metrics.groups.items())
    chosen = [m.name for m in metrics if m.by_default is not None]
    return (
        f"comma-separated: {', '.join(metrics.names)}"
        + (f", or {groups}" if groups else "")
        + ", or a judge file's metric (see --judge); `ragjury metrics` describes each "
        f"(default: {', '.join(chosen)}, each where the samples have what it needs)"
    )


def _add_evaluation_options(parser: argparse.ArgumentParser) -> None:
    metrics = _declared()
    judging = parser.add_argument_group("evaluation")
    judging.add_argument("--metrics", help=_metric_help(metrics))
    judging.add_argument(
        "--judge",
        action="append",
        default=[],
        metavar="FILE",
        help="add the metric of a judge file you wrote (TOML: name, description, inputs, "
        "scale, pass_at, prompt; repeatable); see the README's 'Write your own judge'",
    )
    judging.add_argument(
        "--k",
        help="comma-separated cut-offs of the retrieval figures (default 1,3,5,10); a k "
        "larger than what was retrieved takes the whole list",
    )
    judging.add_argument("--verdict-batch", type=int, help="statements judged per call (default 8)")
    judging.add_argument(
        "--context-window-chars",
        type=int,
        help="contexts longer than this are judged in windows (default 12000)",
    )
    judging.add_argument(
        "--case-sensitive", action="store_true", default=None, help="keyword tests match case"
    )
    judging.add_argument(
        "--threshold",
        action="append",
        default=[],
        dest="thresholds",
        metavar="METRIC=X",
        help="a metric's pass mark on its own scale, e.g. --threshold politeness=3 (repeatable)",
    )
    marks = parser.add_argument_group("pass marks (each on its metric's scale)")
    for metric in metrics:
        if metric.threshold is None:
            continue
        scale = metric.scale
        marks.add_argument(
            f"--{metric.name.replace('_', '-')}-threshold",
            type=float,
            dest=f"{metric.name}_threshold",
            metavar="X",
            help=f"passing {metric.name} score, {scale.describe()} (default {metric.threshold:g})",
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragjury",
        description="Build critic-filtered evaluation sets for RAG from your own documents, "
        "and judge RAG answers.",
    )
    parser.add_argument("--version", action="version", version=f"ragjury {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    gen = commands.add_parser(
        "generate",
        help="draft question/answer pairs from documents and keep those the critics accept",
        description="Draft question/answer pairs from documents; three critics vet each pair. "
        "The work is kept in --db: running the same command again resumes it.",
    )
    gen.add_argument("paths", nargs="+", type=Path, help="files or folders (searched recursively)")
    gen.add_argument("--out", type=Path, required=True, help="kept pairs (JSONL, CSV or Parquet)")
    gen.add_argument("--rejected", type=Path, help="rejected and failed pairs, with rationales")
    gen.add_argument(
        "--failed", type=Path, help="chunks the generator gave up on, with their errors"
    )
    gen.add_argument(
        "--format",
        choices=["jsonl", "csv", "parquet"],
        help="output format (default: the file suffix's, .jsonl .csv .parquet, else jsonl)",
    )
    gen.add_argument("--summary", type=Path, help="write the run summary as JSON here")
    _add_run_options(gen)
    _add_generation_options(gen)
    _add_llm_options(gen)
    _add_evaluate(commands)
    _add_metrics_command(commands)
    _add_queue_commands(commands)
    _add_calibrate(
        commands.add_parser(
            "calibrate",
            help="how often a judge agrees with people: run it on human-labelled samples",
            description="Judge human-labelled samples (a bundled set, or your own file) with "
            "one judge, as evaluate would, and report how often it agrees with the people: "
            "accuracy, balanced accuracy, Cohen's kappa, precision and recall of fail, AUROC, "
            "the confusion matrix and the best pass mark, with bootstrap 95% intervals. The "
            "work is kept in --db: running the same command again resumes it.",
        )
    )
    from ragjury.commands.report import add_report_commands

    add_report_commands(commands)
    return parser


def _add_evaluate(commands: Any) -> None:
    ev = commands.add_parser(
        "evaluate",
        help="judge RAG answers: " + ", ".join(_declared().names),
        description="Judge the answers of a RAG system, sample by sample. The work is kept in "
        "--db: running the same command again resumes it.",
    )
    ev.add_argument(
        "samples",
        type=Path,
        help="JSONL, JSON, CSV or Parquet of samples, or a Hugging Face dataset folder",
    )
    ev.add_argument(
        "--field",
        action="append",
        default=[],
        dest="fields",
        metavar="NAME=SOURCE",
        help="read sample field NAME (question, answer, contexts, reference, id, ...) from "
        "the record field SOURCE (repeatable), e.g. --field question=query",
    )
    ev.add_argument(
        "--out", type=Path, required=True, help="per-sample results (JSONL, CSV or Parquet)"
    )
    ev.add_argument(
        "--format",
        choices=["jsonl", "csv", "parquet"],
        help="output format (default: the file suffix's, .jsonl .csv .parquet, else jsonl)",
    )
    ev.add_argument("--summary", type=Path, help="write the run summary as JSON here")
    ev.add_argument(
        "--max-failed",
        type=int,
        metavar="N",
        help="exit 3 when more than N judgements (sample x metric) failed (exit 4 when every "
        "judgement failed, whatever N)",
    )
    _add_run_options(ev)
    _add_evaluation_options(ev)
    ev.add_argument(
        "--embedding-model", help="embedding model for similarity (default text-embedding-3-small)"
    )
    from ragjury.report.ci import add_ci_options

    add_ci_options(ev)
    target = ev.add_argument_group("live RAG system")
    target.add_argument(
        "--target",
        help='answer samples that have no answer: an http(s) URL (POST {"question": ...}) '
        "or package.module:function",
    )
    target.add_argument("--target-question-field", default="question")
    target.add_argument("--target-answer-field", default="answer")
    target.add_argument("--target-contexts-field", default="contexts")
    target.add_argument(
        "--target-timeout", type=float, default=60.0, help="seconds per target request"
    )
    _add_llm_options(ev)


def _add_calibrate(cal: argparse.ArgumentParser) -> None:
    from ragjury.commands.calibrate_options import add_calibrate_arguments

    add_calibrate_arguments(cal)
    _add_run_options(cal)
    _add_llm_options(cal)


def _add_metrics_command(commands: Any) -> None:
    listing = commands.add_parser(
        "metrics",
        help="list every metric: scale, pass rule, fields it needs, LLM calls per sample",
        description="Every metric ragjury can judge: the built-in ones, those of installed "
        "plugins (entry-point group ragjury.metrics) and those of --judge files.",
    )
    listing.add_argument(
        "--judge", action="append", default=[], metavar="FILE", help="include a judge file"
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.add_argument(
        "--markdown", action="store_true", help="print a Markdown table (as in the README)"
    )
    _add_log_level(listing)


def _add_queue_commands(commands: Any) -> None:
    submit = commands.add_parser(
        "submit",
        help="queue documents (or --samples) in the database for `ragjury serve`",
        description="Queue documents for dataset generation, or --samples for evaluation, with "
        "their options. `ragjury serve` works the queue; `ragjury export` writes the results.",
    )
    submit.add_argument("paths", nargs="*", type=Path, help="files or folders of documents")
    submit.add_argument(
        "--samples", type=Path, help="JSONL, JSON, CSV or Parquet of samples to judge"
    )
    submit.add_argument(
        "--field",
        action="append",
        default=[],
        dest="fields",
        metavar="NAME=SOURCE",
        help="read sample field NAME (question, answer, contexts, reference, id, ...) from "
        "the record field SOURCE (repeatable), e.g. --field question=query",
    )
    submit.add_argument("--db", help="SQLite file or postgresql:// URL (default ragjury.db)")
    _add_log_level(submit)
    submit.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="your Jinja2 template for a prompt, kept with the job",
    )
    _add_generation_options(submit)
    _add_evaluation_options(submit)

    serve = commands.add_parser(
        "serve",
        help="work the queue in the database until stopped (SIGINT / SIGTERM)",
        description="Process queued documents and samples, including those submitted while it "
        "runs. Several `serve` processes may share one database. The first SIGINT/SIGTERM "
        "stops intake and lets in-flight work finish within --grace seconds; a second stops "
        "at once. Nothing finished is lost either way.",
    )
    _add_run_options(serve)
    serve.add_argument(
        "--lease",
        dest="lease_seconds",
        type=float,
        help="seconds a message stays this worker's without renewal (default 30); a killed "
        "worker's messages are taken up again after this (at once by a worker started on "
        "the same machine)",
    )
    serve.add_argument(
        "--agents",
        help="comma-separated agents this process works, e.g. verdict_judge,statement_splitter "
        "(default: every agent and the intake of queued items; name 'intake' to include it)",
    )
    serve.add_argument(
        "--embedding-model", help="embedding model for similarity (default text-embedding-3-small)"
    )
    _add_llm_options(serve)

    status = commands.add_parser(
        "status", help="what the queue holds: items per state, per stage, tokens, throughput"
    )
    status.add_argument("--db", help="SQLite file or postgresql:// URL (default ragjury.db)")
    status.add_argument("--json", action="store_true", help="print JSON instead of tables")

    prune = commands.add_parser(
        "prune",
        help="delete finished jobs, cached steps and call records older than an age",
        description="Keep a long-running database from growing forever: delete the jobs whose "
        "every item finished more than --older-than ago (with their results), the cached steps "
        "and the run and LLM call records made before then, and give the space back (VACUUM). "
        "Unfinished jobs are kept whole; export what you want to keep first.",
    )
    prune.add_argument("--db", help="SQLite file or postgresql:// URL (default ragjury.db)")
    prune.add_argument("--older-than", required=True, help="an age: 30d, 12h, 90m or 3600s")
    prune.add_argument(
        "--no-vacuum",
        dest="vacuum",
        action="store_false",
        help="do not give the space back to the file system (VACUUM rewrites the file)",
    )

    export = commands.add_parser(
        "export",
        help="write the dataset and evaluation results held in the database",
        description="Write what the database holds, in the same formats as generate and "
        "evaluate, in submission order.",
    )
    export.add_argument("--db", help="SQLite file or postgresql:// URL (default ragjury.db)")
    export.add_argument("--out", type=Path, help="kept pairs of every generation job")
    export.add_argument("--rejected", type=Path, help="rejected and failed pairs")
    export.add_argument("--results", type=Path, help="judged samples of every evaluation job")
    export.add_argument(
        "--format",
        choices=["jsonl", "csv", "parquet"],
        help="output format (default: the file suffix's, .jsonl .csv .parquet, else jsonl)",
    )
    export.add_argument(
        "--job", action="append", dest="jobs", metavar="ID", help="only this job (repeatable)"
    )


def _pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    result = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise ConfigurationError(f"{flag} expects NAME=VALUE, got {value!r}")
        result[name.strip()] = rest.strip()
    return result


def _thresholds(args: argparse.Namespace) -> dict[str, float]:
    """``--NAME-threshold X`` and ``--threshold NAME=X`` as one mapping (the latter wins)."""
    given = {m.name: getattr(args, f"{m.name}_threshold", None) for m in _declared()}
    found = {name: value for name, value in given.items() if value is not None}
    for name, value in _pairs(getattr(args, "thresholds", None) or [], "--threshold").items():
        try:
            found[name] = float(value)
        except ValueError as exc:
            raise ConfigurationError(
                f"--threshold {name}={value}: give a number, e.g. --threshold {name}=0.8"
            ) from exc
    return found


def _cutoffs(value: str) -> tuple[int, ...]:
    try:
        return tuple(int(k) for k in value.split(",") if k.strip())
    except ValueError as exc:
        raise ConfigurationError(
            f"--k expects comma-separated whole numbers, e.g. --k 1,3,5,10; got {value!r}"
        ) from exc


def _explain(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors():
        name = ".".join(str(p) for p in error["loc"] if p not in ("generate", "evaluate"))
        flag = "--" + name.replace("_", "-")
        message = error["msg"][:1].lower() + error["msg"][1:]  # the value keeps its case
        parts.append(f"{flag} {message} (got {error.get('input')!r})")
    return "; ".join(parts)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Defaults < ragjury.toml < environment < command-line flags."""
    overrides: dict[str, Any] = {k: getattr(args, k, None) for k in _LLM_FLAGS}
    if overrides["llm"] is None and (overrides["base_url"] or overrides["api_key"]):
        overrides["llm"] = "openai"  # an endpoint flag beats RAGJURY_LLM in the environment
    workers = _pairs(getattr(args, "workers", []), "--workers")
    try:
        if workers:
            overrides["workers"] = {name: int(n) for name, n in workers.items()}
    except ValueError as exc:
        raise ConfigurationError(f"--workers needs whole numbers, e.g. generator=4: {exc}") from exc
    try:
        settings = Settings.from_environment(**overrides)
        if getattr(args, "prices", None) is not None:
            prices = {**settings.prices, **load_price_file(args.prices)}
            settings = settings.model_copy(update={"prices": prices})
        flags = {k: getattr(args, k, None) for k in _GENERATION_FLAGS}
        flags["globs"] = tuple(args.globs) if getattr(args, "globs", None) else None
        merged = {
            **settings.generate.model_dump(),
            **{k: v for k, v in flags.items() if v is not None},
        }
        options = GenerationOptions.model_validate(merged)
        flags = {k: getattr(args, k, None) for k in _EVALUATION_FLAGS}
        thresholds = _thresholds(args)
        if thresholds:
            flags["thresholds"] = {**settings.evaluate.thresholds, **thresholds}
        if getattr(args, "metrics", None):
            flags["metrics"] = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
        if getattr(args, "k", None):
            flags["k"] = _cutoffs(args.k)
        merged = {
            **settings.evaluate.model_dump(),
            **{k: v for k, v in flags.items() if v is not None},
        }
        evaluation = EvaluationOptions.model_validate(merged)
    except pydantic.ValidationError as exc:
        raise ConfigurationError(_explain(exc)) from exc
    return settings.model_copy(update={"generate": options, "evaluate": evaluation})


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
        configure_logging(settings.log_level)
        if args.command == "generate":
            from ragjury.commands.generate import generate_command

            return anyio.run(generate_command, args, settings)
        if args.command == "evaluate":
            from ragjury.commands.evaluate import evaluate_command

            return anyio.run(evaluate_command, args, settings)
        if args.command == "calibrate":
            from ragjury.commands.calibrate import calibrate_command

            return anyio.run(calibrate_command, args, settings)
        if args.command == "metrics":
            from ragjury.commands.metrics import metrics_command

            return metrics_command(args, settings)
        if args.command in ("report", "compare"):
            from ragjury.commands.report import COMMAND_FUNCTIONS

            return anyio.run(COMMAND_FUNCTIONS[args.command], args, settings)
        from ragjury.commands import queue

        return anyio.run(queue.COMMANDS[args.command], args, settings)
    except (ConfigurationError, InputError) as exc:
        print(f"ragjury: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except RagjuryError as exc:
        print(f"ragjury: error: {exc}", file=sys.stderr)
        return EXIT_NOTHING_PROCESSED
    except KeyboardInterrupt:
        print("ragjury: interrupted; results written so far are kept", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command!r}")
    return EXIT_CONFIG
