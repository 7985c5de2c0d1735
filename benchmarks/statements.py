"""Faithfulness cost per sample: ragjury's split-then-batched-verdicts against one verdict
call per statement, on answers of 3, 10 and 30 statements.

Both approaches run against the same fake endpoint with the same prompts (ragjury's splitter
and verdict templates) and the same samples; the fake counts tokens from the text (about four
characters a token), so the token figures grow with what is really sent. ragjury splits the
answer once and judges the statements in batches of ``--verdict-batch`` (default 8); the
baseline splits once and then asks about each statement in its own call, sending the contexts
again every time.

    python benchmarks/statements.py
    python benchmarks/statements.py --quick
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import anyio

from ragjury.config import EvaluationOptions
from ragjury.llm import LLM
from ragjury.prompts import Prompt
from ragjury.runner import evaluate_in_memory
from ragjury.schemas import Sample, Statements, Verdicts

import corpus
from _harness import FakeEndpoint, base_parser, bench_settings, quiet, show, write_result

SIZES = (3, 10, 30)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=None, help="samples per size (20)")
    parser.add_argument("--verdict-batch", type=int, default=8)
    args = parser.parse_args(argv)
    if args.samples is None:
        args.samples = 5 if args.quick else 20
    return args


def per_sample(llm: LLM, samples: int) -> dict[str, float]:
    usage = llm.usage
    return {
        "calls": usage.requests / samples,
        "prompt_tokens": usage.prompt_tokens / samples,
        "completion_tokens": usage.completion_tokens / samples,
    }


async def ragjury_faithfulness(
    args: argparse.Namespace, base_url: str, items: list[Sample], db: Path
) -> dict[str, Any]:
    settings = bench_settings(
        base_url, db, concurrency=8, evaluate=EvaluationOptions(verdict_batch=args.verdict_batch)
    )
    async with LLM(settings) as llm:
        results = await evaluate_in_memory(
            items, settings=settings, llm=llm, metrics=("faithfulness",)
        )
    scores = [scored.metrics["faithfulness"].score for scored in results]
    return {**per_sample(llm, len(items)), "all_supported": scores == [1.0] * len(items)}


async def one_call_per_statement(base_url: str, items: list[Sample], db: Path) -> dict[str, Any]:
    settings = bench_settings(base_url, db, concurrency=8)
    splitter, verdict = Prompt.builtin("splitter"), Prompt.builtin("verdict")
    supported: list[bool] = []

    async def judge(llm: LLM, sample: Sample) -> None:
        assert sample.answer is not None
        split = await llm.structured(
            Statements,
            splitter.render(question=sample.question, answer=sample.answer),
            stage="statement_splitter",
        )
        contexts = list(sample.contexts)
        for statement in split.statements:
            output = await llm.structured(
                Verdicts,
                verdict.render(contexts=contexts, statements=[statement]),
                stage="verdict_judge",
                context={"count": 1, "contexts": contexts},
            )
            supported.extend(v.supported for v in output.verdicts)

    async with LLM(settings) as llm, anyio.create_task_group() as tg:
        for sample in items:
            tg.start_soon(judge, llm, sample)
    return {**per_sample(llm, len(items)), "all_supported": all(supported)}


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with FakeEndpoint(latency_ms=0) as fake, tempfile.TemporaryDirectory() as tmp:
        for size in SIZES:
            items = corpus.samples(args.samples, size, seed=size)
            ours = await ragjury_faithfulness(args, fake.base_url, items, Path(tmp) / f"r{size}.db")
            base = await one_call_per_statement(fake.base_url, items, Path(tmp) / f"b{size}.db")
            tokens_ours = ours["prompt_tokens"] + ours["completion_tokens"]
            tokens_base = base["prompt_tokens"] + base["completion_tokens"]
            rows.append(
                {
                    "statements": size,
                    "ragjury": ours,
                    "one_call_per_statement": base,
                    "calls_ratio": round(ours["calls"] / base["calls"], 3),
                    "tokens_ratio": round(tokens_ours / tokens_base, 3),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    rows = anyio.run(main_async, args)
    result = {
        "settings": {
            "samples_per_size": args.samples,
            "verdict_batch": args.verdict_batch,
            "quick": args.quick,
        },
        "sizes": rows,
    }
    path = write_result("statements", result, args.out)
    columns = [
        "statements", "ragjury calls", "per-statement calls", "calls ratio",
        "ragjury tokens", "per-statement tokens", "tokens ratio",
    ]  # fmt: skip
    table = [
        [
            r["statements"],
            r["ragjury"]["calls"],
            r["one_call_per_statement"]["calls"],
            r["calls_ratio"],
            r["ragjury"]["prompt_tokens"] + r["ragjury"]["completion_tokens"],
            r["one_call_per_statement"]["prompt_tokens"]
            + r["one_call_per_statement"]["completion_tokens"],
            r["tokens_ratio"],
        ]
        for r in rows
    ]
    title = (
        f"Faithfulness per sample: split + batches of {args.verdict_batch} "
        "vs one verdict call per statement"
    )
    show(title, columns, table, path)
    complete = all(r["ragjury"]["all_supported"] for r in rows)
    return 0 if complete else 1


if __name__ == "__main__":
    raise SystemExit(main())
