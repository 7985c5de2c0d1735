"""An OpenAI-compatible fake endpoint for the benchmarks, in its own process.

It is the scripted test server (``tests/fakeopenai.py``) with the tests' scripted agents: the
generator drafts the ``Q:``/``A:`` pairs written in its text, the critics rate 5, the splitter
splits the answer into sentences, the verdict judge finds each statement in the passages, the
correctness and rubric judges grade. Any other agent gets ``{"ok": true}``. On top of that
it behaves like a busy endpoint: a fixed latency plus a latency per completion token, a rate
of 429s (with ``Retry-After``) and 500s, token usage counted from the text, and optionally a
provider's rate limits and an outage.

Run it by hand to point anything at it::

    python benchmarks/fakeserver.py --latency-ms 200 --rate-429 0.05

It prints its base URL on the first line of stdout, then reads commands from stdin, one a
line: ``stats`` (one JSON line of counters and the server's CPU seconds), ``reset`` (zeroes
the counters), ``outage SECONDS`` (answers 503 for that long); end of input stops it. With
``--rpm`` / ``--tpm`` it enforces a provider's rate limits (token buckets, a 429 with
``Retry-After`` when a request does not fit, the ``x-ratelimit-*`` headers on every answer;
``--reset-means next_request`` makes their reset the time to the next request: misleading).
With ``--batch-delay`` it also answers OpenAI's Files and Batch APIs (``tests/fakebatches.py``).
Running in its own process keeps its CPU and its GIL apart from the client's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakebatches import FakeBatches

from conftest import CRITIC_AGENTS, critic_reply, generator_reply, script_answer_check
from evalfakes import script_judges
from fakeopenai import RESET_MEANINGS, Behaviour, FakeOpenAI, chat_json


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=200.0, help="fixed latency per call")
    parser.add_argument(
        "--per-token-ms", type=float, default=0.0, help="extra latency per completion token"
    )
    parser.add_argument("--rate-429", type=float, default=0.0, help="share of calls answered 429")
    parser.add_argument("--rate-500", type=float, default=0.0, help="share of calls answered 500")
    parser.add_argument(
        "--retry-after", type=float, default=1.0, help="Retry-After of a 429, seconds"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the fault draws")
    parser.add_argument("--rpm", type=int, default=None, help="requests per --window, enforced")
    parser.add_argument("--tpm", type=int, default=None, help="tokens per --window, enforced")
    parser.add_argument(
        "--window", type=float, default=60.0, help="seconds the --rpm / --tpm budgets are per"
    )
    parser.add_argument(
        "--reset-means",
        choices=RESET_MEANINGS,
        default="full",
        help="what x-ratelimit-reset-* states: the time until the budget is full (OpenAI's "
        "meaning) or until the next request fits (headers that mislead)",
    )
    parser.add_argument(
        "--batch-delay",
        type=float,
        default=None,
        help="also answer OpenAI's Files and Batch APIs, a batch completing this many seconds "
        "after it was created (default: no batch API)",
    )
    return parser.parse_args(argv)


def scripted_server(args: argparse.Namespace, make: type[FakeOpenAI] = FakeOpenAI) -> FakeOpenAI:
    """A started fake (``make``, a FakeOpenAI or a subclass) with every ragjury agent
    scripted and the behaviour ``args`` ask for."""
    fake = make(keep_requests=False)
    fake.start()
    fake.behave(
        Behaviour(
            latency=args.latency_ms / 1000,
            latency_per_token=args.per_token_ms / 1000,
            rate_429=args.rate_429,
            rate_500=args.rate_500,
            retry_after=args.retry_after,
            count_tokens=True,
            seed=args.seed,
            rpm=args.rpm,
            tpm=args.tpm,
            window=args.window,
            reset_means=args.reset_means,
        )
    )
    script(fake)
    if args.batch_delay is not None:
        FakeBatches(fake, delay=args.batch_delay)
    return fake


def script(fake: FakeOpenAI) -> None:
    """Answer every ragjury agent as the tests' scripted models do."""
    fake.route("generator", generator_reply)
    for agent in CRITIC_AGENTS:
        fake.route(agent, critic_reply())
    script_answer_check(fake)
    script_judges(fake)
    fake.fallback(chat_json({"ok": True}))


def main(argv: list[str] | None = None) -> int:
    fake = scripted_server(parse_args(argv))
    try:
        print(fake.base_url, flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "stats":
                stats = {**fake.stats(), "cpu_seconds": round(time.process_time(), 3)}
                if fake.batches is not None:  # what the batch API answered, since it started
                    stats["batches_created"] = len(fake.batches.created)
                    stats["batch_lines_answered"] = fake.batches.lines_answered
                    stats["batch_polls"] = fake.batches.polls
                print(json.dumps(stats), flush=True)
            elif command == "reset":
                fake.reset()
                script(fake)
                print("{}", flush=True)
            elif command.startswith("outage "):
                fake.outage(float(command.split()[1]))
                print("{}", flush=True)
            elif command:
                print(json.dumps({"error": f"unknown command {command!r}"}), flush=True)
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
