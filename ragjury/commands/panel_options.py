"""The flags of a judge panel and repeats (``evaluate``): light to import, parsed when used."""

from __future__ import annotations

import argparse


def add_panel_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("judge panels and repeats")
    group.add_argument(
        "--judges",
        metavar="NAME=MODEL[@BASE_URL],...",
        help="ask every LLM-judged metric of several judges, each a model (on its own endpoint "
        "after '@', else --base-url) with its own rate limits and prices, e.g. "
        "a=gpt-4o-mini,b=llama3.1@http://localhost:11434/v1; the summary gives their "
        "agreement, dissent and cost per judge",
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
