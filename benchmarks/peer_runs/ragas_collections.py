"""RAGAS faithfulness through its ``collections`` path (instructor), run in RAGAS's own venv.

``python ragas_collections.py SAMPLES.jsonl BASE_URL CONCURRENCY`` prints one JSON line:
samples scored, samples lost (an error or NaN) and the seconds inside the run. Run by
``benchmarks/peers.py``; it imports nothing of ragjury.
"""

import asyncio
import json
import math
import sys
import time
from pathlib import Path


async def main(
    samples: list[dict[str, object]], base_url: str, concurrency: int
) -> dict[str, float]:
    from openai import AsyncOpenAI
    from ragas.llms import llm_factory
    from ragas.metrics.collections import Faithfulness

    client = AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=6)
    metric = Faithfulness(llm=llm_factory("gpt-4o-mini", client=client))
    gate = asyncio.Semaphore(concurrency)
    lost = 0

    async def one(sample: dict[str, object]) -> None:
        nonlocal lost
        async with gate:
            try:
                result = await metric.ascore(
                    user_input=sample["question"],
                    response=sample["answer"],
                    retrieved_contexts=sample["contexts"],
                )
                if result.value is None or math.isnan(float(result.value)):
                    lost += 1
            except Exception:
                lost += 1

    start = time.perf_counter()
    await asyncio.gather(*(one(s) for s in samples))
    seconds = time.perf_counter() - start
    return {"scored": len(samples) - lost, "lost": lost, "in_run_seconds": round(seconds, 3)}


if __name__ == "__main__":
    lines = Path(sys.argv[1]).read_text("utf-8").splitlines()
    figures = asyncio.run(main([json.loads(line) for line in lines], sys.argv[2], int(sys.argv[3])))
    print(json.dumps(figures), flush=True)
