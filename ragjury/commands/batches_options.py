"""The flags of ``ragjury batches cancel`` (light to import; see
:mod:`ragjury.commands.common_options`)."""

from __future__ import annotations

import argparse

from ragjury.commands.common_options import add_log_level

HELP = "cancel a job's batches at the provider (batch mode); its calls then go directly"
DESCRIPTION = (
    "`batches cancel JOB` cancels the job's batches in flight at the provider (--batch), "
    "drops its requests not yet answered and sends them, and every later call of the job, "
    "directly at the direct price: the parked steps go on in the run working the job, or "
    "when the same command is run again. Nothing already answered is lost. `ragjury "
    "status` lists the batches in flight with their jobs."
)


def add_batches_arguments(batches: argparse.ArgumentParser) -> None:
    actions = batches.add_subparsers(dest="batches_command", required=True, metavar="ACTION")
    cancel = actions.add_parser(
        "cancel",
        help="cancel a job's batches; its calls then go directly",
        description=DESCRIPTION,
    )
    cancel.add_argument("job", help="the job id (`ragjury status` lists them)")
    cancel.add_argument("--db", help="SQLite file or postgresql:// URL (default ragjury.db)")
    cancel.add_argument(
        "--base-url",
        help="the endpoint the batches went to, as the run was given it "
        "(env RAGJURY_BASE_URL or OPENAI_BASE_URL)",
    )
    cancel.add_argument("--api-key", help="API key (prefer the env OPENAI_API_KEY)")
    add_log_level(cancel)
