"""The flags of a judge panel and repeats (``evaluate``, ``calibrate``, ``submit``): light to
import, parsed when used."""

from __future__ import annotations

import argparse


def add_panel_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("judge panels and repeats")
    group.add_argument(
        "--judges",
        metavar="NAME[=MODEL[@BASE_URL]],...",
        help="ask every LLM-judged metric of several judges, each a model (on its own endpoint "
        "after '@', else --base-url) with its own rate limits and prices, e.g. "
        "a=gpt-4o-mini,b=llama3.1@http://localhost:11434/v1; a bare NAME is a judge declared "
        "in ragjury.toml as [panel.NAME] (with its key, concurrency, rpm, tpm and price); the "
        "summary gives their agreement, dissent and cost per judge",
    )
    group.add_argument(
        "--batch-judges",
        metavar="NAME,...",
        help="send these judges' calls through their endpoint's batch API (about half "
        "price, answers within hours; see --batch), the other judges' directly, e.g. "
        "--judges a=gpt-4o-mini,b=llama3.1@http://localhost:11434/v1 --batch-judges a",
    )
    group.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="ask each judge N times (at the temperature of ragjury.toml or RAGJURY_TEMPERATURE, "
        "or 0.7 when it is 0); the summary "
        "gives the samples whose verdict flips and intervals that count the repeats' spread",
    )
    group.add_argument(
        "--combine",
        choices=["majority", "mean", "median", "min"],
        default="majority",
        help="how the judges' verdicts make one (default majority: the pass/fail vote of the "
        "judges that answered, a tie fails; mean, median or min of their scores against the "
        "pass mark)",
    )
