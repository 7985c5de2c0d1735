"""The flags several commands share: the LLM endpoint, cost and budget, the database and
logging. Light to import: the parser is built from these modules, and what a flag's help needs
(the installed metrics, the prompt names) is read only when that command's flags are added."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragjury.metrics import Registry


def add_llm_options(parser: argparse.ArgumentParser) -> None:
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
    batch = parser.add_argument_group("batch mode (about half price, answers within hours)")
    batch.add_argument(
        "--batch",
        action="store_true",
        default=None,
        help="send the LLM calls through the endpoint's batch API (/v1/files, /v1/batches)",
    )
    batch.add_argument(
        "--batch-size", type=int, metavar="N", help="requests per batch, at most (default 1000)"
    )
    batch.add_argument(
        "--batch-wait",
        type=float,
        metavar="SECONDS",
        help="longest a queued request waits for a fuller batch (default 60)",
    )
    batch.add_argument(
        "--batch-poll",
        type=float,
        metavar="SECONDS",
        help="first wait between polls of a batch, doubling up to 600 (default 30)",
    )
    batch.add_argument(
        "--batch-reask",
        choices=["batch", "direct"],
        help="send a re-ask (output that did not validate) in the next batch or directly "
        "(default batch)",
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
        f"{', '.join(generation_prompts())} (generate); "
        f"{', '.join(declared().prompt_names())} (evaluate)",
    )


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="default warning"
    )


def add_field_option(parser: argparse.ArgumentParser) -> None:
    """``--field NAME=SOURCE``: where a sample's fields are read from (evaluate, submit)."""
    parser.add_argument(
        "--field",
        action="append",
        default=[],
        dest="fields",
        metavar="NAME=SOURCE",
        help="read sample field NAME (question, answer, contexts, reference, id, ...) from "
        "the record field SOURCE (repeatable), e.g. --field question=query",
    )


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The database, logging, the step cache and shutdown: shared by the working commands."""
    parser.add_argument(
        "--db",
        help="where ragjury keeps the queue, results and step cache: a SQLite file, or a "
        "postgresql://user@host/db URL for workers on several machines (default ragjury.db)",
    )
    parser.add_argument(
        "--db-reconnect",
        type=float,
        metavar="SECONDS",
        help="how long a run keeps trying to reach a PostgreSQL --db it lost before it stops "
        "with exit 7, its finished work stored and the rest queued (default 600)",
    )
    add_log_level(parser)
    parser.add_argument(
        "--otel",
        action="store_true",
        default=None,
        help="send OpenTelemetry traces (each LLM call, message and finished item) over OTLP "
        "to OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318); on whenever that "
        "variable is set; needs the otel extra",
    )
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
        help="documents/samples worked at once (default 2 x --concurrency; with --batch at "
        "least --batch-size; 256 for a job that calls no LLM, such as keyword tests only)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        help="on SIGINT/SIGTERM, seconds in-flight work gets to finish (default 30)",
    )


def declared() -> Registry:
    """The installed metrics, for the flags and their help (a plugin that fails to load is
    left out here; the command that needs it says why)."""
    from ragjury.errors import RagjuryError
    from ragjury.metrics import Registry, builtin_metrics, registry

    try:
        return registry()
    except RagjuryError:
        return Registry(builtin_metrics())


def generation_prompts() -> list[str]:
    """The built-in templates generation renders (two critics' are metrics' too)."""
    from ragjury.prompts import GENERATION_PROMPTS

    return list(GENERATION_PROMPTS)
