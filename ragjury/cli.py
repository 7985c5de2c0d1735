"""The command line: ``ragjury generate ...`` (``main.py`` and the console script call it).

Start-up stays short (``ragjury --version`` and ``--help`` load neither the LLM client nor the
stores, the settings or logging): the parser is built from the light
``ragjury.commands.*_options`` modules, a command's flags are added only when that command is
parsed or its help is shown, and a command's own module is imported only when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ragjury import __version__
from ragjury.commands import (
    audit_options,
    batches_options,
    evaluate_options,
    generate_options,
    queue_options,
    report_options,
    review_options,
)
from ragjury.commands.common_options import add_llm_options, add_run_options, declared
from ragjury.commands.early_signals import early_signals_kept
from ragjury.errors import (
    ConfigurationError,
    EndpointUnreachableError,
    InputError,
    RagjuryError,
    StoreUnavailableError,
)

if TYPE_CHECKING:
    import pydantic

    from ragjury.config import Settings

# Exit codes: 0 ok, 1 nothing processed, 2 configuration error, 4 nothing judged (here: an
# endpoint that refuses every connection), 7 (the PostgreSQL --db was lost past
# --db-reconnect); the commands add 3 (too many failed judgements), 4 (nothing judged), 5 (a
# gate failed), 6 (a budget stopped the run) and 130 (stopped by a signal); see
# commands/_run.py and the README's table.
EXIT_OK, EXIT_NOTHING_PROCESSED, EXIT_CONFIG, EXIT_NOTHING_JUDGED = 0, 1, 2, 4
EXIT_STORE_UNREACHABLE = 7

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
    "max_pairs",
    "reference_answers",
    "answer_check",
    "multi_hop_strict",
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
    "batch",
    "batch_size",
    "batch_wait",
    "batch_poll",
    "batch_reask",
    "timeout",
    "max_prompt_tokens",
    "mode",
    "db",
    "db_reconnect",
    "log_level",
    "otel",
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


Fill = Callable[[argparse.ArgumentParser], None]


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]  # argparse's own generic
    """Sub-commands whose flags are added when first needed: when the command is parsed, or
    for every command at once (:meth:`fill_all`). A help line may be a function, called when
    ``ragjury --help`` is shown (``evaluate``'s names the installed metrics)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fills: dict[str, Fill] = {}
        self._helps: dict[str, Callable[[], str]] = {}

    def add_command(
        self, name: str, *, fill: Fill, help: str | Callable[[], str], **kwargs: Any
    ) -> argparse.ArgumentParser:
        parser = cast(
            argparse.ArgumentParser,
            self.add_parser(name, help=help if isinstance(help, str) else "", **kwargs),
        )
        self._fills[name] = fill
        if not isinstance(help, str):
            self._helps[name] = help
        return parser

    def _fill(self, name: str) -> None:
        fill = self._fills.pop(name, None)
        if fill is not None:
            fill(self._name_parser_map[name])

    def fill_all(self) -> None:
        """Every command's flags and help line, as an eager parser would have them."""
        for name in list(self._fills):
            self._fill(name)
        self._write_helps()

    def _write_helps(self) -> None:
        for action in self._choices_actions:
            helps = self._helps.pop(action.dest, None)
            if helps is not None:
                action.help = helps()

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        self._fill(values[0])
        super().__call__(parser, namespace, values, option_string)

    def _get_subactions(self) -> list[argparse.Action]:
        self._write_helps()  # argparse reads the help lines from here, only to show them
        return super()._get_subactions()


def _fill_calibrate(cal: argparse.ArgumentParser) -> None:
    from ragjury.commands.calibrate_options import add_calibrate_arguments

    add_calibrate_arguments(cal)
    add_run_options(cal)
    add_llm_options(cal)


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """The whole parser; with ``lazy``, each command's flags are added when it is parsed (what
    :func:`main` uses: ``--version`` and ``--help`` then read no metric declarations)."""
    parser = argparse.ArgumentParser(
        prog="ragjury",
        description="Build critic-filtered evaluation sets for RAG from your own documents, "
        "and judge RAG answers.",
    )
    parser.add_argument("--version", action="version", version=f"ragjury {__version__}")
    commands = cast(
        _Commands,
        parser.add_subparsers(action=_Commands, dest="command", required=True, metavar="COMMAND"),
    )
    commands.add_command(
        "generate",
        help="draft question/answer pairs from documents and keep those the critics accept",
        description="Draft question/answer pairs from documents; three critics vet each pair. "
        "The work is kept in --db: running the same command again resumes it.",
        fill=generate_options.add_generate_arguments,
    )
    commands.add_command(
        "evaluate",
        help=evaluate_options.evaluate_help,
        description="Judge the answers of a RAG system, sample by sample. The work is kept in "
        "--db: running the same command again resumes it.",
        fill=evaluate_options.add_evaluate_arguments,
    )
    commands.add_command(
        "metrics",
        help="list every metric: scale, pass rule, fields it needs, LLM calls per sample",
        description="Every metric ragjury can judge: the built-in ones, those of installed "
        "plugins (entry-point group ragjury.metrics) and those of --judge files.",
        fill=evaluate_options.add_metrics_arguments,
    )
    commands.add_command(
        "submit",
        help="queue documents (or --samples) in the database for `ragjury serve`",
        description="Queue documents for dataset generation, or --samples for evaluation, with "
        "their options. `ragjury serve` works the queue; `ragjury export` writes the results.",
        fill=queue_options.add_submit_arguments,
    )
    commands.add_command(
        "serve",
        help="work the queue in the database until stopped (SIGINT / SIGTERM)",
        description="Process queued documents and samples, including those submitted while it "
        "runs. Several `serve` processes may share one database. The first SIGINT/SIGTERM "
        "stops intake and lets in-flight work finish within --grace seconds; a second stops "
        "at once. Nothing finished is lost either way.",
        fill=queue_options.add_serve_arguments,
    )
    commands.add_command(
        "status",
        help="what the queue holds: items per state, per stage, tokens, throughput",
        fill=queue_options.add_status_arguments,
    )
    commands.add_command(
        "prune",
        help="delete finished jobs, cached steps and call records older than an age",
        description="Keep a long-running database from growing forever: delete the jobs whose "
        "every item finished more than --older-than ago (with their results), the cached steps "
        "and the run and LLM call records made before then, and give the space back (VACUUM). "
        "Unfinished jobs are kept whole; export what you want to keep first.",
        fill=queue_options.add_prune_arguments,
    )
    commands.add_command(
        "export",
        help="write the dataset and evaluation results held in the database",
        description="Write what the database holds, in the same formats as generate and "
        "evaluate, in submission order.",
        fill=queue_options.add_export_arguments,
    )
    commands.add_command(
        "calibrate",
        help="how often a judge agrees with people: run it on human-labelled samples",
        description="Judge human-labelled samples (a bundled set, or your own file) with "
        "one judge, as evaluate would, and report how often it agrees with the people: "
        "accuracy, balanced accuracy, Cohen's kappa, precision and recall of fail, AUROC, "
        "the confusion matrix and the best pass mark, with bootstrap 95% intervals. The "
        "work is kept in --db: running the same command again resumes it.",
        fill=_fill_calibrate,
    )
    commands.add_command(
        "report",
        help="write a self-contained HTML report of evaluate results or a generated dataset",
        description="Write one HTML file (no network needed to open it) from the results "
        "`evaluate` wrote, from a job in the database (--db), or from a generated dataset "
        "(with --rejected); with --db and --history, one page of every job in the database.",
        fill=report_options.add_report_arguments,
    )
    commands.add_command(
        "compare",
        help="compare two evaluation runs sample by sample: differences, intervals, regressions",
        description="Pair the samples of BASELINE and CANDIDATE by id and compare each metric: "
        "means, the paired difference with a bootstrap 95% interval, samples improved, "
        "regressed or the same, and the biggest regressions. BASELINE and CANDIDATE are "
        "results files, or job ids with --db.",
        fill=report_options.add_compare_arguments,
    )
    commands.add_command(
        "audit",
        help=audit_options.HELP,
        description=audit_options.DESCRIPTION,
        fill=audit_options.add_audit_arguments,
    )
    commands.add_command(
        "batches",
        help=batches_options.HELP,
        description=batches_options.DESCRIPTION,
        fill=batches_options.add_batches_arguments,
    )
    commands.add_command(
        "review",
        help=review_options.HELP,
        description=review_options.DESCRIPTION,
        fill=review_options.add_review_arguments,
    )
    if not lazy:
        commands.fill_all()
    return parser


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
    given = {m.name: getattr(args, f"{m.name}_threshold", None) for m in declared()}
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


def _personas_file(args: argparse.Namespace) -> object:
    """``--personas FILE``'s personas (``auto`` is resolved by the command, with the LLM)."""
    from pathlib import Path

    from ragjury.personas import load_personas, personas_flag

    value = getattr(args, "personas", None)
    if value is None:
        return None
    chosen = personas_flag(value)
    return load_personas(chosen) if isinstance(chosen, Path) else None


def _explain(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors():
        message = error["msg"][:1].lower() + error["msg"][1:]  # the value keeps its case
        loc = [str(p) for p in error["loc"]]
        if loc[:1] == ["panel"]:  # a judge declared in ragjury.toml: no flag sets it
            table = f"[panel.{loc[1]}]" if len(loc) > 1 else "[panel.NAME]"
            field = f" {'.'.join(loc[2:])}:" if len(loc) > 2 else ""
            # the value is not repeated: api_key_env may hold a key put there by mistake
            parts.append(f"{table} in ragjury.toml:{field} {message}")
            continue
        name = ".".join(p for p in loc if p not in ("generate", "evaluate"))
        flag = "--" + name.replace("_", "-")
        parts.append(f"{flag} {message} (got {error.get('input')!r})")
    return "; ".join(parts)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Defaults < ragjury.toml < environment < command-line flags."""
    import pydantic

    from ragjury.config import EvaluationOptions, GenerationOptions, Settings
    from ragjury.pricing import load_price_file

    overrides: dict[str, Any] = {k: getattr(args, k, None) for k in _LLM_FLAGS}
    if overrides["otel"] is None and any(
        os.environ.get(name)
        for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        overrides["otel"] = True  # the standard variable asks for traces, as elsewhere
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
        flags["personas"] = _personas_file(args)
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
    try:
        args = build_parser(lazy=True).parse_args(argv)
        with early_signals_kept(args.command):  # a stop sent while it starts is not lost
            return _main(args)
    except KeyboardInterrupt:
        print("ragjury: interrupted; results written so far are kept", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    from ragjury.llm import tracing
    from ragjury.logs import configure_logging
    from ragjury.urls import redact_text

    try:
        settings = settings_from_args(args)
        # serve's logs go to a collector: its warnings stay log lines (with their sentence)
        configure_logging(settings.log_level, sentences=args.command != "serve")
        if settings.otel:
            tracing.export()
        try:
            return _run(args, settings)
        finally:
            tracing.flush()
    except EndpointUnreachableError as exc:  # found at the first call: nothing judged
        print(f"ragjury: error: nothing was judged: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_NOTHING_JUDGED
    except StoreUnavailableError as exc:  # finished work stored, the rest queued
        print(f"ragjury: error: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_STORE_UNREACHABLE
    except (ConfigurationError, InputError) as exc:
        print(f"ragjury: error: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_CONFIG
    except RagjuryError as exc:
        print(f"ragjury: error: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_NOTHING_PROCESSED


def _run(args: argparse.Namespace, settings: Settings) -> int:
    import anyio

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
    if args.command == "batches":
        from ragjury.commands.batches import batches_command

        return anyio.run(batches_command, args, settings)
    if args.command == "review":
        from ragjury.commands.review import review_command

        return anyio.run(review_command, args, settings)
    if args.command == "audit":
        from ragjury.commands.audit import audit_command

        return audit_command(args, settings)
    if args.command in ("report", "compare"):
        from ragjury.commands.report import COMMAND_FUNCTIONS

        return anyio.run(COMMAND_FUNCTIONS[args.command], args, settings)
    from ragjury.commands import queue

    return anyio.run(queue.COMMANDS[args.command], args, settings)
