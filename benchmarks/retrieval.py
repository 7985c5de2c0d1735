"""Retrieval-judging cost per sample: ragjury's RAG triad plus context precision and recall
against the same metrics judged one call per context and one call per statement, as RAGAS
makes them, on samples of 3, 5 and 10 retrieved contexts.

Both approaches run against the same fake endpoint with the same prompts (ragjury's
templates) and samples; the fake counts tokens from the text (about four characters a token).
ragjury judges all of a sample's contexts in one call for context_relevance and one for
context_precision, splits the answer (faithfulness) and the reference (context_recall) once
each and judges their statements in batches; the baseline asks about each context in its own
call for relevance and for precision, and about each statement in its own call, sending the
contexts again every time. answer_relevance is one call in both.

    python benchmarks/retrieval.py
    python benchmarks/retrieval.py --quick
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import anyio

from ragjury.llm import LLM
from ragjury.prompts import Prompt
from ragjury.runner import evaluate_in_memory
from ragjury.schemas import (
    AnswerRelevanceGrade,
    ContextVerdicts,
    MetricName,
    Sample,
    Statements,
    Verdicts,
)

import corpus
from _harness import FakeEndpoint, base_parser, bench_settings, quiet, show, write_result

CONTEXTS = (3, 5, 10)
STATEMENTS = 4
METRICS: tuple[MetricName, ...] = (
    "context_relevance",
    "faithfulness",
    "answer_relevance",
    "context_precision",
    "context_recall",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=None, help="samples per size (20)")
    args = parser.parse_args(argv)
    if args.samples is None:
        args.samples = 5 if args.quick else 20
    return args


def samples(count: int, contexts: int, *, seed: int) -> list[Sample]:
    """Samples with ``contexts`` retrieved contexts of ~60 words; the answer's and the
    reference's ``STATEMENTS`` sentences are stated in the first two."""
    words = corpus.Words(seed)
    out: list[Sample] = []
    for i in range(count):
        facts = [words.sentence(8) for _ in range(STATEMENTS)]
        filler = [" ".join(words.sentence(12) for _ in range(5)) for _ in range(contexts)]
        half = STATEMENTS // 2
        filler[0] = " ".join([*facts[:half], filler[0]])
        filler[1] = " ".join([filler[1], *facts[half:]])
        out.append(
            Sample(
                id=f"sample-{i}",
                question=f"What does the {words.word()} say about the {words.word()}?",
                answer=" ".join(facts),
                contexts=tuple(filler),
                reference=" ".join(facts),
            )
        )
    return out


def per_sample(llm: LLM, count: int) -> dict[str, float]:
    usage = llm.usage
    return {
        "calls": usage.requests / count,
        "prompt_tokens": usage.prompt_tokens / count,
        "completion_tokens": usage.completion_tokens / count,
    }


async def ragjury_metrics(base_url: str, items: list[Sample], db: Path) -> dict[str, Any]:
    settings = bench_settings(base_url, db, concurrency=8)
    async with LLM(settings) as llm:
        results = await evaluate_in_memory(items, settings=settings, llm=llm, metrics=METRICS)
    scored = all(m.outcome == "scored" for r in results for m in r.metrics.values())
    return {**per_sample(llm, len(items)), "all_scored": scored}


async def one_call_each(base_url: str, items: list[Sample], db: Path) -> dict[str, Any]:
    """The same judgements, one call per context and one per statement."""
    settings = bench_settings(base_url, db, concurrency=8)
    prompts = {
        name: Prompt.builtin(name)
        for name in (
            "splitter",
            "verdict",
            "context_relevance",
            "context_precision",
            "answer_relevance",
        )
    }

    async def statements(llm: LLM, sample: Sample, text: str) -> None:
        split = await llm.structured(
            Statements,
            prompts["splitter"].render(question=sample.question, answer=text),
            stage="statement_splitter",
        )
        contexts = list(sample.contexts)
        for statement in split.statements:
            await llm.structured(
                Verdicts,
                prompts["verdict"].render(contexts=contexts, statements=[statement]),
                stage="verdict_judge",
                context={"count": 1, "contexts": contexts},
            )

    async def judge(llm: LLM, sample: Sample) -> None:
        assert sample.answer is not None
        assert sample.reference is not None
        for context in sample.contexts:
            await llm.structured(
                ContextVerdicts,
                prompts["context_relevance"].render(question=sample.question, contexts=[context]),
                stage="context_relevance_judge",
                context={"count": 1},
            )
            await llm.structured(
                ContextVerdicts,
                prompts["context_precision"].render(
                    question=sample.question,
                    contexts=[context],
                    answer=sample.reference,
                    against="reference",
                ),
                stage="context_precision_judge",
                context={"count": 1},
            )
        await statements(llm, sample, sample.answer)
        await statements(llm, sample, sample.reference)
        await llm.structured(
            AnswerRelevanceGrade,
            prompts["answer_relevance"].render(question=sample.question, answer=sample.answer),
            stage="answer_relevance_judge",
        )

    async with LLM(settings) as llm, anyio.create_task_group() as tg:
        for sample in items:
            tg.start_soon(judge, llm, sample)
    return per_sample(llm, len(items))


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with FakeEndpoint(latency_ms=0) as fake, tempfile.TemporaryDirectory() as tmp:
        for size in CONTEXTS:
            items = samples(args.samples, size, seed=size)
            ours = await ragjury_metrics(fake.base_url, items, Path(tmp) / f"r{size}.db")
            base = await one_call_each(fake.base_url, items, Path(tmp) / f"b{size}.db")
            rows.append(
                {
                    "contexts": size,
                    "ragjury": ours,
                    "one_call_each": base,
                    "calls_ratio": round(ours["calls"] / base["calls"], 3),
                    "prompt_tokens_ratio": round(ours["prompt_tokens"] / base["prompt_tokens"], 3),
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
            "statements": STATEMENTS,
            "metrics": list(METRICS),
            "quick": args.quick,
        },
        "sizes": rows,
    }
    path = write_result("retrieval", result, args.out)
    columns = [
        "contexts", "ragjury calls", "one-each calls", "calls ratio",
        "ragjury prompt tokens", "one-each prompt tokens", "prompt tokens ratio",
    ]  # fmt: skip
    table = [
        [
            r["contexts"],
            r["ragjury"]["calls"],
            r["one_call_each"]["calls"],
            r["calls_ratio"],
            r["ragjury"]["prompt_tokens"],
            r["one_call_each"]["prompt_tokens"],
            r["prompt_tokens_ratio"],
        ]
        for r in rows
    ]
    title = (
        f"RAG triad + context precision and recall per sample ({STATEMENTS} statements): "
        "batched vs one call per context and per statement"
    )
    show(title, columns, table, path)
    return 0 if all(r["ragjury"]["all_scored"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
